"""A failing estimator yields the grader's fallback and a reason a participant can act on."""

from __future__ import annotations

import dataclasses
import textwrap

import flopscope.numpy as fnp
import numpy as np
import pytest

from tests.upstream import make_official
from whestboard.data import open_dataset
from whestboard.scoring import Rulebook, _inputs, _runs, rulebook_for
from whestboard.scoring._estimators import resolve_estimator

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]

HEADER = """
import time
import flopscope.numpy as fnp
from whestbench import BaseEstimator
from whestbench.estimators import MeanPropagationEstimator

class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
"""

BODIES = {
    "exception": ("raise RuntimeError('exploded on purpose')", "error", "predict raised PREDICT_ERROR: exploded on purpose"),
    "nan": ("return fnp.full((mlp.depth, mlp.width), float('nan'))", "error",
            "the grader rejected the predictions: Predictions must contain only finite values"),
    "wrong_shape": ("return fnp.zeros((mlp.width, mlp.depth + 1))", "error",
                    "the grader rejected the predictions: Predictions must have shape"),
    # 2 * 1000^3 = 2e9 FLOPs, twenty times the 1e8 budget of these runs: over it as surely as a bigger
    # product, without filling two 128 MB operands first.
    "over_budget": ("return fnp.ones((1000, 1000)) @ fnp.ones((1000, 1000))", "budget_exhausted",
                    "over the FLOP budget"),
    "wall_cap": ("time.sleep(0.3); return MeanPropagationEstimator().predict(mlp, budget)", "time_exhausted",
                 "over the wall-clock cap"),
    "residual_cap": ("time.sleep(0.3); return fnp.zeros((mlp.depth, mlp.width)) + 0.5",
                     "residual_wall_time_exhausted", "residual wall-time cap"),
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("fail") / "ds", width=16, depth=2, n_samples=2000,
                                      seeds=[7, 8]))


def estimator_file(tmp_path, body: str) -> str:
    path = tmp_path / "estimator.py"
    path.write_text(textwrap.dedent(HEADER) + "        " + body + "\n")
    return str(path)


def rulebook_for_case(case: str) -> Rulebook:
    rulebook = rulebook_for("v1-warmup", 10**8)  # priced residual: nothing gated
    if case == "wall_cap":
        return dataclasses.replace(rulebook, wall_time_limit_s=0.1)
    if case == "residual_cap":
        return dataclasses.replace(rulebook_for("v2-phase2", 10**8), residual_wall_time_limit_s=0.1)
    return rulebook


@pytest.mark.parametrize("case", list(BODIES))
def test_failure_is_scored_as_zero_prediction_with_a_reason(dataset, tmp_path, case):
    body, flag, reason = BODIES[case]
    outcome = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator(estimator_file(tmp_path, body)),
                                           rulebook_for_case(case)))
    results = outcome.report["results"]
    assert results["n_failed_mlps"] == 2
    assert results["failure_breakdown"][flag] == 2
    for entry in results["per_mlp"]:
        truth, _ = dataset.truth(entry["mlp_index"])
        assert entry["failed"]
        assert reason in entry["failure_reason"]
        assert entry["fallback"].startswith("scored as the all-zero prediction")
        assert entry["score_multiplier"] == 1.0
        assert entry["final_layer_mse"] == float(fnp.mean(fnp.asarray(truth[-1]) ** 2))
        assert entry["adjusted_final_layer_score"] == entry["final_layer_mse"]
        assert not np.any(outcome.predictions[entry["mlp_index"]])
    assert results["mean_score_multiplier"] == 1.0


def test_combined_budget_is_enforced_under_priced_residual(dataset, tmp_path):
    """v1 rounds price residual seconds: C = F + 1e11 R can exceed B even when F does not."""
    body = "time.sleep(0.05); return MeanPropagationEstimator().predict(mlp, budget)"
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator(estimator_file(tmp_path, body)),
                                           rulebook_for("v1-warmup", 10**9)))
    entry = outcome.report["results"]["per_mlp"][0]
    assert entry["combined_budget_exhausted"] and entry["failed"]
    assert entry["effective_compute"] == entry["flops_used"] + 1e11 * entry["residual_wall_time_s"]
    assert "combined budget" in entry["failure_reason"]


def test_a_file_whose_setup_fails_stops_the_run_with_a_clear_error(dataset, tmp_path):
    path = tmp_path / "estimator.py"
    path.write_text(textwrap.dedent("""
        from whestbench import BaseEstimator
        class Estimator(BaseEstimator):
            def setup(self, context):
                raise OSError("weights.npz missing")
            def predict(self, mlp, budget):
                return None
    """))
    with pytest.raises(_inputs.RunError, match="weights.npz missing"):
        _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator(str(path)), rulebook_for(None)))


