"""The issue's attacks on the callbacks and jobs, replayed on the production stack as a hostile visitor makes them.

``./scripts/serve.sh`` (nginx before gunicorn, 2 workers x 4 threads) with uploads off, an organizer token
and small bounds, sharing its store with a second gunicorn where uploads are on. Every post is a plain HTTP
callback body built from ``/_dash-dependencies`` (benchmarks/dashclient.py), from one address, no token:
each attack is refused or bounded with a sentence, and ``/healthz`` and ``/`` answer throughout.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
import time

import pytest
import requests

from components.shell import JOB_NOTICE_ID
from tests.prod_support import gunicorn, load_dashclient, serve_stack
from whestboard.scoring import MENU_ONLY, SERVED_HELP, UPLOADS_OFF, quoted

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

TOKEN = "edge-attacks-organizer"
HOSTILE_KEEP = {"width": 1024, "depth": 32, "seed": "1", "samples": 1e12}
MARKER = "EDGE-ATTACK-MARKER-7c1"
PRINTER = (f"from whestbench import BaseEstimator\nimport flopscope.numpy as fnp\n\n\nclass Mine(BaseEstimator):\n"
           f"    def predict(self, mlp, budget):\n        print({MARKER!r})\n"
           "        return fnp.zeros((mlp.depth, mlp.width))\n").encode()


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    """(off, on): the production stack with uploads off, and a gunicorn with uploads on over the same store."""
    root = tmp_path_factory.mktemp("edge-attacks")
    shared = dict(WHESTBOARD_ORGANIZER_TOKEN=TOKEN, WHESTBOARD_KEPT_PER_CLIENT="2", WHESTBOARD_JOB_PER_CLIENT="2")
    with serve_stack(root / "off", workers=2, threads=4, WHESTBOARD_ALLOW_UPLOADS="0", **shared) as off, \
            gunicorn("app:server", root / "on", workers=1, threads=2, ready_path="/healthz",
                     WHESTBOARD_ALLOW_UPLOADS="1",
                     WHESTBOARD_DATABASE_URL=f"sqlite:///{root / 'off' / 'whestboard.sqlite'}", **shared) as on:
        yield off, on


def _store(off) -> sqlite3.Connection:
    return sqlite3.connect(off.state_dir / "whestboard.sqlite")


def _count(off, sql: str, *args) -> int:
    con = _store(off)
    try:
        return int(con.execute(sql, args).fetchone()[0])
    finally:
        con.close()


def _dep(deps: list[dict], first_output: str, trigger: str) -> dict:
    return next(d for d in deps if d["output"].lstrip(".").startswith(first_output)
                and any(f"{i['id']}.{i['property']}" == trigger for i in d["inputs"]))


def _values(pairs: dict) -> dict:
    """``{"id.prop": value}`` as the renderer's store of props."""
    out: dict[str, dict] = {}
    for key, value in pairs.items():
        cid, prop = key.rsplit(".", 1)
        out.setdefault(cid, {})[prop] = value
    return out


def _visitor(server, path: str):
    client = dashclient.DashClient(server.base, timeout=120)
    _, deps = client.open(path)
    return client, deps


def _fire(server, path: str, first_output: str, trigger: str, values: dict, **kw) -> dict:
    client, deps = _visitor(server, path)
    return client.fire(_dep(deps, first_output, trigger), _values(values), [trigger], **kw)


def _notice(answer: dict) -> str:
    return ((answer.get("sideUpdate") or {}).get(JOB_NOTICE_ID) or {}).get("children") or ""


def _text(answer: dict) -> str:
    return json.dumps(answer.get("response") or {})


def _healthy(base: str) -> list[int]:
    return [requests.get(base + path, timeout=60).status_code for path in ("/healthz", "/")]


# --------------------------------------------------------------------------- eight requests took the site down


def test_eight_hostile_keeps_at_once_are_refused_and_the_site_answers_throughout(stacks):
    off, _ = stacks
    jobs_before = _count(off, "SELECT count(*) FROM jobs")
    answers: list[dict] = []

    def attack() -> None:
        answers.append(_fire(off, "/playground", "pg-keep-out.children", "pg-keep.n_clicks",
                             {"pg-keep.n_clicks": 1, "pg-params.data": HOSTILE_KEEP}, max_seconds=120))

    attackers = [threading.Thread(target=attack) for _ in range(8)]
    for thread in attackers:
        thread.start()
    probes = []
    while any(t.is_alive() for t in attackers):
        probes += _healthy(off.base)
    for thread in attackers:
        thread.join()
    probes += _healthy(off.base)
    assert len(answers) == 8
    assert {_notice(a) for a in answers} == {"Keeping this MLP cannot start: truth samples 1000000000000 is outside "
                                             "100–100000000: type a whole number in that range"}
    assert probes and set(probes) == {200}
    assert _count(off, "SELECT count(*) FROM jobs") == jobs_before  # no job was launched


