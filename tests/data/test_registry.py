"""The dataset registry."""

from __future__ import annotations

import pytest

from whestboard.data import _registry
from whestboard.data._bake import bake, plan_from_args


def test_registry_serves_data_dir_and_env_datasets(tmp_path, monkeypatch):
    embedded, extra = tmp_path / "data", tmp_path / "elsewhere"
    plan = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=2, n_samples=64, seeds=None)
    bake(embedded / "mine", plan, show_progress=False)
    bake(extra / "mine", plan, show_progress=False)
    (embedded / "broken").mkdir()
    (embedded / "broken" / "metadata.json").write_text("{")
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(embedded))
    monkeypatch.setenv("WHESTBOARD_DATASETS", str(extra / "mine"))
    found = _registry.served_datasets()
    assert sorted(found) == ["mine", "mine-2"]
    assert [b.key for b in _registry.broken_datasets()] == ["broken"]
    rows = {r["key"]: r for r in _registry.dataset_overview()}
    assert rows["mine"]["noise_floor"] == pytest.approx(found["mine"].mean_avg_variance / 64)
    with pytest.raises(_registry.DatasetNotFound, match="available: mine, mine-2"):
        _registry.get_dataset("nope")
