"""In the browser: upload an estimator, watch it queue, pass the contract and get scored, then find it everywhere.

The live app runs the job in its own executor thread; the estimator in its sandbox.
A hostile upload is refused at the contract check with what to fix, while the app
keeps answering.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
import requests

from tests.browser_helpers import wait_for_dash
from tests.conftest import HOSTILE, checked_page
from whestboard.store import reset_engines

DATASET = "v1-warmup"


@pytest.fixture()
def server_store(state_dir, monkeypatch):
    """Read the live server's own run store from the test process."""
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state_dir))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    reset_engines()
    yield
    reset_engines()


def upload(page, path: Path, mlps: str) -> str:
    page.goto(page.base_url + f"/upload?dataset={DATASET}")
    wait_for_dash(page)
    page.set_input_files("#upload-file input[type=file]", str(path))
    page.wait_for_selector("#upload-sha-text")
    sha = page.inner_text("#upload-sha-text").strip()
    page.fill("#upload-mlps", mlps)
    page.click("#upload-run")
    return sha


def watch_until_finished(page, timeout_s: float = 240) -> list[str]:
    """Every distinct status line the page showed until the job ended."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        phase = page.locator("#upload-phase")
        if phase.count():
            text = phase.inner_text()
            if not seen or seen[-1] != text:
                seen.append(text)
            if text.startswith(("Done", "Failed", "Cancelled")):
                return seen
        page.wait_for_timeout(250)
    raise AssertionError(f"job did not finish; saw {seen}")


def test_upload_scores_in_the_sandbox_and_lands_in_the_store(page, server_store):
    from whestboard.scoring import get_run, list_runs

    path = HOSTILE / "good.py"
    sha = upload(page, path, "0:2")
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    seen = watch_until_finished(page)
    assert seen[-1].startswith("Done"), seen
    assert any("contract" in s or "queue" in s or "scor" in s for s in seen[:-1]), seen  # progress was shown

    assert page.locator("#upload-verdicts .verdict-row").count() == 2
    assert page.locator("#upload-verdicts .verdict-badge").all_inner_texts() == ["ok", "ok"]
    assert "✓ predict" in page.inner_text("#upload-contract")
    assert "seccomp on" in page.inner_text("#upload-confinement")
    assert "private /tmp tmpfs" in page.inner_text("#upload-confinement")

    run_id = page.inner_text("#upload-run-id").strip()
    report = get_run(run_id)
    assert report["source"] == "upload" and report["estimator"]["kind"] == "upload"
    assert report["estimator"]["code_sha256"] == sha
    assert report["mlp_indices"] == [0, 1] and report["results"]["n_failed_mlps"] == 0
    listed = {r["run_id"]: r for r in list_runs(dataset_key=DATASET)}
    assert listed[run_id]["source"] == "upload"

    page.wait_for_selector("#upload-layers .main-svg")
    legend = page.locator("#upload-layers .legendtext").all_text_contents()
    assert {"good.py", "mean propagation", "covariance propagation"} <= set(legend)

    with page.expect_download() as download:
        page.click("#upload-download-button")
    payload = json.loads(Path(download.value.path()).read_text())
    assert payload["schema_version"] == "1.1" and payload["whestboard"]["run_id"] == run_id
    assert payload["results"]["per_mlp"][0]["flops_used"] == report["results"]["per_mlp"][0]["flops_used"]
    assert [v["verdict"] for v in payload["whestboard"]["sandbox"]["verdicts"]] == ["ok", "ok"]

    page.click("#upload-convergence-link")
    wait_for_dash(page)
    page.wait_for_selector(".js-plotly-plot .main-svg")
    dots = page.evaluate(
        """(runId) => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(g =>
               (g.data || []).filter(t => JSON.stringify(t.customdata || []).includes(runId)).map(t => t.name))""",
        run_id,
    )
    assert dots == ["highlighted: estimator:good.py"], dots  # its dot, drawn highlighted


def test_the_upload_result_leads_with_score_mse_and_mc_at_b_and_links_its_place_on_the_band(page, server_store):
    """The issue's try: a valid estimator on v2-phase2 MLPs 0:4. The result leads, above the verdicts, with the
    lab's own cards from the run's report (score, mean MSE, MC@B and "x better than sampling", C), and its link
    opens the convergence band with the run's dot highlighted."""
    from components.format import sci
    from whestboard.scoring import get_run, sampling_verdict

    page.goto(page.base_url + "/upload?dataset=v2-phase2")
    wait_for_dash(page)
    page.set_input_files("#upload-file input[type=file]", str(HOSTILE / "good.py"))
    page.wait_for_selector("#upload-sha-text")
    page.fill("#upload-mlps", "0:4")
    page.click("#upload-run")
    seen = watch_until_finished(page, timeout_s=420)
    assert seen[-1].startswith("Done"), seen
    page.wait_for_selector("#upload-result-summary")
    report = get_run(page.inner_text("#upload-run-id").strip())
    results, mc = report["results"], report["mc_reference"]
    assert report["mlp_indices"] == [0, 1, 2, 3] and report["dataset"]["key"] == "v2-phase2"
    score = page.inner_text("#upload-card-score")
    assert score.startswith("Score = MSE x max(0.1, C/B)\n" + sci(results["adjusted_final_layer_score"]))
    assert page.inner_text("#upload-card-mse").startswith("Final-layer MSE (mean)\n" + sci(results["final_layer_mse"]))
    card_mc = page.inner_text("#upload-card-mc")
    assert card_mc.startswith("MC@B\n" + sci(mc["mc_at_budget"])) and sampling_verdict(mc["score_vs_mc"]) in card_mc
    assert "C = F, the metered FLOPs (residual time is gated at 0.4 s, not priced)" in page.inner_text(
        "#upload-card-compute")
    summary = page.locator("#upload-result-summary").bounding_box()
    verdicts = page.locator("#upload-verdicts").bounding_box()
    assert summary["y"] + summary["height"] <= verdicts["y"]  # it leads: above the per-MLP verdicts
    page.click("#upload-band-link")
    page.wait_for_url("**/convergence?dataset=v2-phase2&highlight=estimator*")
    wait_for_dash(page)
    page.wait_for_selector(".js-plotly-plot .main-svg")
    dots = page.evaluate(
        """(runId) => Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(g =>
               (g.data || []).filter(t => JSON.stringify(t.customdata || []).includes(runId)).map(t => t.name))""",
        report["run_id"],
    )
    assert dots == [f"highlighted: estimator:{report['estimator']['label']}"], dots