def _start(client, dep: dict, values: dict) -> tuple[dict, dict]:
    """A background callback's first post (the job launched or refused), without waiting for its end."""
    outputs = [{"id": dashclient._parse_id(i), "property": p} for i, p in dashclient.split_output(dep["output"])]
    body = {"output": dep["output"], "outputs": outputs if dep["output"].startswith("..") else outputs[0],
            "inputs": [dashclient._arg(a, values) for a in dep["inputs"]],
            "state": [dashclient._arg(a, values) for a in dep.get("state", [])],
            "changedPropIds": [f"{dep['inputs'][0]['id']}.{dep['inputs'][0]['property']}"]}
    first, _ = client.post(body, {}, "bg-start", dep["output"])
    return body, first


def _finish(client, body: dict, first: dict, max_seconds: float = 400.0) -> dict:
    handles = {"cacheKey": first["cacheKey"], "job": first["job"]}
    poll = {**body, "inputs": [{**i, "value": None} for i in body["inputs"]],
            "state": [{**s, "value": None} for s in body["state"]]}
    deadline, progress = time.time() + max_seconds, []
    while time.time() < deadline:
        data, status = client.post(poll, handles, "bg-poll", body["output"])
        if data.get("progress"):
            progress.append(data["progress"])
        if "response" in data or status == 204 or data.get("sideUpdate"):
            return {**data, "progress_seen": progress}
        time.sleep(0.5)
    raise AssertionError(f"no answer after {max_seconds:.0f} s")


def _keep_values(seed: int) -> dict:
    return _values({"pg-keep.n_clicks": 1, "pg-params.data": {"width": 256, "depth": 4, "seed": str(seed),
                                                               "samples": 300_000, "mc": 100}})


def test_affordable_keeps_are_jobs_two_at_a_time_and_kept_datasets_are_bounded_and_dropped(stacks):
    """Eight keeps within the price, one after another: two become jobs (the per-visitor job limit), six are
    refused; the site answers while they run; the third dataset is refused by the kept bound until the visitor
    drops one of theirs on the page."""
    off, _ = stacks
    client, deps = _visitor(off, "/playground")
    keep = _dep(deps, "pg-keep-out.children", "pg-keep.n_clicks")
    started = [_start(client, keep, _keep_values(seed)) for seed in range(1, 9)]
    launched = [s for s in started if not s[1]["job"].startswith("refused")]
    assert len(launched) == 2
    refused = [_notice(_finish(client, body, first)) for body, first in started if (body, first) not in launched]
    assert refused == ["You already have 2 job(s) queued or running (this server allows 2 per visitor): wait for "
                       "one to finish or cancel it."] * 6
    probes = _healthy(off.base)
    kept = [_finish(client, body, first) for body, first in launched]
    assert set(probes + _healthy(off.base)) == {200}
    names = [a["response"]["pg-kept-name"]["data"] for a in kept]
    assert names == ["playground-256x4-1-300000", "playground-256x4-2-300000"]
    assert all("Kept as dataset" in _text(a) and "Drop it" in _text(a) for a in kept)
    assert all("truth: " in json.dumps(a["progress_seen"]) for a in kept)  # the job reported its progress

    third = _finish(client, *_start(client, keep, _keep_values(9)))
    assert _notice(third) == ("Keeping this MLP cannot start: you have kept 2 datasets, this server's limit per "
                              "visitor (WHESTBOARD_KEPT_PER_CLIENT = 2): drop one of yours first")
    drop = _dep(deps, "pg-keep-out.children", "pg-kept-drop.n_clicks")
    dropped = client.fire(drop, _values({"pg-kept-drop.n_clicks": 1, "pg-kept-name.data": names[0]}),
                          ["pg-kept-drop.n_clicks"])
    assert f"Dropped kept dataset {names[0]}" in _text(dropped)
    again = _finish(client, *_start(client, keep, _keep_values(9)))
    assert again["response"]["pg-kept-name"]["data"] == "playground-256x4-9-300000"
    assert requests.get(off.base + "/?", timeout=60).status_code == 200
    assert _count(off, "SELECT count(*) FROM blobs WHERE namespace = 'kept-dataset'") == 2  # only this test keeps


# --------------------------------------------------------------------------- uploads off, paths, many specs


