"""Integrity views with constructed submissions: overfitting, residual arbitrage, history, failures, ties."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from statistics import NormalDist

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from whestboard.leaderboard import _files, _flags, _integrity, _ranking, _store

sqlite_store = helpers.sqlite_store
T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _rows(sid: str, split: str, scores, flops, compute=None, failed=None, failure=None) -> list[dict]:
    n = len(scores)
    return [{"submission_id": sid, "split": split, "mlp_index": i, "adjusted_score": float(scores[i]),
             "final_layer_mse": float(scores[i]) * 10, "flops_used": float(flops[i]),
             "effective_compute": float(compute[i]) if compute is not None else float(flops[i]),
             "failed": bool(failed[i]) if failed is not None else False,
             "failure": failure[i] if failure is not None else None} for i in range(n)]


def _honest(sid: str, rng: np.random.Generator, n: int = 50) -> list[dict]:
    """Both halves drawn alike: per-MLP difficulty varies 100x more than the estimator's own noise."""
    rows = []
    for split in ("public", "private"):
        difficulty = rng.lognormal(-10, 1.0, n)
        rows += _rows(sid, split, difficulty * rng.lognormal(0, 0.1, n), rng.normal(1e9, 0.05e9, n))
    return rows


def _overfitted(sid: str, rng: np.random.Generator, n: int = 50) -> list[dict]:
    """Tuned to the public MLPs: a third of the error there, and FLOPs spent unevenly (the Phase 1 case)."""
    sigma = np.sqrt(np.log(1 + 1.43**2))  # a lognormal with CV 1.43
    public_flops = rng.lognormal(0, sigma, n)
    public_flops *= 1.53e9 / public_flops.mean()
    return (_rows(sid, "public", rng.lognormal(-10, 1.0, n) * 0.3, public_flops)
            + _rows(sid, "private", rng.lognormal(-10, 1.0, n), rng.normal(1e9, 0.061e9, n)))


def test_an_overfitted_submission_is_flagged_and_an_honest_one_is_not():
    rng = np.random.default_rng(11)
    frame = pd.DataFrame(_honest("honest", rng) + _overfitted("overfit", rng))
    table = _integrity.public_private(frame).set_index("submission_id")
    bad, good = table.loc["overfit"], table.loc["honest"]
    assert bad["overfit"] and bad["flops_differ"] and bad["overfit_p"] < _integrity.OVERFIT_ALPHA
    assert not good["overfit"] and not good["flops_differ"]
    public = frame[(frame["submission_id"] == "overfit") & (frame["split"] == "public")]
    private = frame[(frame["submission_id"] == "overfit") & (frame["split"] == "private")]
    assert bad["private_ratio"] == pytest.approx(private["adjusted_score"].mean() / public["adjusted_score"].mean())
    assert bad["flops_ratio"] == pytest.approx(public["flops_used"].mean() / private["flops_used"].mean())
    assert bad["flops_cv_public"] == pytest.approx(public["flops_used"].std(ddof=0) / public["flops_used"].mean())
    assert bad["flops_cv_private"] == pytest.approx(private["flops_used"].std(ddof=0) / private["flops_used"].mean())
    assert "FLOPs differ on the halves: public mean 1.53x the private" in bad["overfit_text"]
    assert good["overfit_text"] == ""