def test_the_mlps_and_team_are_in_the_address_and_a_reload_keeps_them(page):
    """Every choice a page offers is in its address (the file cannot be): the MLPs and the team typed are
    written there and a reload opens on them; an empty selection (every MLP) is written as the whole range."""
    page.goto(page.base_url + f"/upload?dataset={DATASET}")
    wait_for_dash(page)
    page.fill("#upload-mlps", "2:5")
    page.fill("#upload-team", "team x")
    page.wait_for_function("() => new URLSearchParams(location.search).get('team') === 'team x'")
    assert parse_qs(urlparse(page.url).query) == {"dataset": [DATASET], "mlps": ["2:5"], "team": ["team x"]}
    page.reload()
    wait_for_dash(page)
    assert page.input_value("#upload-mlps") == "2:5" and page.input_value("#upload-team") == "team x"
    from whestboard.data import get_dataset
    from whestboard.scoring import selection_text

    every = selection_text(get_dataset(DATASET).indices)
    page.fill("#upload-mlps", "")
    page.wait_for_function("all => new URLSearchParams(location.search).get('mlps') === all", arg=every)
    page.reload()
    wait_for_dash(page)
    assert page.input_value("#upload-mlps") == every


def test_hostile_upload_fails_the_contract_with_a_fix_while_the_app_answers(page, live_server):
    latencies: list[float] = []
    failures: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                if requests.get(live_server + "/healthz", timeout=10).status_code != 200:
                    failures.append("non-200")
            except requests.RequestException as exc:
                failures.append(repr(exc))
            latencies.append(time.monotonic() - started)
            stop.wait(0.2)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        upload(page, HOSTILE / "fork_bomb.py", "0")
        seen = watch_until_finished(page)
    finally:
        stop.set()
        poller.join(15)
    assert seen[-1].startswith("Failed: contract failed at predict: fork"), seen
    contract = page.inner_text("#upload-contract")
    assert "✗ predict" in contract and "Fix: Do not start processes" in contract
    assert not failures and latencies and max(latencies) < 5.0


# -- a folder-shaped submission on a small dataset the user added ----------------------------------------

FOLDER_ESTIMATOR = '''import json
from pathlib import Path

from whestbench.estimators import MeanPropagationEstimator

from tools.scale import factor


class Estimator(MeanPropagationEstimator):
    def setup(self, context):
        self.shift = json.loads((Path(__file__).parent / "corrector.json").read_text())["shift"]

    def predict(self, mlp, budget):
        return super().predict(mlp, budget) * factor() + self.shift
'''


