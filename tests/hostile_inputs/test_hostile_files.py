"""Damaged data files against a real server: each costs only what it holds, says which file and why.

Found by serving a copy of the embedded data with ``data/v1-warmup/mlps/00003.npz``
truncated to half: ``/`` was blank with a 500, so were the explorer, the undamaged
``/mlp/v1-warmup/2`` and the leaderboard of every round (``BadZipFile`` from
``compact.read_mlp_record``), while ``/healthz`` answered 200 with ``"broken": {}``.
Garbage in a ``band.json`` showed a raw JSON decoder message, and a corrupt per-MLP
band file was reported as "measured against another reference".

Here one 2-worker gunicorn server (the image's command line) serves a copy of the
embedded data with three damaged files, one per dataset: a truncated MLP record
(v1-warmup), garbage in a band manifest (v1-phase1) and a truncated per-MLP band
file (v2-phase2). Every page must answer without a server error and name the
damaged file and the reason where it matters; every other MLP is served with the
numbers its own file holds; a refused run stores nothing; the data folder is
byte-for-byte what it was, but for the files the test damaged; and the server keeps
answering. The browser checks fail on any console error.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import requests
from whestbench.budget import ROUNDS, mc_at_bm

from components.format import sci
from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page
from tests.prod_support import REPO, gunicorn, load_dashclient

dashclient = load_dashclient()
pytestmark = [pytest.mark.slow, pytest.mark.services]

TIMEOUT_S = 60
RECORD = Path("v1-warmup/mlps/00003.npz")  # truncated to half
MANIFEST = Path("v1-phase1/band/band.json")  # garbage
BAND_FILE = Path("v2-phase2/band/mlps/00002.json")  # truncated to half
PAGES = ["/", "/explorer?dataset=v1-warmup", "/mlp/v1-warmup/2", "/mlp/v1-warmup/3", "/lab?dataset=v1-warmup",
         *(f"/leaderboard?round={tag}" for tag in ROUNDS), *(f"/convergence?round={tag}" for tag in ROUNDS)]


def _truncate(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


def digests(root: Path) -> dict[str, str]:
    """The data folder's files; its default state folder (``.state``, a cache other tests write) is not data."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".state" not in p.relative_to(root).parts}


class Site:
    """The served copy of the data, what the test did to it, and the server."""

    def __init__(self, data: Path, server) -> None:
        self.data = data
        self.server = server
        self.base = server.base
        self.damaged = {RECORD, MANIFEST, BAND_FILE}

    def path(self, relative: Path) -> Path:
        return self.data / relative


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile-files") / "data"
    shutil.copytree(REPO / "data", data, ignore=shutil.ignore_patterns(".state"))
    _truncate(data / RECORD)
    (data / MANIFEST).write_text("garbage{ not a band manifest")
    _truncate(data / BAND_FILE)
    with gunicorn("app:server", tmp_path_factory.mktemp("hostile-files-state"), workers=2, threads=2,
                  ready_path="/healthz", WHESTBOARD_DATA_DIR=str(data), WHESTBOARD_DATASETS="") as server:
        yield Site(data, server)


def load(site: Site, path: str):
    """The page as the browser renders it (every callback fired); raises on any HTTP error."""
    return dashclient.PageSession(dashclient.DashClient(site.base, timeout=TIMEOUT_S), path).load()


def text(page) -> str:
    return json.dumps(page.values, ensure_ascii=False)


def assert_still_serving(site: Site) -> None:
    assert site.server.proc.poll() is None, "the server died"
    health = requests.get(site.base + "/healthz", timeout=TIMEOUT_S)
    assert health.status_code == 200 and health.json()["ok"] is True


def readable_variances(site: Site, dataset: str) -> dict[int, float]:
    """avg_variance of each MLP whose record numpy itself can read, straight from the files."""
    out = {}
    for path in sorted((site.data / dataset / "mlps").glob("*.npz")):
        try:
            with np.load(path) as z:
                out[int(path.stem)] = float(z["avg_variance"])
        except Exception:  # noqa: BLE001 - whatever numpy cannot read is what the app must call damaged
            continue
    return out


def runs_stored(site: Site) -> list[tuple]:
    con = sqlite3.connect(f"file:{site.server.state_dir / 'whestboard.sqlite'}?mode=ro", uri=True)
    try:
        return sorted(con.execute("SELECT dataset_key, mlp_indices FROM runs"))
    finally:
        con.close()


# --------------------------------------------------------------------------- every page answers


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_without_a_server_error(site, path):
    assert requests.get(site.base + path, timeout=TIMEOUT_S).status_code == 200
    page = load(site, path)
    assert page.fired > 0
    assert "Traceback" not in text(page)
    assert_still_serving(site)


