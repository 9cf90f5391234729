"""The one margins panel draws exactly what ``cap_margins`` measured: its table, its dots, its time split."""

from __future__ import annotations

import pytest

from components.figures.margins import amount, margins_figure, margins_panel, spare_text, time_split_figure
from tests.leaderboard import aicrowd_records as records
from whestboard.rules import Caps, MLPTelemetry, cap_margins, get_round, telemetry_of

PHASE2 = get_round("v2-phase2")


def _texts(component) -> list[str]:
    """Every string a rendered component tree shows, in order."""
    if isinstance(component, str):
        return [component]
    if isinstance(component, (list, tuple)):
        return [t for child in component for t in _texts(child)]
    children = getattr(component, "children", None)
    return _texts(children) if children is not None else []


def _find(component, component_id: str):
    stack = [component]
    while stack:
        node = stack.pop()
        if isinstance(node, (list, tuple)):
            stack.extend(node)
            continue
        if getattr(node, "id", None) == component_id:
            return node
        children = getattr(node, "children", None)
        if children is not None:
            stack.append(children)
    raise AssertionError(f"no component {component_id}")


@pytest.fixture(scope="module")
def failures():
    record = records.failures_record()
    return cap_margins([telemetry_of(e) for e in record["results"]["per_mlp"] if "scores" in e], Caps.of(PHASE2))


def test_the_figure_puts_every_mlp_at_its_share_of_each_cap(failures):
    fig = margins_figure(failures)
    drawn = sorted((round(y), x) for trace in fig.data for x, y in zip(trace.x, trace.y, strict=True))
    expected = sorted((row, min(share, 3.0)) for row, m in enumerate(failures.margins) for share in m.shares)
    assert [row for row, _ in drawn] == [row for row, _ in expected]
    assert [x for _, x in drawn] == pytest.approx([x for _, x in expected], rel=1e-12)
    assert list(fig.layout.yaxis.ticktext) == [m.title for m in failures.margins]
    over = next(t for t in fig.data if t.name == "over: failed")
    assert over.marker.symbol == "x" and len(over.x) == 2
    assert sorted(over.x) == pytest.approx(sorted([121.84 / 120, 0.4127 / 0.4]))
    assert [s.x0 for s in fig.layout.shapes if s.type == "line"] == [1.0]  # the cap


def test_the_panel_table_says_each_caps_worst_margin_and_state(failures):
    """The record fails public MLP 3 on time and 11 on residual time; 5 passes at 118.2 s, 8 at 0.371 s."""
    public = sorted(e["mlp_index"] for e in records.failures_record()["results"]["per_mlp"] if "scores" in e)
    timed_out, residual, near_wall, near_residual = (f"MLP {public[k]}" for k in (3, 11, 5, 8))
    panel = margins_panel(failures, "t")
    rows = {m.key: " | ".join(_texts(_find(panel, "t-margins-table").children[1].children[i]))
            for i, m in enumerate(failures.margins)}
    assert rows["wall"] == (f"predict wall time | 121.8 s of 120.0 s (102%, {timed_out}) | 1.84 s past it; the "
                            f"closest that passed: 118.2 s (98%, {near_wall}) | 2 of 50 | over")
    assert rows["residual"] == (f"residual wall time | 0.413 s of 0.4 s (103%, {residual}) | 0.0127 s past it; the "
                                f"closest that passed: 0.371 s (93%, {near_residual}) | 2 of 50 | over")
    assert rows["setup"].endswith("| 0 of 50 | clear")
    verdict = " ".join(_texts(_find(panel, "t-margins-verdict")))
    assert verdict.startswith(f"Closest: residual wall time, 103% of its cap on {residual} (past the cap: scored as "
                              "the all-zero prediction with multiplier 1.0")


def test_the_time_split_stacks_four_parts_under_the_wall_cap(failures):
    split = failures.split
    fig = time_split_figure(split, 120.0)
    assert [t.name for t in fig.data] == ["participant code", "flopscope kernels", "flopscope overhead",
                                          "comms with the flopscope server"]
    assert not any(split.other)  # schema 4 attributes every second: no fifth part drawn
    for trace, part in zip(fig.data, split.PARTS[:4], strict=True):
        assert list(trace.y) == list(getattr(split, part)) and list(trace.x) == list(split.labels)
    assert [s.y0 for s in fig.layout.shapes] == [120.0]
    line = " ".join(_texts(_find(margins_panel(failures, "t"), "t-time-split-line")))
    assert line.startswith("Where predict's wall time went (mean per MLP over 50): participant code 0.")


def test_priced_residual_margin_reads_in_seconds_too():
    rnd = get_round("v1-phase1")
    margins = cap_margins([MLPTelemetry("MLP 0", 0, flops_used=1.2e11, residual_wall_s=0.5)], Caps.of(rnd))
    charged = next(m for m in margins.margins if m.key == "residual")
    assert spare_text(charged) == "1.02e+11 FLOPs to spare (1.02 s more residual time)"
    assert amount(75.0, "s") == "75.0 s" and amount(0.33, "s") == "0.33 s"


def test_a_result_without_times_says_so():
    panel = margins_panel(cap_margins([MLPTelemetry("MLP 0", 0)], Caps.of(PHASE2)), "t")
    assert panel.id == "t-margins" and "no time or FLOP count was recorded" in panel.children


def test_a_cap_far_above_the_bars_is_named_not_drawn():
    split = cap_margins([MLPTelemetry("MLP 0", 0, predict_wall_s=0.19, kernel_wall_s=0.02, overhead_wall_s=0.1,
                                      residual_wall_s=0.07)], Caps.of(get_round("v1-warmup"))).split
    fig = time_split_figure(split, 60.0)
    assert not fig.layout.shapes and "(the wall cap, 60 s, is far above)" in fig.layout.title.text
    assert fig.layout.yaxis.range[1] == pytest.approx(0.19 * 1.1)


def test_an_upload_jobs_card_draws_the_margins_its_result_kept():
    """The upload job keeps ``run_margins(report).as_dict()``; the card draws them again, the same numbers."""
    from types import SimpleNamespace

    from components.upload_panels import job_card
    from whestboard.rules import margins_from_dict

    record = records.phase2_record()
    margins = cap_margins([telemetry_of(e) for e in record["results"]["per_mlp"][:4]], Caps.of(PHASE2),
                          setups=[("setup()", 2.2)])
    job = SimpleNamespace(id=3, result={"ok": True, "run_id": "r-1", "upload": {"filename": "e.py"},
                                        "margins": margins.as_dict()},
                          progress=None, started_at=2.0, created_at=1.0, status="finished", spec={"dataset": "x"})
    card = job_card(job, now=3.0)
    table = _find(card, "upload-margins-table")
    assert len(table.children[1].children) == 4
    assert margins_from_dict(margins.as_dict()) == margins
    setup_row = " | ".join(_texts(table.children[1].children[2]))
    assert setup_row.startswith("setup time | 2.2 s of 5 s (44%, setup()) | 2.8 s to spare")
    no_margins = SimpleNamespace(**{**vars(job), "result": {"ok": True, "run_id": "r-1", "upload": {}}})
    with pytest.raises(AssertionError, match="no component upload-margins"):
        _find(job_card(no_margins, now=3.0), "upload-margins")
