"""The convergence view is rebuilt exactly when what it is drawn from changes, and never otherwise."""

from __future__ import annotations

import os

import pytest

from whestboard.band import _view
from whestboard.band._baselines import BASELINE_LABELS, compute_baselines, missing_baselines
from whestboard.band._folder import compute_band
from whestboard.band._view import cached_convergence_view, convergence_view
from whestboard.data import bake, open_dataset, plan_from_args
from whestboard.scoring import RunRequest, resolve_estimator, rulebook_for, run_and_record

ROUND, BUDGET = "v1-warmup", 200_000_000  # a round's shape, so its runs are listed; a small band budget


@pytest.fixture
def dataset(tmp_path, private_state):
    path = tmp_path / "ds"
    bake(path, plan_from_args(round_tag=ROUND, width=None, depth=None, n_mlps=None, n_samples=4096,
                              seeds=[31, 32, 33]), explicit_seeds=True, show_progress=False)
    ds = open_dataset(path)
    compute_band(ds, budget=BUDGET, show_progress=False)
    return ds


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


def test_new_baselines_and_band_files_change_the_version(dataset):
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