def _upload_on(on) -> str:
    """A visitor stores an estimator through the upload page of the instance where uploads are on."""
    page = dashclient.PageSession(dashclient.DashClient(on.base, timeout=60), "/upload?dataset=v1-warmup").load()
    page.values["upload-file"]["filename"] = ["printer.py"]
    page.click("upload-file", "contents", value=["data:text/x-python;base64," + base64.b64encode(PRINTER).decode()])
    sha = page.values["upload-sha"].get("data")
    assert sha, page.values.get("upload-file-status")
    return sha


def test_uploads_off_runs_and_stores_no_uploaded_code_on_any_path(stacks, tmp_path):
    off, on = stacks
    sha = _upload_on(on)
    uploads_before = _count(off, "SELECT count(*) FROM blobs WHERE namespace = 'upload'")
    runs_before = _count(off, "SELECT count(*) FROM runs")

    lab = _fire(off, "/lab?dataset=v1-warmup", "lab-job-result.data", "lab-job.data", {
        "lab-job.data": {"dataset": "v1-warmup", "mlps": "0", "spec": f"upload:{sha}", "budget": None, "nonce": 1}})
    assert _notice(lab) == f"This lab run cannot start: {quoted('upload:' + sha)}: {MENU_ONLY}"
    playground = _fire(off, "/playground", "pg-job-done.data", "pg-job-request.data", {
        "pg-job-request.data": {"params": {"width": 16, "depth": 4, "seed": "1", "samples": "auto", "mc": 100,
                                           "round": None, "uploads": [sha]}}})
    assert _notice(playground) == f"This playground job cannot start: {quoted('upload:' + sha)}: {UPLOADS_OFF}"

    drop = {"final-upload.contents": ["data:text/x-python;base64," + base64.b64encode(PRINTER).decode()],
            "final-upload.filename": ["alpha.py"], "final-packages.data": []}
    no_token = _fire(off, "/final", "final-packages.data", "final-upload.contents", drop)
    assert "Refused: missing or wrong organizer token; type the organizer token first." in _text(no_token)
    with_token = _fire(off, "/final", "final-packages.data", "final-upload.contents",
                       {**drop, "final-token.value": TOKEN})
    assert f"Refused: {UPLOADS_OFF}." in _text(with_token)
    rescore = requests.post(off.base + "/api/rescore", json={"id": "anything"},
                            headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    assert rescore.status_code == 403 and rescore.json()["error"] == f"not re-scored: {UPLOADS_OFF}"

    assert _count(off, "SELECT count(*) FROM blobs WHERE namespace = 'upload'") == uploads_before
    assert _count(off, "SELECT count(*) FROM runs") == runs_before
    assert not (off.state_dir / "uploads").exists() or not any((off.state_dir / "uploads").iterdir())
    assert set(_healthy(off.base)) == {200}


def test_a_spec_is_never_a_path_and_a_thousand_are_refused_at_once(stacks, tmp_path):
    off, _ = stacks
    folder = tmp_path / "server-folder"
    folder.mkdir()
    (folder / "estimator.py").write_bytes(PRINTER)
    (folder / "neighbour.csv").write_text("secret,1\n")
    uploads_before = _count(off, "SELECT count(*) FROM blobs WHERE namespace = 'upload'")
    sentences = set()
    for spec in (str(folder), str(folder / "estimator.py"), str(tmp_path / "absent"), "/etc", "/etc/passwd.py"):
        answer = _fire(off, "/lab?dataset=v1-warmup", "lab-job-result.data", "lab-job.data", {
            "lab-job.data": {"dataset": "v1-warmup", "mlps": "0", "spec": spec, "budget": None, "nonce": 1}})
        sentences.add(_notice(answer).replace(quoted(spec), "SPEC"))
    assert sentences == {f"This lab run cannot start: unknown estimator SPEC: this server runs {SERVED_HELP}; a path on "
                         "the server is never looked up for a page"}  # the same words whatever is there
    assert _count(off, "SELECT count(*) FROM blobs WHERE namespace = 'upload'") == uploads_before

    specs = [str(tmp_path / f"probe-{i}.py") for i in range(1000)]
    curves = {"curve-estimators.value": specs, "curve-budgets.value": "1B", "curve-mlps.value": "0",
              "convergence-dataset.data": "v1-warmup"}
    drawn = _fire(off, "/convergence?dataset=v1-warmup", "curve-body.children", "curve-estimators.value", curves)
    assert "1,000 estimators in one request: at most 12 are scored at once" in _text(drawn)
    swept = _fire(off, "/convergence?dataset=v1-warmup", "curve-refresh.data", "curve-sweep.n_clicks",
                  {**curves, "curve-sweep.n_clicks": 1})
    assert _notice(swept) == ("This budget sweep cannot start: 1,000 estimators in one request: at most 12 are "
                              "scored at once")
    assert set(_healthy(off.base)) == {200}
