"""Callback inputs outside their components' domains, and JSON naming a key twice, answer 400 with a
sentence: one check in server/ for every page, before Dash dispatches (server/domains.py)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from server import background, domains
from tests.leaderboard import submissions_helpers as helpers
from whestboard.leaderboard import import_files, load_report_json

sqlite_store = helpers.sqlite_store

MC_OUTPUT = "pg-mc-readout.children"


@pytest.fixture(scope="module")
def http(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHESTBOARD_STATE_DIR", str(tmp_path_factory.mktemp("domains") / "state"))
        import app

        dash_app = app.the_app()
        client = dash_app.server.test_client()
        client.callback_map = dash_app.callback_map
        yield client


def _readout(http, position, link=None):
    return http.post("/_dash-update-component", json={
        "output": MC_OUTPUT, "outputs": {"id": "pg-mc-readout", "property": "children"},
        "inputs": [{"id": "pg-mc", "property": "value", "value": position}],
        "state": [{"id": "pg-mc-link", "property": "data", "value": link}], "changedPropIds": ["pg-mc.value"]})


def test_a_slider_position_in_its_range_is_answered(http):
    answer = _readout(http, 2)
    assert answer.status_code == 200 and "samples per prediction" in answer.get_data(as_text=True)


@pytest.mark.parametrize("position", [99, 1e300, -1, [1, 2], {"a": 1}, "2", True])
def test_a_slider_position_outside_its_range_is_refused_with_a_sentence(http, position):
    answer = _readout(http, position)
    assert answer.status_code == 400
    assert "pg-mc.value = " in answer.get_json()["error"] and "is not a value this page sends" in \
        answer.get_json()["error"]


def _call(http, output_key, outputs, inputs, state=()):
    return http.post("/_dash-update-component", json={
        "output": output_key,
        "outputs": [{"id": i, "property": p} for i, p in outputs] if output_key.startswith("..")
        else {"id": outputs[0][0], "property": outputs[0][1]},
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
        "changedPropIds": [f"{inputs[0][0]}.{inputs[0][1]}"]})


def _playground_plan(http, **changes):
    values = {"pg-width": 16, "pg-depth": 4, "pg-seed": "1", "pg-samples": "auto", "pg-mc": 2, "pg-round": "auto",
              "pg-uploads": []} | changes
    key = next(k for k in http.callback_map if k.startswith("..pg-address.data..."))
    outputs = [(o.component_id, o.component_property) for o in http.callback_map[key]["output"]]
    return _call(http, key, outputs, [(cid, "value", v) for cid, v in values.items()],
                 [("pg-mc-link", "data", None)])


def test_a_list_where_a_count_belongs_and_a_dict_where_a_round_belongs_are_refused(http):
    count = _call(http, "pg-keep-out.children@" + _dup_hash(http, "pg-keep-out.children", "pg-kept-drop.n_clicks"),
                  [("pg-keep-out", "children")], [("pg-kept-drop", "n_clicks", [1])], [("pg-kept-name", "data", None)])
    assert count.status_code == 400 and "a click count" in count.get_json()["error"]
    round_name = _playground_plan(http, **{"pg-round": {"tag": "v1-warmup"}})
    assert round_name.status_code == 400 and "pg-round.value" in round_name.get_json()["error"]


def _dup_hash(http, output: str, trigger: str) -> str:
    key = next(k for k, v in http.callback_map.items()
               if k.startswith(output + "@") and any(f"{i['id']}.{i['property']}" == trigger for i in v["inputs"]))
    return key.split("@", 1)[1]


def test_the_playground_abuse_is_refused_in_the_page_before_any_job(http):
    answer = _playground_plan(http, **{"pg-width": 1024, "pg-depth": 32, "pg-samples": "100000000"})
    assert answer.status_code == 200
    text = answer.get_data(as_text=True)
    assert "This playground job would cost about 7.13e+15 FLOPs, above this server's limit" in text
    assert '"pg-job-request"' not in text  # nothing handed to the background


def test_a_forged_background_request_is_refused_before_launch(http):
    forged = {"params": {"width": 1024, "depth": 32, "seed": "1", "samples": 100_000_000, "mc": 1000,
                         "round": None, "uploads": []}}
    from whestboard.jobs import recent_jobs

    before = len(recent_jobs(1000))
    body = {"output": "pg-job-done.data", "outputs": {"id": "pg-job-done", "property": "data"},
            "inputs": [{"id": "pg-job-request", "property": "data", "value": forged}], "state": [],
            "changedPropIds": ["pg-job-request.data"]}
    started = http.post("/_dash-update-component", json=body)
    assert started.status_code == 200 and started.get_json()["job"]
    assert len(recent_jobs(1000)) == before  # no job recorded, none launched
    body["inputs"][0]["value"] = None
    poll = http.post("/_dash-update-component", json=body,
                     query_string={"cacheKey": started.get_json()["cacheKey"], "job": started.get_json()["job"]})
    notice = poll.get_json()["sideUpdate"]["whestboard-job-notice"]
    assert notice["is_open"] and notice["children"].startswith("This playground job would cost about 7.13e+15 FLOPs")


def test_every_background_callback_declares_its_price(http):
    jobs = {key: spec for key, spec in http.callback_map.items() if spec.get("background")}
    assert len(jobs) >= 3
    for key, spec in jobs.items():
        what, cost = getattr(spec["callback"], background.PRICE_ATTR, (None, None))
        assert what and callable(cost), f"{key} has no price (server.background.priced)"


def test_a_clientside_callback_or_a_foreign_output_is_refused(http):
    seed = _call(http, "pg-seed.value", [("pg-seed", "value")], [("pg-new-seed", "n_clicks", 1)])
    assert seed.status_code == 400 and "names no server callback" in seed.get_json()["error"]
    wrong_outputs = http.post("/_dash-update-component", json={
        "output": MC_OUTPUT, "outputs": {"id": "somewhere-else", "property": "children"},
        "inputs": [{"id": "pg-mc", "property": "value", "value": 1}], "state": [], "changedPropIds": []})
    assert wrong_outputs.status_code == 400


def test_a_stored_value_no_page_holds_answers_400_not_500(http):
    key = next(k for k in http.callback_map if k.startswith("..lab-heatmap.figure"))
    answer = _call(http, key, [("lab-heatmap", "figure"), ("lab-scatter", "figure")], [("lab-layer", "value", 1)],
                   [("lab-current-run", "data", [[1]])])
    assert answer.status_code == 400 and "could not use the values it was sent" in answer.get_data(as_text=True)


def test_a_repeated_json_key_is_refused_naming_it(http):
    body = ('{"output": "pg-mc-readout.children", "outputs": {"id": "pg-mc-readout", "property": "children"}, '
            '"inputs": [{"id": "pg-mc", "property": "value", "value": 1, "value": 99}], "state": []}')
    answer = http.post("/_dash-update-component", data=body, content_type="application/json")
    assert answer.status_code == 400 and answer.get_json()["error"].startswith("duplicate key 'value'")


def test_a_report_with_a_second_results_block_is_refused(tmp_path):
    text = '{"results": {"score": 1.0}, "meta": {}, "results": {"score": 0.0}}'
    report, problem = load_report_json(text.encode(), "run.json")
    assert report is None and "duplicate key 'results'" in problem


def test_junk_from_every_callback_of_every_page_gets_no_5xx(http):
    """A small in-process round of the services test's fuzz (tests/server/test_front_door.py)."""
    dependencies = http.get("/_dash-dependencies").get_json()
    statuses = [post_junk(http.post, dependencies, random.Random(seed)) for seed in range(150)]
    assert not [s for s in statuses if s >= 500]
    assert statuses.count(400) > 50  # most junk is refused by the check, not by luck


