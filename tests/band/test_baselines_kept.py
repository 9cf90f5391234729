"""A bake of baselines never writes a load accident, and scores again a stored failure whose cause it cannot
judge (``compute_baselines`` through ``scoring.execute_for_keeps``)."""

from __future__ import annotations

import json

import pytest

from tests.upstream import make_official
from tests.waiting_estimators import BUDGET, handle
from whestboard.band import _baselines
from whestboard.data import open_dataset
from whestboard.scoring import LoadCausedFailure, rulebook_for

pytestmark = [pytest.mark.usefixtures("private_state"),
              pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("kept") / "ds", width=16, depth=2, n_samples=500,
                                      seeds=[4, 5, 6]))


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
