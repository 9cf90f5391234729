"""A time-rule failure says when waiting made the difference: in the MLP's verdict and the report's machine note.

Two sandboxed estimators fail Phase 2's 0.4 s residual cap: one sleeps 0.6 s (wall time not spent computing,
as on a machine whose cores are busy with other work), one computes 0.6 s of pure Python. Only the first
would have met the cap without its wait; only its verdict and the report say so.
"""

from __future__ import annotations

import pytest

from tests.upstream import make_official
from whestboard.data import open_dataset
from whestboard.rules import verdict_of
from whestboard.scoring import _runs, rulebook_for
from whestboard.scoring._sandboxed import sandboxed_handle

pytestmark = [pytest.mark.usefixtures("private_state"),
              pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")]
WAITS = """
import time

from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        time.sleep(0.6)
        return super().predict(mlp, budget)
"""
COMPUTES = """
import time

from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    def predict(self, mlp, budget):
        stop, total = time.process_time() + 0.6, 0
        while time.process_time() < stop:
            total += 1
        return super().predict(mlp, budget)
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("wait") / "ds", width=16, depth=2, n_samples=500,
                                      seeds=[4]))


def score(dataset, tmp_path, source: str):
    (tmp_path / "estimator.py").write_text(source)
    rulebook = rulebook_for("v2-phase2", 10**8)
    assert rulebook.residual_wall_time_limit_s == 0.4
    return _runs.execute(_runs.RunRequest(dataset, None, sandboxed_handle(str(tmp_path), round_tag="v2-phase2"),
                                        rulebook)), rulebook


def test_a_residual_failure_caused_by_waiting_says_so(dataset, tmp_path):
    outcome, rulebook = score(dataset, tmp_path, WAITS)
    entry = outcome.report["results"]["per_mlp"][0]
    assert entry["residual_wall_time_exhausted"] and entry["cpu_wait_s"] >= 0.5
    assert entry["predict_wait_s"] >= 0.5  # the worker's own count: predict's wall time minus its CPU
    verdict, sentence = verdict_of(entry, rulebook)
    assert verdict == "residual" and "waiting may have caused it" in sentence
    assert entry["failure_reason"] == sentence
    assert outcome.report["machine"]["waiting_mattered"] == [entry["mlp_index"]]


def test_a_residual_failure_of_real_work_does_not_blame_the_machine(dataset, tmp_path):
    outcome, rulebook = score(dataset, tmp_path, COMPUTES)
    entry = outcome.report["results"]["per_mlp"][0]
    assert entry["residual_wall_time_exhausted"]
    assert entry["residual_wall_time_s"] - entry["predict_wait_s"] > rulebook.residual_wall_time_limit_s
    verdict, sentence = verdict_of(entry, rulebook)
    assert verdict == "residual" and "waiting" not in sentence
    assert outcome.report["machine"]["waiting_mattered"] == []
