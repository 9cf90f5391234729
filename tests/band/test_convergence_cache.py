"""The convergence view is rebuilt exactly when what it is drawn from changes, and never otherwise."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from whestboard.band import _view
from whestboard.band._baselines import BASELINE_LABELS, compute_baselines, missing_baselines
from whestboard.band._folder import compute_band
from whestboard.band._view import cached_convergence_view, convergence_view
from whestboard.data import bake, open_dataset, plan_from_args
from whestboard.scoring import RunRequest, resolve_estimator, rulebook_for, run_and_record

ROUND, BUDGET = "v1-warmup", 200_000_000  # a round's shape, so its runs are listed; a small band budget


def _baked_with_band(folder: Path, seeds: list[int]) -> Path:
    """A dataset of the round's shape and its band, made in ``folder`` with a state folder of its own."""
    path = folder / "ds"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WHESTBOARD_STATE_DIR", str(folder / "state"))
        bake(path, plan_from_args(round_tag=ROUND, width=None, depth=None, n_mlps=None, n_samples=4096,
                                  seeds=seeds), explicit_seeds=True, show_progress=False)
        compute_band(open_dataset(path), budget=BUDGET, show_progress=False)
    return path


def _own_copy(pristine: Path, tmp_path: Path):
    """The dataset and band made once per module, copied (times kept) into this test's folder: a test
    changes only its own copy, and its views are cached under its own path."""
    return open_dataset(shutil.copytree(pristine, tmp_path / pristine.name))


@pytest.fixture(scope="module")
def three_mlps(tmp_path_factory) -> Path:
    return _baked_with_band(tmp_path_factory.mktemp("three-mlps"), [31, 32, 33])


@pytest.fixture(scope="module")
def one_mlp(tmp_path_factory) -> Path:
    return _baked_with_band(tmp_path_factory.mktemp("one-mlp"), [31])


@pytest.fixture
def dataset(three_mlps, tmp_path, private_state):
    return _own_copy(three_mlps, tmp_path)


@pytest.fixture
def one_mlp_dataset(one_mlp, tmp_path, private_state):
    """One MLP: scoring every baseline on it costs a third of three, and whether new baseline files
    change the view's version does not depend on how many MLPs they cover."""
    return _own_copy(one_mlp, tmp_path)


def test_unchanged_data_serves_the_same_view_and_version(dataset):
    first, version = cached_convergence_view(dataset)
    again, same = cached_convergence_view(dataset)
    assert again is first and same == version
    fresh = convergence_view(dataset)
    assert fresh.band_n_mlps == first.band_n_mlps == 3 and fresh.runs == first.runs == []


def test_a_recorded_run_changes_the_version_and_appears_in_the_view(dataset):
    before, version = cached_convergence_view(dataset)
    outcome = run_and_record(RunRequest(dataset, "0:2", resolve_estimator("mean"), rulebook_for(ROUND)))
    after, new_version = cached_convergence_view(dataset)
    assert new_version != version and after is not before
    assert after.static_token == before.static_token  # the band and baselines part of the figure is reused
    assert [r.run_id for r in after.runs] == [outcome.report["run_id"]] == [r.run_id for r in
                                                                           convergence_view(dataset).runs]


def test_new_baselines_and_band_files_change_the_version(one_mlp_dataset):
    dataset = one_mlp_dataset
    view, version = cached_convergence_view(dataset)
    assert view.missing_baselines() == missing_baselines(dataset) == list(BASELINE_LABELS)
    compute_baselines(dataset)
    with_baselines, version2 = cached_convergence_view(dataset)
    assert version2 != version and with_baselines.static_token != view.static_token
    assert with_baselines.missing_baselines() == missing_baselines(dataset) == []
    band_file = next((dataset.info.path / "band").rglob("*.json"))
    stat = band_file.stat()
    os.utime(band_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cached_convergence_view(dataset)[1] not in (version, version2)


def test_an_unreachable_store_still_draws_the_band(dataset, monkeypatch):
    def broken():
        raise OSError("store down")

    monkeypatch.setattr(_view, "runs_revision", broken)
    view, version = cached_convergence_view(dataset)
    assert view.band_n_mlps == 3 and version
