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

import pytest
import requests

from tests.browser_helpers import wait_for_dash
from tests.conftest import HOSTILE
from whestboard.store import database as db

DATASET = "v1-warmup"


@pytest.fixture()
def server_store(state_dir, monkeypatch):
    """Read the live server's own run store from the test process."""
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state_dir))
    monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    db.reset_engines()
    yield
    db.reset_engines()


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
    from whestboard.scoring import runstore

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
    report = runstore.get_run(run_id)
    assert report["source"] == "upload" and report["estimator"]["kind"] == "upload"
    assert report["estimator"]["code_sha256"] == sha
    assert report["mlp_indices"] == [0, 1] and report["results"]["n_failed_mlps"] == 0
    listed = {r["run_id"]: r for r in runstore.list_runs(dataset_key=DATASET)}
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
