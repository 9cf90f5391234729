"""Re-scoring a submission's stored package under the installed versions: a new submission, the old one kept."""

from __future__ import annotations

import time
from dataclasses import replace
from importlib.metadata import version
from types import SimpleNamespace

import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.data import get_dataset
from whestboard.jobs import ensure_executor, queued_job
from whestboard.leaderboard import _files, _rescore, _store
from whestboard.sandbox import ingest_upload
from whestboard.scoring import get_run, job_spec, run_upload_job

sqlite_store = helpers.sqlite_store
pytestmark = pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")

ESTIMATOR = b'''
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    """Mean propagation, written as a participant's file."""
'''
#: What the submission says priced it: a store from an older release (tests/scoring/test_rescore_runs.py
#: makes such a run itself).
OLDER = {"whestbench_version": "0.16.0", "flopscope_version": "0.12.0"}


@pytest.fixture()
def old_run(sqlite_store) -> str:
    """An upload scored on two MLPs through the upload job."""
    upload = ingest_upload(ESTIMATOR, "estimator.py")
    ctx = SimpleNamespace(job=SimpleNamespace(spec=job_spec(upload.sha256, "v1-warmup", "0:2", team="alpha")),
                          report=lambda **_: None, should_cancel=lambda: False)
    result = run_upload_job(ctx)
    assert result["ok"], result.get("error")
    return result["run_id"]


def test_a_submission_imported_from_a_file_says_it_has_no_package(sqlite_store, tmp_path):
    row, mlps = submission_row("file-1", "alpha")
    _files.import_files([write_csvs(tmp_path, [(row, mlps)])])
    with pytest.raises(ValueError, match="submission file-1 was imported from a file: no package of it is stored"):
        _rescore.queue_rescore("file-1")
    assert _store.submission_count() == 1


def test_a_submission_is_rescored_through_the_queue_and_both_stay_with_their_versions(old_run):
    report = get_run(old_run)
    sub, mlps, problems = _files.parse_run_report(report, "old run", team="alpha", submission_id="alpha-1",
                                                  round_tag="v1-warmup")
    assert not problems
    _store.upsert([replace(sub, run_id=old_run, source="upload", **OLDER)], mlps)
    assert _store.get_submission("alpha-1").whestbench_version == OLDER["whestbench_version"]
    executor = ensure_executor(run_upload_job)
    try:
        queued = _rescore.queue_rescore("alpha-1")
        assert (queued.run_id, queued.submission_id) == (old_run, "alpha-1")
        deadline = time.time() + 300
        while not queued_job(queued.job_id).finished and time.time() < deadline:
            time.sleep(0.2)
    finally:
        executor.stop()
    job = queued_job(queued.job_id)
    assert job.status == "finished", job.error
    new_id = _rescore.settle_rescore(queued.job_id)
    assert _rescore.settle_rescore(queued.job_id) == new_id  # written once
    frame = _store.submissions_frame(team="alpha").set_index("submission_id")
    assert set(frame.index) == {"alpha-1", new_id}
    old, new = frame.loc["alpha-1"], frame.loc[new_id]
    assert (old["whestbench_version"], old["flopscope_version"]) == tuple(OLDER.values())
    assert (new["whestbench_version"], new["flopscope_version"]) == (version("whestbench"), version("flopscope"))
    assert new["rescore_of"] == "alpha-1" and new["run_id"] == job.result["run_id"] and new["source"] == "rescore"
    assert new["seed_protocol"] == get_dataset("v1-warmup").info.seed_protocol
    assert _store.mlp_frame([new_id])["mlp_index"].tolist() == [0, 1]
