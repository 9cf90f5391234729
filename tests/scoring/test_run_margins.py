"""A run's and the playground's margins are ``cap_margins`` of their own entries, under their own rulebook."""

from __future__ import annotations

import pytest

from whestboard.data import parse_shape, served_datasets
from whestboard.rules import Caps
from whestboard.scoring import (
    RunRequest,
    _playground,
    execute,
    playground_margins,
    resolve_estimator,
    rulebook_for,
    run_margins,
)

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


def test_a_runs_margins_hold_its_mlps_and_its_one_setup_to_its_rulebook():
    dataset = served_datasets()["v1-warmup"]
    rulebook = rulebook_for("v1-warmup", 10**9)  # the lab's own budget: the caps follow it
    report = execute(RunRequest(dataset, dataset.indices[:2], resolve_estimator("mean"), rulebook)).report
    assert isinstance(report["setup_wall_s"], float) and 0 <= report["setup_wall_s"] < 5
    margins = run_margins(report)
    assert margins.caps == Caps(1e9, 60.0, None, 1e11)
    by_key = {m.key: m for m in margins.margins}
    entries = report["results"]["per_mlp"]
    assert by_key["wall"].used == tuple(e["wall_time_s"] for e in entries)
    assert by_key["residual"].used == tuple(e["effective_compute"] for e in entries)  # priced: C against B
    assert by_key["flops"].used == tuple(float(e["flops_used"]) for e in entries)
    assert by_key["setup"].labels == ("setup()",) and by_key["setup"].used == (report["setup_wall_s"],)
    assert by_key["wall"].labels == tuple(f"MLP {e['mlp_index']}" for e in entries)


def test_the_playgrounds_margins_are_one_item_per_estimator():
    shape = parse_shape(16, 3, 77)
    rulebook = _playground.rulebook_for_shape(shape, "v2-phase2")
    result = _playground.play(shape, 2000, ["mean", "cov"], rulebook)
    margins = playground_margins(result)
    assert margins.caps == Caps.of(rulebook)
    by_key = {m.key: m for m in margins.margins}
    assert by_key["wall"].labels == tuple(s.label for s in result.results)
    assert by_key["wall"].used == tuple(s.entry["wall_time_s"] for s in result.results)
    assert by_key["residual"].used == tuple(s.entry["residual_wall_time_s"] for s in result.results)
    assert by_key["setup"].used == tuple(s.entry["setup_wall_s"] for s in result.results)


def test_an_upload_jobs_result_keeps_the_margins_of_its_sandboxed_run():
    """A participant's file scored in the sandbox: the job's result holds ``run_margins`` of the run it recorded,
    with setup() timed by the worker itself."""
    from types import SimpleNamespace

    from whestboard.rules import margins_from_dict
    from whestboard.sandbox import ingest_upload
    from whestboard.scoring import _uploads, get_run

    upload = ingest_upload(b"from whestbench.estimators import MeanPropagationEstimator\n\n\n"
                           b"class Estimator(MeanPropagationEstimator):\n    pass\n", "estimator.py")
    spec = _uploads.job_spec(upload.sha256, "v1-warmup", "0:2", team="alpha")
    result = _uploads.run_upload_job(SimpleNamespace(job=SimpleNamespace(spec=spec), report=lambda **_: None,
                                                     should_cancel=lambda: False))
    assert result["ok"], result.get("error")
    report = get_run(result["run_id"])
    assert result["margins"] == run_margins(report).as_dict()
    margins = margins_from_dict(result["margins"])
    setup = next(m for m in margins.margins if m.key == "setup")
    assert setup.used == (report["setup_wall_s"],) and 0 <= report["setup_wall_s"] < 5
    wall = next(m for m in margins.margins if m.key == "wall")
    assert wall.used == tuple(e["wall_time_s"] for e in report["results"]["per_mlp"])
