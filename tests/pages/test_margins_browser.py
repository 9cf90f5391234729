"""How close each MLP came to each cap, as a person sees it: on a team's panel after importing a grader record
through the page, and on a lab result, in a real browser. The numbers on screen are checked against the
record's own telemetry and the run's own report."""

from __future__ import annotations

from urllib.parse import parse_qs, urlparse

import pytest

from tests.browser_helpers import wait_for_dash
from tests.conftest import checked_page, serve_app
from tests.leaderboard import aicrowd_records as records
from whestboard.rules import EDGE_SHARE

pytestmark = pytest.mark.browser

TOKEN = "margins-organizer-token"
TRACES = ("sel => Array.from(document.querySelector(sel + ' .js-plotly-plot').data, "
          "t => [t.name, Array.from(t.x || []), Array.from(t.y || [])])")


@pytest.fixture(scope="module")
def organizer_server(tmp_path_factory):
    with serve_app(tmp_path_factory.mktemp("margins-state"), WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as base:
        yield base


@pytest.fixture()
def organizer_page(browser, organizer_server):
    with checked_page(browser, organizer_server) as pg:
        yield pg


def _table_rows(page, selector: str) -> dict[str, list[str]]:
    """Each row of a margins table by its cap's title: the cells' texts."""
    rows = page.locator(f"{selector} tbody tr")
    out = {}
    for i in range(rows.count()):
        cells = [c.strip() for c in rows.nth(i).locator("td").all_inner_texts()]
        out[cells[0]] = cells
    return out


def test_the_team_panel_shows_the_margins_of_an_imported_record(organizer_page, tmp_path):
    page = organizer_page
    path = records.write_records(tmp_path, ["333412-failures.json"])["333412-failures.json"]
    record = records.failures_record()
    page.goto(page.base_url + "/leaderboard?round=v2-phase2")
    wait_for_dash(page)
    page.click("#lb-organizer .accordion-button")
    page.fill("#lb-token", TOKEN)
    page.fill("#lb-import-team", "beta")
    page.set_input_files("#lb-upload input[type=file]", str(path))
    page.wait_for_selector("#lb-org-result .alert-success")
    alert = page.locator("#lb-org-result").inner_text()
    assert "Imported 333412-failures.json: 1 added, 0 updated, 0 unchanged." in alert
    assert "equal to the record's rounding (4 significant digits" in alert

    page.goto(page.base_url + "/leaderboard?round=v2-phase2&team=beta")
    wait_for_dash(page)
    page.wait_for_selector("#lb-team-margins-table")
    assert "How close its best submission (333412) came to each cap" in page.locator("#lb-team-card").inner_text()

    public = [e for e in record["results"]["per_mlp"] if "scores" in e]
    walls = {f"MLP {e['mlp_index']}": e["telemetry"]["participant_predict_wall_s"] for e in public}
    residuals = {f"MLP {e['mlp_index']}": e["telemetry"]["residual_wall_time_s"] for e in public}
    timed_out = max(walls, key=walls.get)
    passing = max((v, k) for k, v in walls.items() if v <= 120)
    rows = _table_rows(page, "#lb-team-margins-table")
    assert rows["predict wall time"][1] == f"121.8 s of 120.0 s (102%, {timed_out})"
    assert rows["predict wall time"][2] == (f"1.84 s past it; the closest that passed: {passing[0]:.1f} s "
                                            f"({passing[0] / 120:.0%}, {passing[1]})")
    assert rows["predict wall time"][4] == "over" and rows["residual wall time"][4] == "over"
    close = sum(v >= EDGE_SHARE * 120 for v in walls.values())
    assert rows["predict wall time"][3] == f"{close} of 50"

    # the figure: every public MLP at its share of each cap, the two failures as crosses past 100%
    traces = page.evaluate(TRACES, "#lb-team-margins-figure")
    shown = sorted(x for _, xs, ys in traces for x, y in zip(xs, ys, strict=True) if round(y) == 0)
    assert shown == pytest.approx(sorted(v / 120 for v in walls.values()), rel=1e-9)
    shown = sorted(x for _, xs, ys in traces for x, y in zip(xs, ys, strict=True) if round(y) == 1)
    assert shown == pytest.approx(sorted(v / 0.4 for v in residuals.values()), rel=1e-9)
    [over] = [t for t in traces if t[0] == "over: failed"]
    assert sorted(over[1]) == pytest.approx(sorted([121.84 / 120, 0.4127 / 0.4]))
    # where the time went: four stacked parts, 50 MLPs each, adding up to each MLP's predict wall time
    split = page.evaluate(TRACES, "#lb-team-time-split")
    assert [name for name, _, _ in split] == ["participant code", "flopscope kernels", "flopscope overhead",
                                              "comms with the flopscope server"]
    totals = {label: sum(ys[xs.index(label)] for _, xs, ys in split) for label in walls}
    assert totals == pytest.approx(walls, rel=1e-9)
    assert "Where predict's wall time went (mean per MLP over 50)" in page.locator("#lb-team-time-split-line").inner_text()


def test_a_lab_result_shows_how_close_its_mlp_came_to_each_cap(page, state_dir, monkeypatch):
    from whestboard.data import served_datasets
    from whestboard.scoring import get_run
    from whestboard.store import reset_engines

    warmup = served_datasets()["v1-warmup"]
    index = warmup.indices[2]
    page.goto(page.base_url + f"/lab?dataset=v1-warmup&mlps={index}")
    wait_for_dash(page)
    page.click("#lab-run")
    page.wait_for_selector("#lab-result-panel", timeout=90_000)
    page.wait_for_selector("#lab-margins-table")
    wait_for_dash(page)
    run_id = parse_qs(urlparse(page.locator("#lab-compare-link").get_attribute("href")).query)["a"][0]
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(state_dir))  # the live server's own run records
    reset_engines()
    try:
        report = get_run(run_id.removeprefix("run:"))
    finally:
        reset_engines()
    entry = report["results"]["per_mlp"][0]
    rows = _table_rows(page, "#lab-margins-table")
    assert set(rows) == {"predict wall time", "charged compute C = F + 1e11 R", "setup time", "FLOPs F"}
    wall = entry["wall_time_s"]
    assert rows["predict wall time"][1].startswith(f"{wall:.3g} s of 60.0 s (") and rows["predict wall time"][4] == "clear"
    assert rows["setup time"][1].startswith(f"{report['setup_wall_s']:.3g} s of 5 s (")
    traces = page.evaluate(TRACES, "#lab-margins-figure")
    points = sorted((round(y), x) for _, xs, ys in traces for x, y in zip(xs, ys, strict=True))
    assert [x for _, x in points] == pytest.approx([wall / 60, entry["effective_compute"] / 6.8e10,
                                                    report["setup_wall_s"] / 5.0, entry["flops_used"] / 6.8e10],
                                                   rel=1e-9)
    split = page.evaluate(TRACES, "#lab-time-split")
    assert sum(ys[0] for _, _, ys in split) == pytest.approx(wall, rel=1e-9)
