"""The byte-bounded weights cache and the dataset registry."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from whestbench import budget

from whestboard.data import registry
from whestboard.data.bake import bake, plan_from_args
from whestboard.data.weights_cache import ByteBoundedCache
from whestboard.rules.rounds import ALL_ROUNDS, get_round, round_for_shape






def test_cache_stays_under_its_byte_bound():
    cache = ByteBoundedCache(max_bytes=3 * 800)
    loads = []
    for key in range(5):
        cache.get_or_load(key, lambda key=key: loads.append(key) or np.zeros(100, dtype=np.float64))
    assert cache.nbytes <= 3 * 800 and len(cache) == 3
    assert 4 in cache and 0 not in cache
    cache.get_or_load(4, lambda: pytest.fail("cached value reloaded"))


def test_cache_loads_once_under_concurrency():
    """The first load blocks until every other thread has asked for the same key: without the per-key
    lock each of them would call the loader too."""
    cache = ByteBoundedCache(max_bytes=10_000)
    calls = []
    barrier = threading.Barrier(4)
    release = threading.Event()

    def load():
        calls.append(1)
        release.wait(timeout=10)
        return np.ones(10)

    def worker():
        barrier.wait()
        cache.get_or_load("k", load)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    while not calls:  # the first loader is inside load(), holding the key
        threading.Event().wait(0.01)
    threading.Event().wait(0.3)  # the other three have passed the barrier and asked for the key meanwhile
    release.set()
    for t in threads:
        t.join()
    assert len(calls) == 1


def test_registry_serves_data_dir_and_env_datasets(tmp_path, monkeypatch):
    embedded, extra = tmp_path / "data", tmp_path / "elsewhere"
    plan = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=2, n_samples=64, seeds=None)
    bake(embedded / "mine", plan, show_progress=False)
    bake(extra / "mine", plan, show_progress=False)
    (embedded / "broken").mkdir()
    (embedded / "broken" / "metadata.json").write_text("{")
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(embedded))
    monkeypatch.setenv("WHESTBOARD_DATASETS", str(extra / "mine"))
    found = registry.datasets()
    assert sorted(found) == ["mine", "mine-2"]
    assert [b.key for b in registry.broken_datasets()] == ["broken"]
    rows = {r["key"]: r for r in registry.dataset_overview()}
    assert rows["mine"]["noise_floor"] == pytest.approx(found["mine"].mean_avg_variance / 64)
    with pytest.raises(registry.DatasetNotFound, match="available: mine, mine-2"):
        registry.get_dataset("nope")
