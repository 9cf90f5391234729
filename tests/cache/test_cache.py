"""The cache service: bounded, sized by the configuration when called, local or shared through Redis."""

from __future__ import annotations

import hashlib
import hmac
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from whestboard.cache import Region, memoize
from whestboard.data import WEIGHTS_CACHE

REPO = Path(__file__).resolve().parents[2]


def _arrays(max_bytes: int, monkeypatch) -> Region[np.ndarray]:
    monkeypatch.setenv("WHESTBOARD_CACHE_BYTES", str(max_bytes))
    return Region("test-arrays", size_of=lambda array: int(array.nbytes))


def test_cache_stays_under_its_byte_bound(monkeypatch):
    cache = _arrays(3 * 800, monkeypatch)
    loads = []
    for key in range(5):
        cache.get_or_load(key, lambda key=key: loads.append(key) or np.zeros(100, dtype=np.float64))
    assert cache.size <= 3 * 800 and len(cache) == 3
    assert 4 in cache and 0 not in cache
    cache.get_or_load(4, lambda: pytest.fail("cached value reloaded"))
    assert loads == [0, 1, 2, 3, 4]


def test_entry_bound_evicts_the_least_recently_used(monkeypatch):
    cache: Region[int] = Region("test-entries", max_entries=2)
    cache.get_or_load("a", lambda: 1)
    cache.get_or_load("b", lambda: 2)
    cache.get_or_load("a", lambda: pytest.fail("a reloaded"))  # a is now the most recent
    cache.get_or_load("c", lambda: 3)
    assert "a" in cache and "c" in cache and "b" not in cache and len(cache) == 2


def test_byte_bound_is_read_from_the_configuration_at_each_store(monkeypatch):
    cache = _arrays(10 * 800, monkeypatch)
    for key in range(4):
        cache.get_or_load(key, lambda: np.zeros(100, dtype=np.float64))
    assert len(cache) == 4
    monkeypatch.setenv("WHESTBOARD_CACHE_BYTES", str(2 * 800))  # no restart: the next store obeys it
    assert cache.max_bytes == 2 * 800
    cache.get_or_load(9, lambda: np.zeros(100, dtype=np.float64))
    assert len(cache) == 2 and cache.size == 2 * 800 and 9 in cache


def test_share_is_a_fraction_of_the_configured_bytes(monkeypatch):
    monkeypatch.setenv("WHESTBOARD_CACHE_BYTES", "4096")
    assert Region("test-share", share=1 / 4).max_bytes == 1024
    monkeypatch.delenv("WHESTBOARD_CACHE_BYTES")
    assert WEIGHTS_CACHE.max_bytes == 1 << 30


def test_a_value_over_the_bound_is_returned_but_not_kept(monkeypatch):
    cache = _arrays(100, monkeypatch)
    value = cache.get_or_load("big", lambda: np.zeros(100))
    assert value.shape == (100,) and "big" not in cache and len(cache) == 0


def test_weights_are_kept_read_only(monkeypatch):
    WEIGHTS_CACHE.clear()
    array = WEIGHTS_CACHE.get_or_load(("test", 0), lambda: np.zeros(4))
    assert not array.flags.writeable
    WEIGHTS_CACHE.clear()


def test_revision_is_part_of_every_key():
    revision = ["r1"]
    loads = []
    cache: Region[str] = Region("test-revision", max_entries=8, revision=lambda: revision[0])
    assert cache.get_or_load("k", lambda: loads.append(1) or "old") == "old"
    assert cache.get_or_load("k", lambda: pytest.fail("reloaded under the same revision")) == "old"
    revision[0] = "r2"
    assert cache.get_or_load("k", lambda: loads.append(2) or "new") == "new"
    assert loads == [1, 2]


def test_memoize_keys_by_arguments_and_revision():
    revision = [1]
    calls = []

    @memoize("test-memoize", revision=lambda: revision[0], shared=False)  # clear() below must forget it all
    def double(x: int, *, label: str = "") -> str:
        calls.append(x)
        return f"{label}{2 * x}"

    assert double(2) == "4" and double(2) == "4" and double(3, label="=") == "=6"
    assert calls == [2, 3]
    revision[0] = 2
    assert double(2) == "4" and calls == [2, 3, 2]
    double.cache.clear()
    double(2)
    assert calls == [2, 3, 2, 2]


def test_cache_loads_once_under_concurrency(monkeypatch):
    """The first load blocks until every other thread has asked for the same key: without the per-key
    lock each of them would call the loader too."""
    cache = _arrays(10_000, monkeypatch)
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


def test_a_failed_load_is_not_kept_and_is_retried():
    cache: Region[int] = Region("test-failure", max_entries=4)
    with pytest.raises(ValueError):
        cache.get_or_load("k", lambda: (_ for _ in ()).throw(ValueError("no")))
    assert "k" not in cache and cache.get_or_load("k", lambda: 7) == 7


def test_warm_loads_in_the_background_once():
    cache: Region[int] = Region("test-warm", max_entries=4)
    loaded = threading.Event()
    cache.warm("k", lambda: loaded.set() or 5)
    assert loaded.wait(timeout=10)
    assert cache.get_or_load("k", lambda: pytest.fail("warmed value reloaded")) == 5


_PROCESS = textwrap.dedent("""
    import sys
    from whestboard.cache import memoize

    @memoize("test-two-processes", revision=lambda: sys.argv[2])
    def value(x):
        print("computed", flush=True)
        return {"x": x, "by": sys.argv[1]}

    print(value(21))
""")


