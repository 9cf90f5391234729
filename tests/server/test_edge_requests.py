"""Every callback and job takes its inputs through the core's typed request, prices it, checks the switches and
the token, and refuses with a sentence: hand-made posts to ``/_dash-update-component`` (any store value, any
job payload), answered in process. tests/server/test_edge_attacks.py replays the issue's attacks on the
production stack."""

from __future__ import annotations

import base64
import json
import threading
import time

import pytest

from components.shell import JOB_NOTICE_ID
from tests.conftest import HOSTILE
from tests.pages.served_app import app_on_fresh_store
from whestboard import config
from whestboard.data import (
    default_samples,
    keep_generated,
    kept_datasets,
    parse_shape,
    playground_work,
    truth_work,
)
from whestboard.jobs import recent_jobs
from whestboard.sandbox import ingest_upload
from whestboard.scoring import MENU_ONLY, UPLOADS_OFF, rulebook_for_shape
from whestboard.store import blob_keys

TOKEN = "edge-organizer-token"
HOSTILE_KEEP = {"width": 1024, "depth": 32, "seed": "1", "samples": 1e12}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    with app_on_fresh_store(tmp_path_factory.mktemp("edge"), WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as (http, mp):
        http.dash_app = __import__("app").the_app()
        yield http, mp


@pytest.fixture
def http(site):
    client, _ = site
    return client


@pytest.fixture
def uploads(site):
    """Set the deployment's switch for one test: ``uploads(False)`` serves as gunicorn does with it off."""
    client, mp = site
    server = client.dash_app.server
    previous = server.config["WHESTBOARD_UNDER_GUNICORN"]

    def switch(on: bool) -> None:
        server.config["WHESTBOARD_UNDER_GUNICORN"] = True
        mp.setenv("WHESTBOARD_ALLOW_UPLOADS", "1" if on else "0")

    yield switch
    server.config["WHESTBOARD_UNDER_GUNICORN"] = previous
    mp.delenv("WHESTBOARD_ALLOW_UPLOADS", raising=False)


def _key(http, first_output: str, trigger: str) -> str:
    return next(k for k, v in http.callback_map.items()
                if (k.startswith(first_output) or k.startswith(".." + first_output))
                and any(f"{i['id']}.{i['property']}" == trigger for i in v["inputs"]))


def post(http, first_output: str, trigger: str, values: dict, **kwargs):
    """The callback that ``trigger`` fires and writes ``first_output`` first, every input and state taken
    from ``values`` (``"id.prop"`` -> value; missing ones null), posted as a browser posts it."""
    key = _key(http, first_output, trigger)
    spec = http.callback_map[key]
    listed = spec["output"] if isinstance(spec["output"], list) else [spec["output"]]
    outputs = [{"id": o.component_id, "property": o.component_property} for o in listed]
    body = {"output": key, "outputs": outputs if key.startswith("..") else outputs[0],
            "inputs": [{**i, "value": values.get(f"{i['id']}.{i['property']}")} for i in spec["inputs"]],
            "state": [{**s, "value": values.get(f"{s['id']}.{s['property']}")} for s in spec["state"]],
            "changedPropIds": [trigger]}
    answer = http.post("/_dash-update-component", json=body, **kwargs)
    if not spec.get("background") or answer.status_code != 200 or "job" not in (answer.get_json() or {}):
        return answer
    started = answer.get_json()
    assert started["job"].split("~")[0] == "refused", f"a job was launched: {started}"  # none is, here
    for item in body["inputs"] + body["state"]:
        item["value"] = None
    return http.post("/_dash-update-component", json=body,
                     query_string={"cacheKey": started["cacheKey"], "job": started["job"]}, **kwargs)


def notice(answer) -> str:
    return answer.get_json()["sideUpdate"][JOB_NOTICE_ID]["children"]


def _upload() -> str:
    return ingest_upload((HOSTILE / "good.py").read_bytes(), "good.py").sha256


# --------------------------------------------------------------------------- Keep this MLP


def test_the_issues_keep_post_is_refused_before_any_job(http):
    before = len(recent_jobs(1000))
    answer = post(http, "pg-keep-out.children", "pg-keep.n_clicks", {"pg-keep.n_clicks": 1,
                                                                     "pg-params.data": HOSTILE_KEEP})
    assert notice(answer) == ("Keeping this MLP cannot start: truth samples 1000000000000 is outside "
                              "100–100000000: type a whole number in that range")
    assert len(recent_jobs(1000)) == before
    assert kept_datasets() == []


def test_a_keep_within_the_samples_range_but_over_the_price_is_refused_with_its_price(http):
    params = {"width": 1024, "depth": 32, "seed": "1", "samples": 100_000_000, "mc": 1000}
    price = truth_work(parse_shape(1024, 32, 1), 100_000_000)
    answer = post(http, "pg-keep-out.children", "pg-keep.n_clicks", {"pg-keep.n_clicks": 1, "pg-params.data": params})
    assert notice(answer).startswith(f"Keeping this MLP would cost about {price:.3g} FLOPs, above this "
                                     "server's limit")


def test_a_keep_past_the_kept_bounds_is_refused_before_any_job(http, site):
    _, mp = site
    mp.setenv("WHESTBOARD_KEPT_PER_CLIENT", "0")
    try:
        answer = post(http, "pg-keep-out.children", "pg-keep.n_clicks", {
            "pg-keep.n_clicks": 1, "pg-params.data": {"width": 8, "depth": 2, "seed": "3", "samples": 1000,
                                                      "mc": 100}})
    finally:
        mp.delenv("WHESTBOARD_KEPT_PER_CLIENT")
    assert notice(answer).startswith("Keeping this MLP cannot start: you have kept 0 datasets, this "
                                     "server's limit per visitor (WHESTBOARD_KEPT_PER_CLIENT = 0)")


def _client_id(http, address: str) -> str:
    from server.background import request_client_id

    with http.dash_app.server.test_request_context("/", environ_base={"REMOTE_ADDR": address},
                                                   headers={"User-Agent": "edge-test"}):
        return request_client_id()


def test_only_the_visitor_who_kept_a_dataset_drops_it_from_the_page(http):
    owner = _client_id(http, "10.0.0.1")
    name = keep_generated(parse_shape(8, 2, 77), 1000, owner=owner).name
    values = {"pg-kept-drop.n_clicks": 1, "pg-kept-name.data": name}
    stranger = post(http, "pg-keep-out.children", "pg-kept-drop.n_clicks", values,
                    environ_base={"REMOTE_ADDR": "10.0.0.2"}, headers={"User-Agent": "edge-test"})
    assert "is not yours to drop" in stranger.get_data(as_text=True) and name in blob_keys("kept-dataset")
    dropped = post(http, "pg-keep-out.children", "pg-kept-drop.n_clicks", values,
                   environ_base={"REMOTE_ADDR": "10.0.0.1"}, headers={"User-Agent": "edge-test"})
    assert f"Dropped kept dataset {name}" in dropped.get_data(as_text=True)
    assert name not in blob_keys("kept-dataset")


def test_the_organizer_drops_any_kept_dataset_through_the_api(http):
    name = keep_generated(parse_shape(8, 2, 78), 1000, owner="someone").name
    assert http.delete(f"/api/kept/{name}").status_code == 403
    assert http.delete(f"/api/kept/{name}", headers={"Authorization": "Bearer wrong"}).status_code == 403
    answer = http.delete(f"/api/kept/{name}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200 and answer.get_json() == {"ok": True, "dropped": name}
    assert name not in blob_keys("kept-dataset")
    gone = http.delete(f"/api/kept/{name}", headers={"Authorization": f"Bearer {TOKEN}"})
    assert gone.status_code == 404 and "no kept dataset" in gone.get_json()["error"]


# --------------------------------------------------------------------------- estimator specs


@pytest.mark.parametrize("spec, words", [
    ("upload:SHA", MENU_ONLY),
    (str(HOSTILE / "good.py"), "a path on the server is never looked up"),
    (str(HOSTILE), "a path on the server is never looked up"),
    ("/no/such/folder", "a path on the server is never looked up"),
])
def test_a_lab_job_naming_an_upload_or_a_path_is_refused(http, uploads, spec, words):
    uploads(True)
    sha = _upload()
    stored = blob_keys("upload")
    job = {"dataset": "v1-warmup", "mlps": "0", "spec": spec.replace("SHA", sha), "budget": None, "nonce": 1}
    answer = post(http, "lab-job-result.data", "lab-job.data", {"lab-job.data": job})
    assert notice(answer).startswith("This lab run cannot start: ") and words in notice(answer)
    assert blob_keys("upload") == stored  # no folder copied into the upload store


def test_a_thousand_curves_are_refused_with_a_sentence(http, tmp_path):
    specs = [str(tmp_path / f"probe-{i}.py") for i in range(1000)]
    values = {"curve-estimators.value": specs, "curve-budgets.value": "1B", "curve-mlps.value": "0",
              "convergence-dataset.data": "v1-warmup"}
    drawn = post(http, "curve-body.children", "curve-estimators.value", values)
    assert "1,000 estimators in one request: at most 12 are scored at once" in drawn.get_data(as_text=True)
    swept = post(http, "curve-refresh.data", "curve-sweep.n_clicks", {**values, "curve-sweep.n_clicks": 1})
    assert "1,000 estimators in one request" in notice(swept)


def test_compare_curves_run_no_upload(http, uploads):
    uploads(True)
    values = {"compare-curve-dataset.value": "v1-warmup", "compare-curve-a.value": "mean",
              "compare-curve-b.value": f"upload:{_upload()}", "compare-curve-budgets.value": "1B",
              "compare-curve-mlps.value": "0", "compare-curve-sweep.n_clicks": 1}
    swept = post(http, "compare-curve-refresh.data", "compare-curve-sweep.n_clicks", values)
    assert MENU_ONLY in notice(swept)


# --------------------------------------------------------------------------- uploads off, and the price of uploads


def _playground_job(sha: str) -> dict:
    return {"params": {"width": 16, "depth": 4, "seed": "1", "samples": "auto", "mc": 100, "round": None,
                       "uploads": [sha]}}


def test_uploads_off_refuses_a_playground_job_naming_an_upload_stored_elsewhere(http, uploads):
    sha = _upload()  # stored by an instance where uploads are on: the store is shared
    uploads(False)
    answer = post(http, "pg-job-done.data", "pg-job-request.data", {"pg-job-request.data": _playground_job(sha)})
    assert notice(answer) == (f"This playground job cannot start: 'upload:{sha[:33]}'… (71 characters): "
                              f"{UPLOADS_OFF}")


def test_a_playground_jobs_price_counts_each_upload_at_the_rounds_budget(http, uploads, site):
    _, mp = site
    uploads(True)
    sha = _upload()
    shape = parse_shape(16, 4, 1)
    price = playground_work(shape, default_samples(16, 4), 100) + rulebook_for_shape(shape).flop_budget
    mp.setenv("WHESTBOARD_JOB_MAX_FLOPS", str(price * 0.99))
    try:
        answer = post(http, "pg-job-done.data", "pg-job-request.data", {"pg-job-request.data": _playground_job(sha)})
    finally:
        mp.delenv("WHESTBOARD_JOB_MAX_FLOPS")
    assert notice(answer).startswith(f"This playground job would cost about {price:.3g} FLOPs")


def _drop(http, token, name="alpha.py"):
    data = "data:text/x-python;base64," + base64.b64encode((HOSTILE / "good.py").read_bytes()).decode()
    return post(http, "final-packages.data", "final-upload.contents", {
        "final-upload.contents": [data], "final-upload.filename": [name], "final-packages.data": [],
        "final-token.value": token})


def test_the_finals_drop_zone_stores_nothing_without_the_token_or_with_uploads_off(http, uploads):
    uploads(True)
    stored = blob_keys("upload")
    refused = _drop(http, None).get_data(as_text=True)
    assert "Refused: missing or wrong organizer token; type the organizer token first." in refused
    assert blob_keys("upload") == stored
    uploads(False)
    off = _drop(http, TOKEN).get_data(as_text=True)
    assert f"Refused: {UPLOADS_OFF}." in off and blob_keys("upload") == stored
    uploads(True)
    taken = _drop(http, TOKEN).get_data(as_text=True)
    assert "Packages received: alpha=upload:" in taken


def test_the_final_takes_no_path_and_no_upload_where_uploads_are_off(http, uploads):
    uploads(False)
    form = {"final-run.n_clicks": 1, "final-token.value": TOKEN, "final-round.value": "v1-warmup",
            "final-seed.value": "7", "final-n.value": "2", "final-samples.value": "1000", "final-extra.value": "0"}
    path = post(http, "final-job.data", "final-run.n_clicks", {**form, "final-nominees.value": f"a={HOSTILE}"})
    assert "unknown estimator" in path.get_data(as_text=True) and "never looked up" in path.get_data(as_text=True)
    upload = post(http, "final-job.data", "final-run.n_clicks",
                  {**form, "final-nominees.value": f"a=upload:{'ab' * 32}"})
    assert UPLOADS_OFF in upload.get_data(as_text=True)


def test_a_launched_final_runs_after_waiting_past_its_grants_ten_minutes(http):
    """A final queued behind other jobs longer than its grant's 10 minutes (or delivered again after its Celery
    worker died) ended "grant has expired" in the job; its launcher checked the clock, so the job runs: here
    it gets as far as the request's own fault."""
    from pages import final
    from whestboard.leaderboard import GRANT_TTL_S, organizer_grant

    job = {"round": "no-such-round", "seed": "7", "n": "2", "samples": "1000", "extra": "2",
           "lines": ["alpha=kept:nothing"]}
    job["grant"] = organizer_grant(TOKEN, final._grant_subject(job), now=time.time() - 3 * GRANT_TTL_S)
    launched = post(http, "final-done.data", "final-job.data", {"final-job.data": job})
    assert "grant has expired" in notice(launched)  # the launcher still refuses a stale grant
    answer = final._run_job(lambda _progress: None, job)  # the job body, as a worker takes it long after its launch
    assert "grant" not in answer["error"] and "no-such-round" in answer["error"], answer


def test_a_rescore_is_refused_where_uploads_are_off(http, uploads):
    uploads(False)
    answer = http.post("/api/rescore", json={"id": "anything"}, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 403 and answer.get_json()["error"] == f"not re-scored: {UPLOADS_OFF}"


def test_the_leaderboards_rescore_queues_nothing_where_uploads_are_off(http, uploads):
    uploads(False)
    queued = len(recent_jobs(1000))
    answer = post(http, "lb-rescore-result.children", "lb-rescore.n_clicks", {
        "lb-rescore.n_clicks": 1, "lb-rescore-id.value": "anything", "lb-token.value": TOKEN})
    assert f"Nothing queued: {UPLOADS_OFF}." in answer.get_data(as_text=True)
    assert len(recent_jobs(1000)) == queued


def test_the_upload_queue_runs_no_upload_where_uploads_are_off(uploads, monkeypatch):
    """A job queued where uploads are on and taken by an executor where they are off ends with the sentence."""
    from whestboard.scoring import run_upload_job

    monkeypatch.setenv("WHESTBOARD_ALLOW_UPLOADS", "0")
    assert not config.uploads_allowed()

    class Job:
        spec = {"upload": "ab" * 32, "dataset": "v1-warmup", "mlps": "0"}

    class Context:
        job = Job()

    assert run_upload_job(Context()) == {"ok": False, "error": f"not run: {UPLOADS_OFF}"}


def test_every_answer_above_is_json_a_page_can_show(http):
    """The hooks answer a refused job's poll with the notice; the page keeps serving."""
    assert http.get("/healthz").status_code == 200
    assert json.loads(http.get("/_dash-dependencies").get_data())


# --------------------------------------------------------------------------- the address


def _open(http, path: str, search: str):
    """The page as the browser's router asks for it: the path and the address's query, posted."""
    return http.post("/_dash-update-component", json={
        "output": ".._pages_content.children..._pages_store.data..",
        "outputs": [{"id": "_pages_content", "property": "children"}, {"id": "_pages_store", "property": "data"}],
        "inputs": [{"id": "_pages_location", "property": "pathname", "value": path},
                   {"id": "_pages_location", "property": "search", "value": search}],
        "state": [], "changedPropIds": ["_pages_location.pathname"]})


def _component(tree, component_id: str):
    if isinstance(tree, dict):
        if (tree.get("props") or {}).get("id") == component_id:
            return tree
        return next((found for value in tree.values() if (found := _component(value, component_id))), None)
    if isinstance(tree, list):
        return next((found for item in tree if (found := _component(item, component_id))), None)
    return None


@pytest.mark.parametrize("filters", ["[" * 1500, "%5B" * 1500])
def test_an_explorer_link_with_filters_nested_past_the_parser_opens_the_grid_unfiltered(http, filters):
    """A shared link's ``filters=`` too deeply nested for the JSON parser is a filter that reads as none, as
    every other unreadable filter: the page opens (it answered 400, "nested too deeply", with a traceback logged)."""
    answer = _open(http, "/explorer", f"?dataset=v1-warmup&filters={filters}")
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    grid = _component(answer.get_json()["response"]["_pages_content"]["children"], "mlp-grid")
    assert grid is not None and grid["props"]["filterModel"] == {}


# --------------------------------------------------------------------------- the convergence page's zoom


def _figure(http, frame) -> dict:
    values = {"convergence-dataset.data": "v1-warmup", "convergence-metric.value": "final",
              "convergence-frame.data": frame}
    answer = post(http, "convergence-graph.figure", "convergence-frame.data", values)
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    return answer.get_json()["response"]["convergence-graph"]["figure"]


def _shared_keys() -> set[str]:
    """The keys the shared cache holds (this deployment's folder backend, read as the disk holds it)."""
    import diskcache

    with diskcache.Cache(str(config.state_dir() / "cache")) as cache:
        return {k for k in cache.iterkeys() if isinstance(k, str)}


@pytest.mark.parametrize("frame", [
    {"metric": "final", "x": "abc", "y": [1, 2]},
    {"metric": "final", "x": [1e308, 2], "y": [-1, 1, 3]},
    {"metric": "final", "x": [6, 5]},
    {"metric": "final", "x": list(range(10_000))},
    {"metric": "final", "x": [True, 5]},
    ["final", [1, 2]],
])
def test_a_zoom_the_page_never_sends_draws_the_default_frame(http, frame):
    """The zoom store is the page's own script's, but anyone can post it: an axis that is not two finite log10
    bounds in order reads as the default's (five of these answered 400 or drew a frame nobody zoomed to)."""
    assert _figure(http, frame) == _figure(http, None)


def test_made_up_zooms_are_drawn_but_never_kept_in_the_shared_cache(http):
    """Every frame a post makes up was a new figure kept a day in the shared cache (Redis, which nothing bounds
    but its memory): now only the unzoomed figure is shared, a zoom is kept in the process that drew it."""
    _figure(http, None)
    before = _shared_keys()
    zooms = [_figure(http, {"metric": "final", "x": [4 + i / 100, 12], "y": [-8, 1]}) for i in range(12)]
    assert len({json.dumps(z, sort_keys=True) for z in zooms}) > 1  # the zooms were drawn, each its own
    assert _shared_keys() == before


# --------------------------------------------------------------------------- the state folder's job store


class _Planted:
    """A pickle that, once loaded, creates a file: what a writer of the state folder would plant."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def _launch_and_wait(http, job: dict) -> tuple[dict, dict]:
    """A lab run launched and polled as the page does until it answers: (its handles, the answer)."""
    key = _key(http, "lab-job-result.data", "lab-job.data")
    body = {"output": key, "outputs": {"id": "lab-job-result", "property": "data"},
            "inputs": [{"id": "lab-job", "property": "data", "value": job}], "state": [],
            "changedPropIds": ["lab-job.data"]}
    handles = http.post("/_dash-update-component", json=body).get_json()
    body["inputs"][0]["value"] = None
    for _ in range(600):
        answer = http.post("/_dash-update-component", json=body,
                           query_string={"cacheKey": handles["cacheKey"], "job": handles["job"]})
        if answer.status_code != 200 or "response" in (answer.get_json() or {}):
            return handles, answer
        threading.Event().wait(0.2)
    raise AssertionError("the lab run never answered")


def test_dash_jobs_are_kept_as_json_and_a_pickle_planted_in_the_state_folder_is_never_loaded(http, tmp_path):
    """Dash's job store in the state folder (results, progress, set_props of every background job) was
    pickled, and every poll unpickled what it read: anything that could write one entry there ran code in the
    web worker. A lab run's result now reaches the page through JSON; an entry planted under a poll's keys
    is refused, never loaded."""
    import diskcache

    handles, answer = _launch_and_wait(http, {"dataset": "v1-warmup", "mlps": "0", "spec": "mean", "budget": None,
                                              "nonce": 1})
    assert answer.status_code == 200 and answer.get_json()["response"]["lab-job-result"]["data"]["run_id"]
    key = handles["cacheKey"].split("~")[0]
    marker = tmp_path / "planted-pickle-ran"
    import app

    # the folder the app's job store reads (the app is built once per process, with the state folder of then)
    with diskcache.Cache(app.the_app()._background_manager.handle.directory) as jobs:
        for suffix in ("", "-progress", "-set_props"):
            jobs.set(key + suffix, _Planted(marker))
    body = {"output": _key(http, "lab-job-result.data", "lab-job.data"),
            "outputs": {"id": "lab-job-result", "property": "data"},
            "inputs": [{"id": "lab-job", "property": "data", "value": None}], "state": [],
            "changedPropIds": ["lab-job.data"]}
    polled = http.post("/_dash-update-component", json=body,
                       query_string={"cacheKey": handles["cacheKey"], "job": handles["job"]})
    assert not marker.exists(), "a pickle planted in the job store was loaded by the web worker"
    assert polled.status_code == 400  # the poll ends with the refusal's sentence, as a hand-made one does


# --------------------------------------------------------------------------- a curve post's work


def test_a_curve_posts_reads_of_the_mlps_references_do_not_grow_with_its_points(http, monkeypatch):
    """The most a curve post may name (12 estimators, 32 budgets: 384 points, each keyed on the same MLPs) read
    every MLP's reference once per point: 384 reads of each, 17 s in the web request on a 1000-MLP split. Now
    such a post reads no more references than a post of one point."""
    from whestboard.data import Dataset

    reads: list[int] = []
    truth = Dataset.truth
    monkeypatch.setattr(Dataset, "truth", lambda self, index: (reads.append(int(index)), truth(self, index))[1])

    def drawn(specs: list[str], budgets: str) -> int:
        reads.clear()
        values = {"curve-estimators.value": specs, "curve-budgets.value": budgets, "curve-mlps.value": "",
                  "convergence-dataset.data": "v1-phase1", "curve-x.value": "flops", "curve-y.value": "mse"}
        answer = post(http, "curve-body.children", "curve-estimators.value", values)
        assert answer.status_code == 200 and "curve-error" not in answer.get_data(as_text=True)
        return len(reads)

    one_point = drawn(["cov"], "1B")
    most = drawn(["mean", "cov", "combined", "cumulant:1", "cumulant:2", "cumulant:3",
                  *[f"mc:{100 + i}" for i in range(6)]], "0.001B:2B:32")
    assert most <= one_point, f"384 points read {most} references, one point {one_point}"


@pytest.mark.parametrize("path", ["javascript:alert(document.domain)//", "https://evil.example/", "//evil.example",
                                  {"not": "a path"}])
def test_the_selectors_lead_only_to_the_pages_they_are_made_for(http, path):
    """The round and dataset dropdowns navigate to the page their store names: a store is never believed, so a
    post naming another address (a script URL, another site) leads to the explorer."""
    answer = post(http, "url.href", "selector-dataset.value", {
        "selector-round.value": "v1-warmup", "selector-dataset.value": "v1-warmup",
        "selector-target.data": {"path": path, "dataset": "other", "round": "v1-warmup"}})
    assert answer.status_code == 200, answer.get_data(as_text=True)[:300]
    assert answer.get_json()["response"]["url"]["href"].startswith("/explorer?dataset=v1-warmup")
