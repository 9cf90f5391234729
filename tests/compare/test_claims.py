"""What a comparison may say, decided once in the core: its sentence, "MLPs needed", the noise split and the
budget curves it opens on never contradict each other (the page, the CLI and the JSON read the same values).

Real runs on a small official-format dataset: mean and covariance propagation on 4 MLPs (too few for any
95% verdict) and on 6 (the fewest that can carry one).
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from components.compare_panels import verdict_panel
from tests.conftest import state_built_once
from tests.upstream import make_official
from whestboard.compare import (
    curve_defaults,
    load_side,
    mlps_needed_text,
    paired_curves,
    paired_stat,
    verdict,
    verdict_sentence,
)
from whestboard.compare._paired import FEWEST_MLPS_FOR_A_VERDICT
from whestboard.compare._sides import Side
from whestboard.data import open_dataset
from whestboard.scoring import RunRequest, resolve_estimator, rulebook_for, run_and_record

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("claims") / "ds", width=24, depth=3, n_samples=3000,
                                      seeds=[11, 22, 33, 44, 55, 66]))


@pytest.fixture(scope="module")
def recorded(dataset, tmp_path_factory):
    def build():
        return {(kind, mlps): run_and_record(RunRequest(dataset, mlps, resolve_estimator(kind), rulebook_for(None)))
                for kind in ("mean", "cov") for mlps in ("0:4", "0:6")}
    return state_built_once(tmp_path_factory, "claims-state", build)


@pytest.fixture
def runs(recorded, private_state):
    state, outcomes = recorded
    shutil.copytree(state, private_state, dirs_exist_ok=True)
    return outcomes


def _pair(runs, mlps: str) -> dict:
    return verdict(*(load_side(f"run:{runs[(kind, mlps)].run_id}") for kind in ("mean", "cov")))


def _asked(sentence: str) -> int:
    return int(re.search(r"at least (\d+) shared MLPs", sentence).group(1))


def test_on_four_mlps_no_claim_contradicts_another(runs):
    """The issue's case: "No verdict ... cannot reach 95% on fewer than 6" above "MLPs needed 1"."""
    out = _pair(runs, "0:4")
    for key, name in (("score", "score"), ("final_layer_mse", "final-layer MSE")):
        stat = out[key]
        assert stat["mlps_needed"] < FEWEST_MLPS_FOR_A_VERDICT  # the raw power estimate that was shown before
        sentence = verdict_sentence(stat, name)
        assert sentence.startswith(f"No verdict on {name}") and _asked(sentence) == int(mlps_needed_text(stat))
        assert int(mlps_needed_text(stat)) >= FEWEST_MLPS_FOR_A_VERDICT
    assert not out["noise"]["available"] and out["noise"]["headline"] == "no interval on 4 MLP(s)"
    page = str(verdict_panel(out))
    assert "limited by" not in page and "MLPs needed (95% test, 80% power; at least 6)" in page
    assert page.count("none on 4 MLP(s)") == 2 and page.count("no interval on 4 MLP(s)") == 2  # interval, ratio
    assert "bootstrap interval" not in page  # no note about an interval that is not drawn


def test_on_six_mlps_the_verdict_rests_on_an_interval_and_mlps_needed_never_undercuts_it(runs):
    out = _pair(runs, "0:6")
    stat = out["score"]
    assert stat["verdict_possible"] and stat["verdict"] == "B lower"
    assert verdict_sentence(stat, "score").startswith("B's score is lower (better)")
    assert int(mlps_needed_text(stat)) == max(FEWEST_MLPS_FOR_A_VERDICT, int(np.ceil(stat["mlps_needed"])))
    assert out["noise"]["available"] and out["noise"]["limited_by"] in out["noise"]["sentence"]
    assert "With fewer than 10 MLPs the bootstrap interval comes out too narrow" in str(verdict_panel(out))


@pytest.mark.parametrize("n", range(2, 13))
def test_mlps_needed_is_never_fewer_than_a_verdict_needs_and_an_unresolved_sentence_names_it(n):
    rng = np.random.default_rng(n)
    for shift in (0.0, 0.3, 3.0):
        a = rng.lognormal(size=n) + shift
        b = rng.lognormal(size=n)
        stat = paired_stat(a, b, metric="score").as_dict()
        said, needed = verdict_sentence(stat, "score"), mlps_needed_text(stat)
        if needed[0].isdigit():
            assert int(needed.replace(",", "")) >= FEWEST_MLPS_FOR_A_VERDICT
        if not stat["verdict_possible"]:
            assert _asked(said) == int(needed.replace(",", ""))
        elif stat["verdict"] == "not resolved" and needed[0].isdigit() and int(needed.replace(",", "")) > n:
            assert f"about {needed} shared MLPs" in said


