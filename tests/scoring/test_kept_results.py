"""Results kept as data are never a busy machine's: ``execute_for_keeps`` scores a load accident again, and
refuses it when it stays one; a bake of baselines never writes one.

"Waiting" is what the rules measure: wall time not spent computing. An estimator that sleeps waits exactly as
one on a machine whose cores are busy does, so a sleep in predict stands for a loaded machine here; one that
computes (pure Python) the same time fails the cap for real and is kept as the failure it is.
"""

from __future__ import annotations

import json
import time

import flopscope.numpy as fnp
import pytest

from tests.upstream import make_official
from whestboard.band import _baselines
from whestboard.data import open_dataset
from whestboard.rules import load_caused, verdict_of
from whestboard.scoring import (
    EstimatorHandle,
    LoadCausedFailure,
    RunRequest,
    execute,
    execute_for_keeps,
    rulebook_for,
)

pytestmark = [pytest.mark.usefixtures("private_state"),
              pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")]
BUDGET = 10**8  # v2-phase2's rules (residual time capped at 0.4 s) at a budget small MLPs can use


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("keeps") / "ds", width=16, depth=2, n_samples=500,
                                      seeds=[4, 5, 6]))


class Waits:
    """Sleeps 0.6 s in predict (past the 0.4 s residual cap) on the first ``times`` calls for each MLP, shared
    by every instance (each attempt starts a fresh estimator); then predicts zeros at once."""

    def __init__(self, calls: dict, times: int, computes: bool = False) -> None:
        self.calls, self.times, self.computes = calls, times, computes

    def predict(self, mlp, budget):
        key = int(mlp.seed)
        self.calls[key] = self.calls.get(key, 0) + 1
        if self.calls[key] <= self.times:
            if self.computes:
                stop, total = time.process_time() + 0.6, 0
                while time.process_time() < stop:
                    total += 1
            else:
                time.sleep(0.6)
        return fnp.zeros((mlp.depth, mlp.width), dtype=fnp.float32)


def handle(times: int, *, computes: bool = False, calls: dict | None = None) -> EstimatorHandle:
    calls = {} if calls is None else calls
    return EstimatorHandle(label="waits" if not computes else "computes", kind="test", code_sha256="0" * 64,
                           factory=lambda: Waits(calls, times, computes))


def request(dataset, h: EstimatorHandle, mlps="0:3") -> RunRequest:
    return RunRequest(dataset, mlps, h, rulebook_for("v2-phase2", BUDGET))


def test_a_load_accident_is_scored_again_and_only_the_kept_entry_is_reported(dataset):
    first = execute(request(dataset, handle(1), "1")).report["results"]["per_mlp"][0]
    rulebook = rulebook_for("v2-phase2", BUDGET)
    assert first["residual_wall_time_exhausted"] and load_caused(first, rulebook)  # what a busy machine gives
    seen = []
    outcome = execute_for_keeps(request(dataset, handle(1)), on_progress=lambda done, total, e: seen.append(
        (done, total, e["mlp_index"], e["failed"])))
    per_mlp = outcome.report["results"]["per_mlp"]
    assert [e["mlp_index"] for e in per_mlp] == [0, 1, 2] and not any(e["failed"] for e in per_mlp)
    assert outcome.report["results"]["n_failed_mlps"] == 0 and outcome.report["complete"]
    assert sorted(seen) == [(1, 3, 0, False), (2, 3, 1, False), (3, 3, 2, False)]  # never the accident
    assert sorted(outcome.predictions) == [0, 1, 2]


def test_a_failure_that_stays_a_load_accident_is_refused_and_never_reported(dataset):
    seen = []
    with pytest.raises(LoadCausedFailure) as caught:
        execute_for_keeps(request(dataset, handle(99), "0:2"), on_progress=lambda *a: seen.append(a))
    assert caught.value.indices == [0, 1] and seen == []
    text = str(caught.value)
    assert "each of 3 attempts" in text and "residual" in text and "quiet machine" in text


def test_a_real_failure_is_kept_as_the_failure_it_is(dataset):
    calls: dict = {}
    outcome = execute_for_keeps(request(dataset, handle(99, computes=True, calls=calls), "0"))
    entry = outcome.report["results"]["per_mlp"][0]
    rulebook = rulebook_for("v2-phase2", BUDGET)
    assert entry["failed"] and verdict_of(entry, rulebook)[0] == "residual" and not load_caused(entry, rulebook)
    assert sum(calls.values()) == 1  # scored once: nothing to score again


def test_a_bake_never_writes_a_load_accident_and_scores_an_unrecorded_failure_again(dataset, tmp_path, monkeypatch):
    """The shipped-baseline path (``compute_baselines`` into a directory): the accident is scored again before
    anything is written; a stored failure whose entry records no cause (an older file) is scored again too."""
    calls: dict = {}
    monkeypatch.setattr(_baselines, "resolve_estimator", lambda kind: handle(1, calls=calls))
    monkeypatch.setattr(_baselines, "rulebook_for", lambda tag, budget=None: rulebook_for("v2-phase2", BUDGET))
    _baselines.compute_baselines(dataset, kinds=("mean",), budget=BUDGET, directory=tmp_path)
    path = tmp_path / "baselines" / "mean.json"
    stored = json.loads(path.read_text())
    assert [e["failed"] for e in stored["per_mlp"]] == [False, False, False]
    assert sorted(calls.values()) == [2, 2, 2]  # each MLP: the accident, then the kept result

    legacy = stored["per_mlp"][1]
    for flag in ("residual_wall_time_exhausted", "cpu_wait_s", "predict_wait_s"):
        legacy.pop(flag, None)
    legacy.update(failed=True, final_layer_mse=1.0, failure_reason="over the residual wall-time cap")
    path.write_text(json.dumps(stored))
    _baselines.compute_baselines(dataset, kinds=("mean",), budget=BUDGET, directory=tmp_path)
    again = json.loads(path.read_text())["per_mlp"]
    assert [e["failed"] for e in again] == [False, False, False]
    assert again[1]["final_layer_mse"] != 1.0 and sorted(calls.values()) == [2, 2, 3]  # only MLP 1 again


def test_a_bake_on_a_machine_that_stays_busy_is_refused_and_writes_nothing(dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(_baselines, "resolve_estimator", lambda kind: handle(99))
    monkeypatch.setattr(_baselines, "rulebook_for", lambda tag, budget=None: rulebook_for("v2-phase2", BUDGET))
    with pytest.raises(LoadCausedFailure):
        _baselines.compute_baselines(dataset, kinds=("mean",), budget=BUDGET, directory=tmp_path)
    assert not (tmp_path / "baselines" / "mean.json").exists()
