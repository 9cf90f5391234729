"""The board's flags calibrated on the shipped baselines: an honest baseline is never flagged, the real
competition's pattern is, and every view draws a flag from the one function that decides it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from whestboard.leaderboard import _files, _flags, _integrity, _view
from whestboard.rules import ALL_ROUNDS, get_round

SHIPPED = _flags.SHIPPED_BASELINES
PER_MLP = SHIPPED.with_name(SHIPPED.stem + ".per_mlp.csv")
sqlite_store = helpers.sqlite_store


@pytest.fixture(scope="module")
def shipped() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The shipped baselines as the sweep wrote them (every round, every estimator) and their public MLPs."""
    subs = pd.read_csv(SHIPPED)
    mlps = pd.read_csv(PER_MLP)
    return subs, mlps[mlps["split"].fillna("public") == "public"]


def test_no_shipped_baseline_carries_a_flag(shipped):
    subs, mlps = shipped
    table = subs.merge(_integrity.residual_share(subs, mlps), on="submission_id")
    table = table.merge(_integrity.meter_tampering(mlps), how="left", on="submission_id")
    assert len(table) == len(subs) > 0
    flagged = {row["submission_id"]: _flags.flags_text(row) for row in table.to_dict("records")
               if _flags.row_flags(row)}
    assert flagged == {}
    # The case is among them and is why the share alone is no sign: mean propagation spends
    # almost no FLOPs, so its interpreter overhead makes F / C tiny in both priced rounds.
    priced = table[table["round"].map(lambda tag: get_round(tag).lambda_flops_per_second > 0)]
    means = priced[priced["team"] == "baseline: mean propagation"]
    assert len(means) == 2 and (means["fc_share"] < _flags.RESIDUAL_SHARE_LIMIT).all()


def test_every_shipped_baseline_lies_on_or_above_the_frontier_it_calibrates(shipped):
    """Each honest baseline is at most as good as the best shipped one at its FLOPs, so never ten times below."""
    honest = _flags.shipped_baselines()
    assert set(honest["round"]) == set(ALL_ROUNDS)
    for row in honest.to_dict("records"):
        frontier, team = _flags.honest_frontier(row["round"], row["mean_flops_used"])
        assert frontier <= row["final_layer_mse"]
        assert row["final_layer_mse"] * _flags.RESIDUAL_ACCURACY_FACTOR >= frontier, (row["submission_id"], team)


def test_the_frontier_is_the_best_mse_within_the_flops_and_never_below_the_cheapest_baseline():
    honest = _flags.shipped_baselines()
    phase1 = honest[honest["round"] == "v1-phase1"]
    cheapest = phase1.loc[phase1["mean_flops_used"].idxmin()]
    assert _flags.honest_frontier("v1-phase1", 1.0) == (cheapest["final_layer_mse"], cheapest["team"])
    everything = _flags.honest_frontier("v1-phase1", 1e30)
    assert everything[0] == phase1["final_layer_mse"].min()
    assert _flags.honest_frontier("no-such-round", 1e9) is None


def test_the_real_phase1_pattern_is_flagged_in_every_priced_round_and_not_in_the_gated_one():
    """F / C = 5e-5 with F identical on every MLP and an MSE near the Phase 1 leaders' (1.5e-8)."""
    for tag in ALL_ROUNDS:
        n = 50
        flops, compute = np.full(n, 1e6), np.full(n, 1e6 + 2e10)
        sub = pd.DataFrame([{"submission_id": "x", "round": tag, "mean_flops_used": 1e6,
                             "mean_effective_compute": compute.mean(), "final_layer_mse": 1.5e-8}])
        mlps = pd.DataFrame({"submission_id": "x", "flops_used": flops, "effective_compute": compute})
        [row] = _integrity.residual_share(sub, mlps).to_dict("records")
        priced = get_round(tag).lambda_flops_per_second > 0
        assert row["residual"] is priced or bool(row["residual"]) == priced
        if priced:
            [flag] = _flags.row_flags(row)
            assert flag.kind == "residual" and str(flag).startswith("⚠ residual arbitrage: F / C = 5e-05 (< 0.1)")
            assert "F identical on every MLP" in flag.text and "work outside flopscope's meter" in flag.text


def test_ties_and_failures_are_not_flags():
    row = {"tied_next": True, "p_next": 1.0, "failures": "1 time", "residual": False, "meter": False}
    assert _flags.row_flags(row) == () and _flags.flags_text(row) == ""


def test_the_flags_cell_and_the_integrity_list_draw_the_same_flags(sqlite_store, tmp_path):
    """One board with a flagged team and a tie at the top: the ranking's cell and the list say the same, and a
    tie alone flags nobody."""
    helpers.split_board(tmp_path)
    rows = [helpers.submission_row(f"t-{i}", f"twin{i}", scores=(1e-6, 2e-6, 3e-6), flops=(1e9,) * 3,
                                   failed=(False,) * 3, minutes=i) for i in range(2)]
    path = helpers.write_csvs(tmp_path / "twins", rows, "twins")
    _files.import_files([path])
    view = _view.board("v1-warmup", "public", organizer=False)
    by_team = {row["team"]: row for row in view.rows}
    listed = {f.team: f.text for f in view.flagged}
    assert listed == {team: row["flags"] for team, row in by_team.items() if row["flags"]}
    assert set(listed) == {"delta"} and listed["delta"].startswith("⚠ residual arbitrage: F / C = 5e-05")
    leader = view.rows[0]
    assert leader["team"] in {"twin0", "twin1"} and leader["flags"] == ""  # tied with #2 (p = 1): not a flag
    assert view.ties and "twin0 ≈ twin1 (p = 1)" in view.ties
    organizer = _view.board("v1-warmup", "public", organizer=True)
    assert {f.team: f.kinds for f in organizer.flagged} == {"delta": ("residual", "overfit")}
    assert _view.organizer_flag_count(organizer.table) == 1


def test_the_team_panel_speaks_of_its_own_round_only(sqlite_store, tmp_path):
    """A team with a better score in another round: the panel of this round shows this round's best."""
    rows = [helpers.submission_row("w-1", "both", scores=(2e-5, 4e-5)),
            helpers.submission_row("p-1", "both", round_tag="v2-phase2", scores=(4e-7, 5e-7))]
    _files.import_files([helpers.write_csvs(tmp_path, rows)])
    view = _view.team_view("both", "v1-warmup", organizer=False)
    assert view.best["submission_id"] == "w-1" and view.best["adjusted_score"] == pytest.approx(3e-5)
    assert view.history["round"].unique().tolist() == ["v1-warmup"]
    assert view.other_rounds == {"v2-phase2": 1}
    assert view.ranked and view.flags == ()
    assert _view.team_view("both", "v1-phase1", organizer=False).best is None