def test_healthz_is_degraded_naming_the_damaged_file_and_its_reason(site):
    health = requests.get(site.base + "/healthz", timeout=TIMEOUT_S)
    assert health.status_code == 200  # degraded, still serving: see server.health
    report = health.json()
    datasets = report["checks"]["datasets"]
    assert report["ok"] is True and report["degraded"] is True and datasets["degraded"] is True
    assert datasets["served"] == sorted(ROUNDS) and datasets["broken"] == {}
    assert datasets["damaged"] == {"v1-warmup": {
        str(site.path(RECORD)): "the archive is truncated or corrupt (BadZipFile: File is not a zip file)"}}


def test_home_names_the_damaged_file_and_counts_the_readable_mlps(site):
    shown = text(load(site, "/"))
    assert str(site.path(RECORD)) in shown and "the archive is truncated or corrupt (BadZipFile" in shown
    assert "31 readable of 32 (1 damaged)" in shown
    assert f"python -m whestboard bake --round v1-warmup --n-mlps 32 --samples 1048576 --out {site.data / 'v1-warmup'}" \
        in shown


def test_the_explorer_keeps_every_readable_mlp_and_marks_the_damaged_one(site):
    page = load(site, "/explorer?dataset=v1-warmup")
    rows = {row["index"]: row for row in page.values["mlp-grid"]["rowData"]}
    variances = readable_variances(site, "v1-warmup")
    assert sorted(rows) == list(range(32)) and sorted(variances) == [i for i in range(32) if i != 3]
    assert rows[3]["damaged"] is True and rows[3]["avg_variance"] is None
    assert rows[3]["status"] == (f"damaged: {site.path(RECORD)}: the archive is truncated or corrupt "
                                 "(BadZipFile: File is not a zip file)")
    manifest = json.loads((site.data / "v1-warmup" / "whestboard-dataset.json").read_text())
    assert rows[3]["mlp"] == f"[{manifest['mlp_names'][3]}](/mlp/v1-warmup/3)"
    for index, variance in variances.items():  # nothing lost: each row is its own file's number
        assert rows[index]["avg_variance"] == variance and rows[index]["status"] == "ok"

    # MC@B over the 31 readable MLPs, by whestbench's own formula; over all 32 it would read differently
    over_readable = sci(mc_at_bm(float(np.mean(list(variances.values()))), ROUNDS["v1-warmup"]))
    original = [float(np.load(p)["avg_variance"]) for p in sorted((REPO / "data/v1-warmup/mlps").glob("*.npz"))]
    assert over_readable != sci(mc_at_bm(float(np.mean(original)), ROUNDS["v1-warmup"]))
    facts = json.dumps(page.values.get("dataset-facts"))
    shown = text(page)
    assert over_readable in shown and "31 of 32 MLPs (1 damaged, left out)" in shown
    assert "dataset-damaged" in page.values and str(site.path(RECORD)) in facts + shown


def test_the_damaged_mlp_page_says_which_file_and_why_and_its_neighbour_renders(site):
    damaged = load(site, "/mlp/v1-warmup/3")
    assert "mlp-damaged" in damaged.values and "mlp-page" not in damaged.values
    shown = text(damaged)
    assert str(site.path(RECORD)) in shown and "the archive is truncated or corrupt (BadZipFile" in shown
    assert "python -m whestboard bake" in shown

    neighbour = load(site, "/mlp/v1-warmup/2")
    assert "mlp-page" in neighbour.values and "mlp-damaged" not in neighbour.values
    ribbon = neighbour.values["mlp-ribbon"]["figure"]
    assert ribbon["data"], "the undamaged MLP's ribbon has no traces"


def test_a_run_of_the_damaged_mlp_is_refused_before_any_work_and_stores_nothing(site):
    before = runs_stored(site)
    page = load(site, "/lab?dataset=v1-warmup&mlps=3&estimator=mean")
    page.click("lab-run", max_seconds=TIMEOUT_S)
    refusal = json.dumps(page.values["lab-form-error"].get("children"))
    assert "MLP 3" in refusal and "lab-error" in refusal
    assert str(site.path(RECORD)) in refusal and "python -m whestboard bake" in refusal
    assert not page.values.get("lab-job", {}).get("data"), "a job was started for a damaged MLP"
    assert runs_stored(site) == before
    assert_still_serving(site)


def test_a_run_of_an_undamaged_mlp_of_the_same_dataset_is_scored(site):
    page = load(site, "/lab?dataset=v1-warmup&mlps=2&estimator=mean")
    page.values["lab-fresh"]["value"] = True
    page.click("lab-run", max_seconds=180)
    assert "lab-error" not in json.dumps(page.values.get("lab-results")), page.values.get("lab-results")
    assert ("v1-warmup", "[2]") in runs_stored(site)


def test_the_leaderboard_uses_the_readable_mlps_for_its_monte_carlo_reference(site):
    variances = readable_variances(site, "v1-warmup")
    expected = sci(mc_at_bm(float(np.mean(list(variances.values()))), ROUNDS["v1-warmup"]))
    page = load(site, "/leaderboard?round=v1-warmup")
    summary = json.dumps(page.values["lb-summary"]["children"], ensure_ascii=False)
    assert f"MC@B = {expected}" in summary and "(31 MLPs)" in summary