def test_two_baselines_say_why_their_interval_is_not_taken_apart_and_what_to_score():
    """The README's example: two shipped baselines keep results, not predictions."""
    out = verdict(load_side("base:v1-warmup:mean"), load_side("base:v1-warmup:cov"))
    noise = out["noise"]
    assert not noise["available"] and noise["headline"] == "needs both sides' predictions"
    assert noise["rescore"] == [{"side": "A", "dataset": "v1-warmup", "estimator": "mean", "mlps": "0:32"},
                                {"side": "B", "dataset": "v1-warmup", "estimator": "cov", "mlps": "0:32"}]
    assert "Score mean on v1-warmup MLPs 0:32 and cov on v1-warmup MLPs 0:32" in noise["reason"]


def test_the_curves_open_on_the_sides_estimators_dataset_and_shared_mlps(runs):
    mean4, cov6 = (load_side(f"run:{runs[key].run_id}") for key in (("mean", "0:4"), ("cov", "0:6")))
    opens = curve_defaults(mean4, cov6)
    assert (opens["a"], opens["b"], opens["note"]) == ("mean", "cov", None)
    assert opens["dataset"] is None and opens["mlps"] == ""  # this dataset is not served: the page keeps its own
    base = curve_defaults(load_side("base:v1-warmup:cumulant:3"), load_side("base:v1-warmup:cov"))
    assert base == {"dataset": "v1-warmup", "a": "cumulant:3", "b": "cov", "mlps": "0:32", "note": None}
    alone = curve_defaults(load_side("base:v1-warmup:mean"), None)
    assert (alone["a"], alone["b"]) == ("mean", "mc:1B")
    upload = Side("run:x", "my upload", "run", "v1-warmup", "v1-warmup", 1048576, dict(mean4.entries))
    stood = curve_defaults(upload, load_side("base:v1-warmup:cov"))
    assert (stood["a"], stood["b"], stood["mlps"]) == ("mc:1B", "cov", "0:4")
    assert stood["note"].startswith("A (my upload) cannot be swept here")
    assert curve_defaults(None, None)["a"] == "mc:1B"


def _report(budget: int, failed: list[bool], scores: list[float]) -> dict:
    per_mlp = [{"mlp_index": i, "failed": f, "budget_exhausted": f, "adjusted_final_layer_score": s,
                "final_layer_mse": s} for i, (f, s) in enumerate(zip(failed, scores, strict=True))]
    return {"results": {"per_mlp": per_mlp}}


def test_a_budget_pairs_only_the_mlps_neither_side_failed_and_names_what_it_left_out():
    a = {10: _report(10, [True] * 3 + [False] * 5, [1.0] * 3 + [0.1] * 5),
         20: _report(20, [True] * 8, [1.0] * 8)}
    b = {10: _report(10, [False] * 8, [0.2] * 8), 20: _report(20, [False] * 8, [0.2] * 8)}
    rows = paired_curves(a, b, metric="score")
    assert rows[0]["mlps"] == [3, 4, 5, 6, 7] and rows[0]["left_out"] == 3 and rows[0]["n"] == 5
    assert rows[0]["failed_a"] == "3 of 8 MLPs failed: FLOP budget" and rows[0]["failed_b"] is None
    assert rows[0]["mean_difference"] == pytest.approx(-0.1) and rows[0]["verdict"] == "too few MLPs"
    assert rows[1]["n"] == 0 and rows[1]["left_out"] == 8 and rows[1]["failed_a"] == "8 of 8 MLPs failed: FLOP budget"


def test_a_side_with_failed_mlps_is_named_and_its_failed_mlps_drawn_apart(dataset, private_state):
    """Covariance propagation under a budget below its cost (24 x 3) fails on every MLP: the verdict names it,
    the pair scatter draws those MLPs as crosses of their own, never among the MLPs that ran."""
    from components.figures.compare import pair_scatter
    from whestboard.rules import failure_kind, failures_sentence

    small = 60_000  # above mean propagation's cost on 24 x 3 (20,736 FLOPs), below covariance propagation's
    outcomes = [run_and_record(RunRequest(dataset, "0:6", resolve_estimator(kind), rulebook_for(None, small)))
                for kind in ("mean", "cov")]
    mean_entries = outcomes[0].report["results"]["per_mlp"]
    assert all(e["budget_exhausted"] for e in outcomes[1].report["results"]["per_mlp"])
    out = verdict(*(load_side(f"run:{o.run_id}") for o in outcomes))
    assert out["failures"] == {"a": failures_sentence([failure_kind(e) for e in mean_entries]),
                               "b": "6 of 6 MLPs failed: FLOP budget"}
    assert out["per_mlp"]["failed_b"] == [True] * 6
    assert out["per_mlp"]["failed_a"] == [e["failed"] for e in mean_entries]
    assert "B: 6 of 6 MLPs failed: FLOP budget" in str(verdict_panel(out))
    fig = pair_scatter(out, "score")
    crosses = next(t for t in fig.data if (t.meta or {}).get("failed_mlps"))
    assert len(crosses.x) == 6 and crosses.marker.symbol == "x-thin-open"
    assert len(next(t for t in fig.data if t.name == "MLPs").x) == 0  # every shared MLP failed on B
