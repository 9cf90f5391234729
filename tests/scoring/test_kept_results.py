"""Results kept as data are never a busy machine's: ``execute_for_keeps`` scores a load accident again, and
refuses it when it stays one (the bake of baselines: tests/band/test_baselines_kept.py).

"Waiting" is what the rules measure: wall time not spent computing. An estimator that sleeps waits exactly as
one on a machine whose cores are busy does, so a sleep in predict stands for a loaded machine here; one that
computes (pure Python) the same time fails the cap for real and is kept as the failure it is.
"""

from __future__ import annotations

import pytest

from tests.upstream import make_official
from tests.waiting_estimators import BUDGET, handle
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


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("keeps") / "ds", width=16, depth=2, n_samples=500,
                                      seeds=[4, 5, 6]))


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