def _convergence(site: Site, tag: str) -> tuple[str, list[str]]:
    page = load(site, f"/convergence?round={tag}")
    status = json.dumps(page.values["convergence-status"]["children"], ensure_ascii=False)
    names = [trace.get("name") or "" for trace in page.values["convergence-graph"]["figure"]["data"]]
    return status, names


def test_a_garbage_band_manifest_is_named_unreadable_and_the_rest_of_the_picture_is_drawn(site):
    status, names = _convergence(site, "v1-phase1")
    assert f"{site.path(MANIFEST)} is unreadable (JSONDecodeError" in status
    assert f"Re-run `python -m whestboard band --dataset {site.data / 'v1-phase1'}` to rewrite it" in status
    assert any(n.startswith("Mean propagation") for n in names) and any(n.startswith("Covariance") for n in names)
    assert any("σ²/N" in n for n in names), names  # the analytic line
    assert not any(n.startswith("median of") for n in names)  # no band without its manifest


def test_a_corrupt_mlp_band_file_is_named_unreadable_not_another_reference(site):
    status, names = _convergence(site, "v2-phase2")
    assert f"1 stored band file(s) are unreadable and left out: {site.path(BAND_FILE)}: JSONDecodeError" in status
    assert "another reference" not in status
    assert any(n.startswith("median of 7 MLPs") for n in names), names  # the other seven are still drawn


# --------------------------------------------------------------------------- in the browser


def test_home_and_explorer_in_the_browser_show_the_damage_without_console_errors(site, browser):
    with checked_page(browser, site.base) as page:
        page.goto(site.base + "/")
        wait_for_dash(page)
        page.wait_for_selector(".damaged-dataset")
        assert str(site.path(RECORD)) in page.locator(".damaged-dataset").inner_text()

        page.goto(site.base + "/explorer?dataset=v1-warmup")
        wait_for_dash(page)
        page.wait_for_selector(".ag-row[row-id='3'] [col-id='status']")
        assert page.locator(".ag-row[row-id='3'] [col-id='status']").first.inner_text().startswith("damaged: ")
        assert page.locator(".ag-row[row-id='2'] [col-id='status']").first.inner_text() == "ok"
        assert page.locator("#mlp-grid-count").inner_text() == "32 MLPs shown"
        assert "BadZipFile" in page.locator("#dataset-damaged").inner_text()

        page.locator(".ag-row[row-id='3'] [col-id='mlp'] a").first.click()
        page.wait_for_selector("#mlp-damaged")
        assert str(site.path(RECORD)) in page.locator("#mlp-damaged").inner_text()

        page.goto(site.base + "/mlp/v1-warmup/2")
        wait_for_dash(page)
        page.wait_for_selector("#mlp-page #mlp-ribbon .main-svg")


def test_convergence_in_the_browser_draws_what_it_can_without_console_errors(site, browser):
    with checked_page(browser, site.base) as page:
        for tag, damaged in (("v1-phase1", MANIFEST), ("v2-phase2", BAND_FILE)):
            page.goto(f"{site.base}/convergence?round={tag}")
            wait_for_dash(page)
            page.wait_for_selector("#convergence-graph .main-svg")
            assert str(site.path(damaged)) in page.locator("#convergence-status").inner_text()


# --------------------------------------------------------------------------- repair, damage while running


def test_a_repaired_record_is_picked_up_and_damage_while_running_is_noticed(site):
    """In place, as ``cp good 00003.npz`` writes it: no folder's time moves, both workers must notice."""
    record = site.path(RECORD)
    damaged_bytes = record.read_bytes()
    record.write_bytes((REPO / "data" / RECORD).read_bytes())
    try:
        for _ in range(4):  # keep-alive off: the requests spread over both workers
            health = requests.get(site.base + "/healthz", timeout=TIMEOUT_S, headers={"Connection": "close"}).json()
            assert health["degraded"] is False and health["checks"]["datasets"]["damaged"] == {}
        assert "mlp-page" in load(site, "/mlp/v1-warmup/3").values
        rows = load(site, "/explorer?dataset=v1-warmup").values["mlp-grid"]["rowData"]
        assert len(rows) == 32 and all(row["status"] == "ok" for row in rows)
    finally:
        record.write_bytes(damaged_bytes)
    for _ in range(4):
        health = requests.get(site.base + "/healthz", timeout=TIMEOUT_S, headers={"Connection": "close"}).json()
        assert list(health["checks"]["datasets"]["damaged"]["v1-warmup"]) == [str(record)]
    assert "mlp-damaged" in load(site, "/mlp/v1-warmup/3").values


# --------------------------------------------------------------------------- nothing written, nothing lost


def test_the_data_folder_is_unchanged_but_for_the_files_the_test_damaged(site):
    served, shipped = digests(site.data), digests(REPO / "data")
    assert set(served) == set(shipped), "files were added to or removed from the data folder"
    changed = {Path(name) for name in served if served[name] != shipped[name]}
    assert changed == site.damaged
    assert_still_serving(site)