JUNK = (99, 1e300, -1, [1, 2], {"a": 1}, "x" * 50, None, True, [], {}, "0:8", 3.5, [[1]], {"tag": "v1-warmup"},
        "", -1e308, 2**70, "v1-warmup", 0)


def _concrete(raw_id: str):
    """A component id as a page sends it: a pattern-matching id's wildcards become one index."""
    if not raw_id.startswith("{"):
        return raw_id
    return {k: (0 if isinstance(v, list) else v) for k, v in json.loads(raw_id).items()}


def junk_body(dependencies: list[dict], rng: random.Random) -> dict:
    """One callback of the app (from ``/_dash-dependencies``, as the renderer reads them), every input and
    state a value drawn from JUNK; its name, outputs and ids are right, so the values are what is judged."""
    dep = rng.choice(dependencies)
    key = dep["output"]
    parts = key[2:-2].split("...") if key.startswith("..") else [key]
    outputs = [{"id": _concrete(p.rsplit(".", 1)[0]), "property": p.rsplit(".", 1)[1]} for p in parts]

    def entry(item):
        one = {"id": _concrete(item["id"]), "property": item["property"], "value": rng.choice(JUNK)}
        return [one] if item["id"].startswith("{") else one

    inputs = dep["inputs"]
    return {"output": key, "outputs": outputs if key.startswith("..") else outputs[0],
            "inputs": [entry(i) for i in inputs], "state": [entry(i) for i in dep.get("state", [])],
            "changedPropIds": [f"{inputs[0]['id']}.{inputs[0]['property']}"] if inputs else []}


def post_junk(post, dependencies: list[dict], rng: random.Random) -> int:
    return post("/_dash-update-component", json=junk_body(dependencies, rng)).status_code


def test_the_domain_of_a_value_comes_from_the_component():
    from dash import dcc

    index = domains.DomainIndex([dcc.Slider(id="s", min=0, max=4), dcc.Dropdown(id="d", multi=True, options=[])])
    assert index.check("s", "value")(4) is None and index.check("s", "value")(5) is not None
    assert index.check("d", "value")(["a", "b"]) is None and index.check("d", "value")([{"a": 1}]) is not None
    assert index.check("anything", "n_clicks")(3) is None and index.check("anything", "n_clicks")(-1) is not None


def test_an_organizer_edit_naming_a_field_twice_is_refused_naming_it(sqlite_store, monkeypatch, tmp_path):
    from flask import Flask

    from server import api
    from tests.leaderboard.submissions_helpers import submission_row, write_csvs
    from whestboard.leaderboard import get_submission

    monkeypatch.setenv("WHESTBOARD_ORGANIZER_TOKEN", "token")
    import_files([write_csvs(tmp_path / "seed", [submission_row("s-1", "alpha")])])
    app = Flask(__name__)
    app.register_blueprint(api.blueprint)
    answer = app.test_client().patch("/api/submissions/s-1", data='{"team": "beta", "team": "gamma"}',
                                     headers={"Authorization": "Bearer token"}, content_type="application/json")
    assert answer.status_code == 400 and answer.get_json()["error"].startswith("duplicate key 'team'")
    assert get_submission("s-1").team == "alpha"


def test_the_pages_router_is_a_callback_before_the_first_request(tmp_path):
    """Dash registers the pages' router callback in a hook of the first request, after marking it done: a
    page's first post on another thread meanwhile named no callback yet and the edge answered 400 (a fresh
    gunicorn worker met by several visitors at once). A freshly built app has it before any request."""
    probe = ("import app; a = app.the_app(); "
             "print('.._pages_content.children..._pages_store.data..' in a.callback_map)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "WHESTBOARD_STATE_DIR": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "True"