@pytest.fixture(scope="module")
def small_dataset_server(tmp_path_factory):
    """The app with a 3-MLP dataset of the user's own (WHESTBOARD_DATASETS) besides the embedded data."""
    from tests.conftest import serve_app
    from tests.upstream import make_official

    root = tmp_path_factory.mktemp("small")
    dataset = make_official(root / "three-mlps", width=16, depth=3, n_samples=2000, seeds=[5, 6, 7])
    state = root / "state"
    state.mkdir()
    with serve_app(state, WHESTBOARD_DATASETS=str(dataset)) as base:
        yield base


@pytest.fixture()
def folder_files(tmp_path) -> list[Path]:
    """A submission folder's files, picked together: the entry, a data file setup() reads, a helper module."""
    files = {"estimator.py": FOLDER_ESTIMATOR, "corrector.json": '{"shift": 0.0125}',
             "scale.py": "def factor():\n    return 0.97\n"}
    paths = []
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text.replace("from tools.scale", "from scale"))
        paths.append(path)
    return paths


@pytest.mark.services
def test_a_folder_shaped_upload_ships_its_files_and_scores_the_default_mlps_of_a_small_dataset(
        browser, small_dataset_server, folder_files):
    with checked_page(browser, small_dataset_server) as page:
        page.goto(page.base_url + "/upload")
        wait_for_dash(page)
        assert "three-mlps" in page.inner_text("#selector-row")  # the user's dataset, not the embedded one
        assert page.input_value("#upload-mlps") == "0:3"  # every MLP it has
        page.set_input_files("#upload-file input[type=file]", [str(p) for p in folder_files])
        page.wait_for_selector("#upload-sha-text")
        shipped = page.locator("#upload-shipped .shipped-file").all_inner_texts()
        assert [s.split(" ")[0] for s in shipped] == ["corrector.json", "estimator.py", "scale.py"]
        page.click("#upload-run")
        seen = watch_until_finished(page)
        assert seen[-1].startswith("Done"), seen
        assert page.locator("#upload-verdicts .verdict-badge").all_inner_texts() == ["ok", "ok", "ok"]
        assert "v2-phase2" in page.inner_text("#upload-rule") and "no numpy" in page.inner_text("#upload-rule")
        with page.expect_download() as download:
            page.click("#upload-download-button")
        report = json.loads(Path(download.value.path()).read_text())["whestboard"]
        assert report["shipped"]["mode"] == "folder"
        assert report["shipped"]["files"] == ["corrector.json", "estimator.py", "scale.py"]
        assert report["grader_environment"]["round_tag"] == "v2-phase2" and report["mlp_indices"] == [0, 1, 2]
        stored = page.evaluate("() => JSON.parse(window.sessionStorage.getItem('session-uploads') || 'null')")
        assert stored and stored[-1]["dataset"] == "three-mlps" and stored[-1]["run_id"]
        assert stored[-1]["upload"] == page.inner_text("#upload-sha-text").strip()

        page.fill("#upload-mlps", "0:4")  # checked as it is typed, before anything is queued
        page.wait_for_selector("#upload-mlps.is-invalid")
        assert "not in this dataset" in page.inner_text("#upload-mlps-feedback")


@pytest.mark.services
def test_a_numpy_import_fails_under_phase2_with_whests_code_and_a_hint(browser, small_dataset_server, tmp_path):
    path = tmp_path / "estimator.py"
    path.write_text("import numpy as np\n" + FOLDER_ESTIMATOR.replace("from tools.scale import factor\n", "")
                    .replace(" * factor()", ""))
    with checked_page(browser, small_dataset_server) as page:
        page.goto(page.base_url + "/upload")
        wait_for_dash(page)
        page.set_input_files("#upload-file input[type=file]", str(path))
        page.wait_for_selector("#upload-lone-note")
        page.click("#upload-run")
        seen = watch_until_finished(page)
        assert seen[-1] == "Failed: contract failed at load (ESTIMATOR_MISSING_MODULE)", seen
        assert page.inner_text("#upload-error-code") == "ESTIMATOR_MISSING_MODULE"
        assert page.inner_text("#upload-error-hint").startswith("What to do: Use flopscope.numpy instead")
        card = page.inner_text("#upload-job-card")
        assert "worker.py" not in card
        # one message (it was three copies of whest's 600 characters), and no advice about helper modules
        assert card.count("cannot be imported") == 1 and "couldn't import" not in card and "helper" not in card
        assert "failed with ESTIMATOR_MISSING_MODULE: what happened and what to do are above" in \
            page.inner_text("#upload-contract")