def test_honest_submissions_are_flagged_no_more_often_than_the_stated_level():
    """200 honest submissions: the flag's rate is its alpha (1%); more than 9 would happen with p < 1e-4."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame([row for i in range(200) for row in _honest(f"h{i}", rng)])
    table = _integrity.public_private(frame)
    assert len(table) == 200
    assert table["overfit"].sum() <= 9
    assert not table["flops_differ"].any()


def test_the_permutation_p_value_matches_exact_enumeration():
    public, private = np.array([1.0, 2.0, 1.5, 0.5]), np.array([3.0, 2.5, 1.0, 4.0])
    pooled = np.concatenate([public, private])
    observed = private.mean() - public.mean()
    exact = np.mean([pooled[list(c)].mean() - np.delete(pooled, list(c)).mean() >= observed - 1e-12
                     for c in itertools.combinations(range(8), 4)])
    p = _integrity.overfit_p_values(public[None], private[None])[0]
    assert p == pytest.approx(exact, abs=0.04)  # 4000 draws: 5 standard errors


def _priced(sid: str, flops, residual_s, tag="v1-phase1", mse=1e-5) -> tuple[dict, list[dict]]:
    lam = 1e11
    flops = np.asarray(flops, float)
    compute = flops + lam * np.asarray(residual_s, float)
    sub = {"submission_id": sid, "round": tag, "mean_flops_used": flops.mean(),
           "mean_effective_compute": compute.mean(), "final_layer_mse": mse}
    return sub, _rows(sid, "public", np.full(flops.size, mse / 10), flops, compute)


def test_residual_arbitrage_needs_residual_time_and_an_accuracy_its_flops_cannot_buy():
    """The real Phase 1 pattern is flagged with its numbers; a cheap honest estimator whose F / C is small
    only because it spends almost no FLOPs (mean propagation), an honest entry with overhead and a gated
    round are not."""
    rng = np.random.default_rng(2)
    mean_prop = _flags.honest_frontier("v1-phase1", 0.0)  # the cheapest shipped baseline's MSE
    assert mean_prop is not None and mean_prop[1] == "baseline: mean propagation"
    cases = [
        _priced("arbitrage", np.full(50, 1e6), np.full(50, 0.2), mse=1.5e-8),  # F / C = 5e-5, F identical
        _priced("slow-mean-prop", np.full(50, 2.03e7), rng.uniform(0.1, 0.3, 50), mse=mean_prop[0]),
        _priced("top-with-overhead", rng.normal(2.7e10, 1e9, 50), np.full(50, 0.3), mse=1.5e-8),  # F / C ~ 0.47
        _priced("honest", rng.normal(2e10, 2e9, 50), rng.uniform(0.005, 0.02, 50)),
        _priced("gated", np.full(50, 1e6), np.full(50, 0.0), tag="v2-phase2", mse=1.5e-8),
    ]
    subs = pd.DataFrame([c[0] for c in cases])
    mlps = pd.DataFrame([r for c in cases for r in c[1]])
    table = _integrity.residual_share(subs, mlps).set_index("submission_id")
    arb = table.loc["arbitrage"]
    assert arb["residual"] and arb["flops_identical"]
    assert arb["fc_share"] == pytest.approx(1e6 / (1e6 + 2e10))
    assert arb["residual_s"] == pytest.approx(0.2)
    assert arb["frontier_mse"] == mean_prop[0] and arb["frontier_team"] == "baseline: mean propagation"
    assert arb["residual_text"] == (
        "F / C = 5e-05 (< 0.1): 0.2 s of residual wall time per MLP against 1e+06 metered FLOPs, F identical on "
        f"every MLP; its final-layer MSE 1.5e-08 is {mean_prop[0] / 1.5e-8:.3g}x below the best a shipped baseline "
        f"reaches with that many FLOPs (baseline: mean propagation: {mean_prop[0]:.3g}), so its accuracy came "
        "from work outside flopscope's meter")
    slow = table.loc["slow-mean-prop"]
    assert slow["fc_share"] < 0.002 and slow["flops_identical"] and not slow["residual"]  # the case
    top = table.loc["top-with-overhead"]
    assert 0.4 < top["fc_share"] < 0.5 and not top["residual"]
    assert not table.loc["honest", "residual"] and table.loc["honest", "fc_share"] > 0.9
    assert np.isnan(table.loc["gated", "fc_share"]) and not table.loc["gated", "residual"]
    per_mlp = _integrity.per_mlp_share(mlps[mlps["submission_id"] == "honest"])
    assert table.loc["honest", "fc_share_min"] == pytest.approx(per_mlp.min())


def test_team_history_steps_to_its_best_so_far_per_round():
    scores = [5e-6, 3e-6, 4e-6, 1e-6]
    subs = pd.DataFrame({"submission_id": [f"s{i}" for i in range(4)] + ["other", "broken"],
                         "team": ["a"] * 4 + ["b", "a"], "round": "v2-phase2",
                         "submitted_at": [T0 + timedelta(hours=h) for h in (3, 1, 2, 4, 0, 5)],
                         "status": ["graded"] * 5 + ["failed"], "adjusted_score": [*scores, 1e-9, np.nan]})
    history = _integrity.team_history(subs, "a")
    assert history["submission_id"].tolist() == ["s1", "s2", "s0", "s3"]
    assert history["best_so_far"].tolist() == [3e-6, 3e-6, 3e-6, 1e-6]
    assert history["improved"].tolist() == [True, False, False, True]


def test_failure_breakdown_counts_each_kind_in_the_vocabulary_order():
    rows = _rows("s", "public", [1.0] * 6, [1e9] * 6, failed=[True, True, True, True, False, True],
                 failure=["time", "budget", "time", None, None, "memory"])
    counts = _integrity.failure_breakdown(pd.DataFrame(rows))
    assert counts == {"s": {"budget": 1, "time": 2, "memory": 1, "unrecorded": 1}}
    assert list(counts["s"]) == ["budget", "time", "memory", "unrecorded"]
    assert _integrity.breakdown_text(counts["s"]) == "1 budget, 2 time, 1 memory, 1 unrecorded"


def test_extra_mlps_to_separate_the_top_two_agrees_with_a_simulation():
    """Resampling the observed differences at the estimated size: the test rejects with the stated power."""
    rng = np.random.default_rng(8)
    observed = rng.normal(0.1, 1.0, 50)
    extra = _integrity.extra_mlps_to_separate(observed)
    n_total = int(extra) + observed.size
    z = NormalDist().inv_cdf(1 - _integrity.TIE_ALPHA / 2)

    def power(n: int, trials: int = 2000) -> float:
        draws = observed[rng.integers(0, observed.size, size=(trials, n))]
        t = np.abs(draws.mean(axis=1)) / (draws.std(axis=1, ddof=1) / np.sqrt(n))
        return float((t > z).mean())

    # 2000 trials: standard error 0.009; 0.045 is 5 of them
    assert power(n_total) == pytest.approx(_integrity.TIE_POWER, abs=0.045)
    assert power(n_total // 3) < _integrity.TIE_POWER - 0.2
    assert _integrity.extra_mlps_to_separate(np.ones(10)) == 0.0  # a constant gap on 10 MLPs: already apart
    # ... but 3 MLPs cannot be separated by a sign-flip test at 5% (its smallest p is 2/8): 6 are needed
    assert _integrity.extra_mlps_to_separate(np.ones(3)) == 3.0
    assert _ranking.sign_flip_p_value(np.ones(5)) >= 0.05 > _ranking.sign_flip_p_value(np.ones(6))
    assert _integrity.extra_mlps_to_separate(np.array([1.0, -1.0])) == float("inf")


def test_neighbours_a_paired_test_cannot_separate_are_marked_at_the_top():
    rng = np.random.default_rng(4)
    difficulty = rng.lognormal(-10, 1.0, 40)
    matrix = np.stack([difficulty, difficulty * rng.normal(1.0, 0.05, 40), difficulty * 2.0])
    table = pd.DataFrame({"submission_id": ["a", "b", "c"], "adjusted_score": matrix.mean(axis=1)})
    table = table.sort_values("adjusted_score", ignore_index=True)
    order = table["submission_id"].map({"a": 0, "b": 1, "c": 2}).to_numpy()
    out = _integrity.with_neighbour_ties(table, matrix[order]).set_index("submission_id")
    first, second = table["submission_id"][0], table["submission_id"][1]
    assert {first, second} == {"a", "b"}
    expected_p = _ranking.sign_flip_p_value(matrix[order][1] - matrix[order][0])
    assert out.loc[first, "p_next"] == pytest.approx(expected_p) and out.loc[first, "tied_next"]
    assert out.loc[second, "p_next"] < 0.05 and not out.loc[second, "tied_next"]
    assert out.loc[first, "extra_mlps"] == _integrity.extra_mlps_to_separate(matrix[order][1] - matrix[order][0])
    assert np.isnan(out.loc["c", "p_next"]) and np.isnan(out.loc[second, "extra_mlps"])


def test_each_split_ranks_on_its_own_mlps_and_the_rerun_on_nominated_ones(sqlite_store, tmp_path):
    private_values = helpers.split_board(tmp_path)
    public = _integrity.organizer_board("v1-warmup", "public").set_index("team")
    private = _integrity.integrity_board("v1-warmup", "private").set_index("team")
    rerun = _integrity.integrity_board("v1-warmup", "rerun").set_index("team")
    assert public.sort_values("rank").index.tolist() == ["alpha", "beta", "gamma", "delta"]
    assert private.sort_values("rank").index.tolist() == ["gamma", "beta", "alpha", "delta"]
    assert private.loc["alpha", "adjusted_score"] == pytest.approx(private_values["alpha_private"])
    assert private.loc["beta", "adjusted_score"] == pytest.approx(private_values["beta_private"])
    assert rerun.index.tolist() == ["beta"]
    assert rerun.loc["beta", "adjusted_score"] == pytest.approx(private_values["beta_rerun"])
    assert rerun.loc["beta", "failures"] == "1 time" and rerun.loc["beta", "n_failed_mlps"] == 1
    assert public.loc["alpha", "private_score"] == pytest.approx(private_values["alpha_private"])
    # every private MLP is worse than every public one, but 4 + 4 MLPs have only 70 relabellings:
    # p cannot go below 1/70, above the 1% level, so the flag is not raised on so few MLPs
    assert public.loc["alpha", "overfit_p"] == pytest.approx(1 / 70, abs=0.01)
    assert not public.loc["alpha", "overfit"] and not public.loc["alpha", "residual"]
    delta = public.loc["delta"]
    assert delta["overfit"] and delta["private_ratio"] == pytest.approx(10.3) and delta["overfit_p"] < 0.01
    assert delta["residual"] and delta["fc_share"] == pytest.approx(5e-5) and delta["flops_identical"]
    assert delta["residual_s"] == pytest.approx((2e10 - 1e6) / 1e11)
    for shown in (_integrity.integrity_board("v1-warmup", "public"),
                  _integrity.viewer_board("v1-warmup", "public", organizer=False)):
        assert not set(_integrity.ORGANIZER_COLUMNS) & set(shown.columns)
    with pytest.raises(PermissionError):
        _integrity.viewer_board("v1-warmup", "rerun", organizer=False)
    with pytest.raises(PermissionError, match="the private split is shown only with the organizer token"):
        _integrity.require_split_access("private", organizer=False)
    _integrity.require_split_access("private", organizer=True)
    assert _store.submission_count() == 4


def test_a_round_without_submissions_or_per_mlp_results_gives_plain_boards(sqlite_store, tmp_path):
    for split in ("public", "private", "rerun"):
        assert _integrity.organizer_board("v2-phase2", split).empty
    row, _ = helpers.submission_row("bare", "t")
    pd.DataFrame([row]).to_csv(tmp_path / "bare.csv", index=False)
    _files.import_files([tmp_path / "bare.csv"])
    [only] = _integrity.organizer_board("v1-warmup", "public").to_dict("records")
    assert only["team"] == "t" and not only["residual"] and not only["overfit"] and not only["tied_next"]
    assert np.isnan(only["fc_share"]) and only["failures"] == ""  # no per-MLP results, no C: nothing to flag
    assert _integrity.organizer_board("v1-warmup", "private").empty