def test_only_the_failing_mlp_falls_back(dataset, tmp_path):
    body = "if mlp.seed == SEED: raise ValueError('bad seed')\n        return MeanPropagationEstimator().predict(mlp, budget)"
    seed = dataset.mlp(1).seed
    path = estimator_file(tmp_path, body.replace("SEED", str(seed)))
    outcome = _runs.execute(_runs.RunRequest(dataset, None, resolve_estimator(path), rulebook_for(None)))
    ok, bad = outcome.report["results"]["per_mlp"]
    assert not ok["failed"] and ok["failure_reason"] is None and ok["flops_used"] > 0
    assert bad["failed"] and "bad seed" in bad["failure_reason"] and bad["error_code"] == "PREDICT_ERROR"
    assert bad["traceback"] and "bad seed" in bad["traceback"]
    assert outcome.report["results"]["n_failed_mlps"] == 1


def test_time_not_spent_computing_is_reported_beside_exact_flops(dataset, tmp_path):
    """A sleeping estimator looks, to the clock, like one starved of CPU: the run says its times include waiting."""
    from components.figures.lab import contention_alert

    body = "time.sleep(0.3); return MeanPropagationEstimator().predict(mlp, budget)"
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator(estimator_file(tmp_path, body)),
                                           rulebook_for("v1-warmup", 10**9)))
    (entry,) = outcome.report["results"]["per_mlp"]
    # The sleep is 0.3 s; the host's own polling while the worker sleeps is CPU, hence the margin.
    assert 0.2 <= entry["cpu_wait_s"] <= entry["scoring_wall_s"]
    machine = outcome.report["machine"]
    assert machine["contended"] and machine["timed_failures"] == [0]  # priced residual: C = F + 1e11 R > B
    assert machine["cpu_wait_s"] == entry["cpu_wait_s"]
    text = str(contention_alert(outcome.report))
    assert f"{machine['cpu_wait_s']:.2f} s of the {machine['scoring_wall_s']:.2f} s spent scoring" in text
    assert "FLOP counts and MSEs are exact" in text and "might pass when timed alone" in text


def test_cpu_spent_in_the_sandbox_worker_is_not_counted_as_waiting(dataset, tmp_path):
    body = ("t = time.process_time()\n        while time.process_time() - t < 0.4: pass\n"
            "        return MeanPropagationEstimator().predict(mlp, budget)")
    outcome = _runs.execute(_runs.RunRequest(dataset, "0", resolve_estimator(estimator_file(tmp_path, body)),
                                           rulebook_for(None)))
    (entry,) = outcome.report["results"]["per_mlp"]
    assert entry["scoring_wall_s"] - entry["cpu_wait_s"] >= 0.35  # the worker's 0.4 CPU seconds were seen


def test_an_upload_job_with_a_hostile_selection_or_budget_is_refused_before_it_is_queued():
    from whestboard.data import get_dataset
    from whestboard.scoring import _uploads

    n = len(get_dataset("v1-warmup").indices)
    with pytest.raises(_inputs.RunError, match=rf"MLPs {n}\.\.99999999 are not in this dataset"):
        _uploads.job_spec("0" * 64, "v1-warmup", "0:100000000")
    with pytest.raises(_inputs.RunError, match=r"budget per MLP '2\*\*99999999' is more than 1e300 FLOPs"):
        _uploads.job_spec("0" * 64, "v1-warmup", "0", budget="2**99999999")
    assert _uploads.job_spec("0" * 64, "v1-warmup", "0:2")["mlps"] == "0:2"


def test_a_queued_upload_job_with_a_hostile_selection_ends_with_the_sentence_and_scores_nothing():
    """A job queued before its page checked it (an older server) fails with the parser's message."""
    from types import SimpleNamespace

    from whestboard.sandbox import ingest_upload
    from whestboard.scoring import _run_records, _uploads

    upload = ingest_upload(b"from whestbench import BaseEstimator\n\nclass Estimator(BaseEstimator):\n"
                            b"    def predict(self, mlp, budget):\n        return None\n", "estimator.py")
    spec = {"upload": upload.sha256, "dataset": "v1-warmup", "mlps": "-1", "team": None, "budget": None}
    result = _uploads.run_upload_job(SimpleNamespace(job=SimpleNamespace(spec=spec)))
    assert result["ok"] is False and "'-1' has a negative number" in result["error"]
    assert "contract" not in result and _run_records.list_runs() == []