@pytest.mark.services
def test_shared_backend_serves_one_process_what_another_computed(tmp_path, monkeypatch):
    from tests.prod_support import redis_server

    with redis_server() as url:
        # the two processes share the store (its signing key) as two machines share PostgreSQL
        env = {"WHESTBOARD_REDIS_URL": url, "WHESTBOARD_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}

        def run(name: str, revision: str) -> str:
            done = subprocess.run([sys.executable, "-c", _PROCESS, name, revision], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stderr
            return done.stdout

        first = run("first", "r1")
        assert "computed" in first and "'by': 'first'" in first
        second = run("second", "r1")  # another process: the value comes from Redis, not from its function
        assert "computed" not in second and "'by': 'first'" in second
        bumped = run("third", "r2")  # a new revision is a new key
        assert "computed" in bumped and "'by': 'third'" in bumped

        monkeypatch.setenv("WHESTBOARD_REDIS_URL", url)
        import redis

        keys = redis.Redis.from_url(url).keys("whestboard-cache:test-two-processes:*")
        assert len(keys) == 2


def test_without_redis_a_shared_region_is_shared_through_the_state_folder(tmp_path, monkeypatch):
    """Two processes' regions (two fresh Regions here) of one machine: the second reads what the first stored."""
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    first, second = Region("test-folder", shared=True), Region("test-folder", shared=True)
    assert first.get_or_load("k", lambda: [1, 2, 3]) == [1, 2, 3]
    assert second.get_or_load("k", lambda: pytest.fail("recomputed although the folder holds it")) == [1, 2, 3]
    assert (tmp_path / "cache").is_dir()
    assert Region("test-folder", shared=False).get("k") is None  # a process-local region never looks there



def test_a_value_another_release_stored_is_not_served(tmp_path, monkeypatch):
    """A shared value carries the code's revision in its key: after a deploy of changed code (a figure drawn
    differently), the value the older release stored within its 24 hours is recomputed, not served."""
    import whestboard.cache as cache

    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path))
    assert cache.code_revision() == cache.code_revision() and len(cache.code_revision()) == 16
    monkeypatch.setattr(cache, "code_revision", lambda: "release-1")
    assert Region("test-release", shared=True).get_or_load("k", lambda: "drawn by release 1") == "drawn by release 1"
    assert Region("test-release", shared=True).get_or_load("k", lambda: pytest.fail("not shared")) == "drawn by release 1"
    monkeypatch.setattr(cache, "code_revision", lambda: "release-2")
    assert Region("test-release", shared=True).get_or_load("k", lambda: "drawn by release 2") == "drawn by release 2"


# --------------------------------------------------------------------------- shared values are data, never code


class _Planted:
    """A pickle that, if ever unpickled, writes a file: what someone who can write to Redis would plant."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "the cache ran planted code"))


def _plant_and_read(region: Region, backend, key, marker: Path, planted: bytes) -> object:
    backend.set(region._backend_key(region._full_key(key)), planted)
    return region.get_or_load(key, lambda: {"recomputed": True})


def _hostile_values(marker: Path, backend_key: str) -> dict[str, bytes]:
    from whestboard.cache import SIGNED_MAGIC

    payload = pickle.dumps(_Planted(marker))
    return {
        "a bare pickle": payload,
        "a pickle behind the tag, with a made-up signature": SIGNED_MAGIC + bytes(32) + payload,
        "a pickle signed with another key": SIGNED_MAGIC + hmac.new(
            b"k" * 32, backend_key.encode() + b"\0" + payload, hashlib.sha256).digest() + payload,
    }


def _assert_refused(region: Region, backend, marker: Path) -> None:
    from whestboard.cache import verified

    for what, planted in _hostile_values(marker, region._backend_key(region._full_key("k"))).items():
        region.clear()
        assert _plant_and_read(region, backend, "k", marker, planted) == {"recomputed": True}, what
        assert not marker.exists(), f"{what} was unpickled"
        # the miss stored the recomputed value again, signed: the next reader verifies it
        stored = backend.get(region._backend_key(region._full_key("k")))
        assert verified(region._backend_key(region._full_key("k")), stored) is not None
    # a signed value moved under another key does not verify there either
    region.clear()
    moved = backend.get(region._backend_key(region._full_key("k")))
    backend.set(region._backend_key(region._full_key("other")), moved)
    loads = []
    region.get_or_load("other", lambda: loads.append(1) or "fresh")
    assert loads == [1]


@pytest.mark.services
def test_a_pickle_planted_in_redis_is_never_unpickled_and_reads_as_a_miss(tmp_path, monkeypatch):
    import redis

    from tests.prod_support import redis_server

    marker = tmp_path / "planted-code-ran"
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    with redis_server() as url:
        monkeypatch.setenv("WHESTBOARD_REDIS_URL", url)
        region = Region("test-planted-redis", shared=True)
        _assert_refused(region, redis.Redis.from_url(url), marker)


def test_a_pickle_planted_in_the_state_folder_cache_is_never_unpickled(tmp_path, monkeypatch):
    import diskcache

    from whestboard.cache import shared_backend

    marker = tmp_path / "planted-code-ran"
    monkeypatch.delenv("WHESTBOARD_REDIS_URL", raising=False)
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    region = Region("test-planted-folder", shared=True)
    _assert_refused(region, shared_backend(), marker)
    # diskcache's own pickled entry (not bytes: what its default Disk writes for an object) is refused too
    key = region._backend_key(region._full_key("k"))
    with diskcache.Cache(str(tmp_path / "state" / "cache")) as raw:
        raw.set(key, _Planted(marker))
    region.clear()
    assert region.get_or_load("k", lambda: "recomputed") == "recomputed"
    assert not marker.exists()
