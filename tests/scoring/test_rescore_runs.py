"""Re-scoring a run's stored package under the installed versions: a new run beside the old one."""

from __future__ import annotations

from importlib.metadata import version
from types import SimpleNamespace

import pytest

from whestboard.data import get_dataset
from whestboard.rules import library_versions
from whestboard.sandbox import ingest_upload
from whestboard.scoring import (
    RunError,
    _runs,
    _uploads,
    list_runs,
    resolve_estimator,
    rulebook_for,
    run_upload_job,
)

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]

ESTIMATOR = b'''
from whestbench.estimators import MeanPropagationEstimator


class Estimator(MeanPropagationEstimator):
    """Mean propagation, written as a participant's file."""
'''
OLDER = {"whestbench_version": "0.16.0", "flopscope_version": "0.12.0"}


def _ctx(spec: dict):
    return SimpleNamespace(job=SimpleNamespace(spec=spec), report=lambda **_: None, should_cancel=lambda: False)


@pytest.fixture()
def old_run(monkeypatch) -> str:
    """An upload scored on two MLPs by an app whose versions were older (what a store from last release holds)."""
    upload = ingest_upload(ESTIMATOR, "estimator.py")
    spec = _uploads.job_spec(upload.sha256, "v1-warmup", "0:2", team="alpha")
    with monkeypatch.context() as patched:
        patched.setattr(_runs, "library_versions", lambda: {**library_versions(), **OLDER})
        result = _uploads.run_upload_job(_ctx(spec))
    assert result["ok"], result.get("error")
    return result["run_id"]


def test_a_run_is_rescored_as_a_new_run_under_the_installed_versions_and_the_old_is_kept(old_run):
    spec = _uploads.rescore_spec(old_run)
    assert spec["rescore_of"] == old_run and spec["mlps"] == "0,1" and spec["team"] == "alpha"
    result = run_upload_job(_ctx(spec))
    assert result["ok"] and not result["cached"] and result["run_id"] != old_run
    runs = {r["run_id"]: r for r in list_runs()}
    old, new = runs[old_run], runs[result["run_id"]]
    assert (old["whestbench_version"], old["flopscope_version"]) == tuple(OLDER.values())
    assert (new["whestbench_version"], new["flopscope_version"]) == (version("whestbench"), version("flopscope"))
    assert new["rescore_of"] == old_run and old["rescore_of"] is None
    assert new["seed_protocol"] == old["seed_protocol"] == get_dataset("v1-warmup").info.seed_protocol
    assert new["mlp_indices"] == old["mlp_indices"] and new["code_sha256"] == old["code_sha256"]
    # the same package on the same MLPs, scored by the libraries both runs actually used: the same numbers
    assert new["adjusted_score"] == old["adjusted_score"]


def test_a_run_without_a_stored_package_cannot_be_rescored():
    request = _runs.RunRequest(get_dataset("v1-warmup"), "0", resolve_estimator("mean"), rulebook_for(None))
    builtin = _runs.run_and_record(request).run_id
    with pytest.raises(RunError, match="whose package is not kept in the artifact store, so it cannot be re-scored"):
        _uploads.rescore_spec(builtin)
    with pytest.raises(RunError, match="no run 'nope'"):
        _uploads.rescore_spec("nope")
