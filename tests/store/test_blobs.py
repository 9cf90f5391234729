"""The artifact store against SQLite and a real PostgreSQL: chunks, atomic replacement, bounds, forks,
and the state folder as a cache that can go at any time."""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import pytest
from sqlalchemy import update

from tests.prod_support import REPO, postgres_server
from whestboard import config
from whestboard.store import _blobs, _database


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server() as url:
        yield url
        _database.reset_engines()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path, monkeypatch):
    """The configured store: a fresh SQLite file in this test's state folder, or the PostgreSQL cluster."""
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    if request.param == "postgresql":
        url = request.getfixturevalue("pg_url")
        monkeypatch.setenv("WHESTBOARD_DATABASE_URL", url)
    else:
        monkeypatch.delenv("WHESTBOARD_DATABASE_URL", raising=False)
    _database.reset_engines()
    yield request.param
    _database.reset_engines()


def namespace(tag: str) -> str:
    return f"test-{tag}-{os.getpid()}-{os.urandom(3).hex()}"


def test_a_large_blob_is_chunked_and_read_back_whole(store):
    ns = namespace("large")
    data = np.random.default_rng(1).bytes(_blobs.CHUNK_BYTES * 3 + 17)
    assert _blobs.put_blob(ns, "a", data, meta={"filename": "a.bin"})
    assert _blobs.get_blob(ns, "a") == data
    info = _blobs.blob_meta(ns, "a")
    assert info["size"] == len(data) and info["sha256"] == hashlib.sha256(data).hexdigest()
    assert info["filename"] == "a.bin"
    with _database.session() as s:
        assert s.query(_blobs.BlobChunk).filter_by(namespace=ns, key="a").count() == 4
    assert _blobs.get_blob(ns, "missing") is None and _blobs.blob_meta(ns, "missing") is None


def test_an_empty_blob_is_a_blob(store):
    ns = namespace("empty")
    assert _blobs.put_blob(ns, "e", b"") and _blobs.get_blob(ns, "e") == b""


def test_replace_swaps_the_whole_blob_and_no_replace_keeps_the_first(store):
    ns = namespace("replace")
    first, second = b"x" * (_blobs.CHUNK_BYTES + 5), b"short"
    assert _blobs.put_blob(ns, "k", first)
    assert not _blobs.put_blob(ns, "k", second, replace=False)
    assert _blobs.get_blob(ns, "k") == first
    assert _blobs.put_blob(ns, "k", second)
    assert _blobs.get_blob(ns, "k") == second
    with _database.session() as s:  # no chunk of the first one is left behind
        assert s.query(_blobs.BlobChunk).filter_by(namespace=ns, key="k").count() == 1


def test_a_damaged_chunk_is_never_served(store):
    ns = namespace("damaged")
    _blobs.put_blob(ns, "k", b"abc" * 1000)
    with _database.session() as s:
        s.execute(update(_blobs.BlobChunk).where(_blobs.BlobChunk.namespace == ns).values(data=b"abd" * 1000))
    assert _blobs.get_blob(ns, "k") is None


def test_a_blob_over_the_bound_is_refused_with_its_size(store, monkeypatch):
    monkeypatch.setattr(_blobs, "MAX_BLOB_BYTES", 1 << 20)
    with pytest.raises(_blobs.BlobTooLarge, match=r"2\.0 MiB, over the store's 1 MiB"):
        _blobs.put_blob(namespace("big"), "k", b"0" * (2 << 20))


def test_prune_drops_the_oldest_by_count_and_by_bytes(store):
    ns = namespace("prune")
    for i in range(5):
        _blobs.put_blob(ns, f"k{i}", bytes(100))
    assert _blobs.prune_blobs(ns, max_count=3) == 2
    assert _blobs.blob_keys(ns) == ["k2", "k3", "k4"]
    assert _blobs.prune_blobs(ns, max_bytes=150) == 2
    assert _blobs.blob_keys(ns) == ["k4"] and _blobs.namespace_size(ns) == (1, 100)
    assert _blobs.prune_blobs(ns, max_count=0, keep_newer_than_s=3600) == 0  # young ones stay


def test_stored_keys_are_looked_up_by_key_across_query_batches(store):
    """More keys than one ``IN`` query takes, some stored, some not, and a namespace beside with the same keys."""
    ns, other = namespace("lookup"), namespace("beside")
    per_query = _blobs._KEYS_PER_QUERY
    keys = [f"k{i:04d}" for i in range(2 * per_query + 7)]
    # Every query's batch holds stored and unstored keys, and so do both edges of each batch boundary:
    # what the batching could get wrong, with a stored blob every 50 keys (each one a transaction).
    stored = set(keys[::50]) | {keys[per_query - 1], keys[per_query], keys[2 * per_query - 1], keys[-1]}
    for key in stored:
        _blobs.put_blob(ns, key, b"x")
    _blobs.put_blob(other, keys[1], b"x")
    assert _blobs.stored_blob_keys(ns, keys + ["k0000"]) == stored
    assert _blobs.stored_blob_keys(ns, []) == set()
    assert _blobs.stored_blob_keys(other, keys) == {keys[1]}


def test_arrays_round_trip_without_pickles(store):
    ns = namespace("arrays")
    means = np.arange(12, dtype=np.float32).reshape(3, 4)
    _blobs.put_blob_arrays(ns, "t", means=means, n=np.int64(7))
    back = _blobs.get_blob_arrays(ns, "t")
    assert back["means"].dtype == np.float32 and back["means"].tobytes() == means.tobytes() and int(back["n"]) == 7
    _blobs.put_blob(ns, "t", b"not an npz")
    assert _blobs.get_blob_arrays(ns, "t") is None


def test_a_folder_is_unpacked_whole_into_a_cache_that_may_be_deleted(store, tmp_path):
    ns = namespace("folder")
    source = tmp_path / "made"
    (source / "files" / "sub").mkdir(parents=True)
    (source / "files" / "sub" / "helper.py").write_text("X = 1\n")
    (source / "upload.json").write_text("{}")
    _blobs.put_blob_folder(ns, "f", source)
    cache = tmp_path / "cache" / "f"
    assert _blobs.fetch_blob_folder(ns, "f", cache)
    assert (cache / "files" / "sub" / "helper.py").read_text() == "X = 1\n"
    shutil.rmtree(tmp_path / "cache")
    assert _blobs.fetch_blob_folder(ns, "f", cache) and (cache / "upload.json").is_file()
    assert not [p for p in cache.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
    assert not _blobs.fetch_blob_folder(ns, "absent", tmp_path / "cache" / "absent")
    assert not (tmp_path / "cache" / "absent").exists()


SECRET_SCRIPT = """
import sys
from whestboard.store import _blobs as blobs
sys.stdout.write(blobs.shared_secret('client-id').hex())
"""


def test_every_machine_derives_the_same_secret_from_the_shared_store(store, tmp_path, preloaded):
    """Two processes with their own state folders (two machines) and the same database agree on the
    client-id key; a fresh state folder on a machine changes nothing. Each process is forked from one
    that imported whestboard and never derived a secret (tests/preloaded.py)."""
    shared, out = config.database_url(), []
    for machine in ("one", "two", "one-again"):
        env = dict(os.environ, WHESTBOARD_STATE_DIR=str(tmp_path / machine), WHESTBOARD_DATABASE_URL=shared)
        machine_process = preloaded.start("python", SECRET_SCRIPT, env=env, cwd=REPO)
        secret, err = machine_process.communicate(timeout=120)
        assert machine_process.returncode == 0, err
        out.append(secret)
    assert len(out[0]) == 64 and out[0] == out[1] == out[2]
    assert _blobs.shared_secret("client-id").hex() == out[0]


def test_a_forked_child_stores_and_reads_without_touching_the_parents_connection(store):
    ns = namespace("fork")
    _blobs.put_blob(ns, "parent", b"p")  # the parent holds a pooled connection now
    pid = os.fork()
    if pid == 0:  # the child: its own connection, the parent's left alone
        code = 0
        try:
            _blobs.put_blob(ns, "child", b"c" * (_blobs.CHUNK_BYTES + 1))
            code = 0 if _blobs.get_blob(ns, "parent") == b"p" else 3
        except BaseException:  # noqa: BLE001 - reported through the exit status
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _blobs.get_blob(ns, "child") == b"c" * (_blobs.CHUNK_BYTES + 1) and _blobs.get_blob(ns, "parent") == b"p"


# --------------------------------------------------------------------------- bounded at the moment of storing


def _quota(max_bytes: int, owner: str | None = None, share: int | None = None) -> _blobs.Quota:
    return _blobs.Quota(max_bytes=max_bytes, keep_s=3600.0, owner=owner, owner_max_bytes=share)


def test_an_owner_past_its_share_is_refused_and_nothing_is_stored(store):
    ns = namespace("share")
    for i in range(3):
        assert _blobs.put_blob_within(ns, f"a{i}", bytes(100), _quota(10_000, "alice", 300), now=1000.0 + i) == []
    with pytest.raises(_blobs.QuotaExceeded) as refused:
        _blobs.put_blob_within(ns, "a3", bytes(1), _quota(10_000, "alice", 300), now=1010.0)
    assert (refused.value.what, refused.value.used, refused.value.limit) == ("owner", 300, 300)
    assert refused.value.retry_after_s == pytest.approx(1000.0 + 3600 - 1010.0)  # when a0 stops counting
    assert _blobs.put_blob_within(ns, "b0", bytes(100), _quota(10_000, "bob", 300), now=1010.0) == []
    # an hour on, alice's first upload no longer counts against her share
    assert _blobs.put_blob_within(ns, "a3", bytes(100), _quota(10_000, "alice", 300), now=4601.0) == []
    assert _blobs.namespace_size(ns) == (5, 500)


def test_the_total_drops_the_oldest_prunable_blobs_first_and_refuses_when_all_are_young(store):
    ns = namespace("total")
    for i in range(4):
        _blobs.put_blob_within(ns, f"k{i}", bytes(100), _quota(400), now=1000.0 + i)
    # an hour on: k0..k3 may go; making room for 250 bytes drops the three oldest, no more
    assert _blobs.put_blob_within(ns, "big", bytes(250), _quota(400), now=5000.0) == ["k0", "k1", "k2"]
    assert _blobs.blob_keys(ns) == ["k3", "big"] and _blobs.namespace_size(ns) == (2, 350)
    # now everything but k3 is young: 100 bytes more would need 'big' dropped, which is in use
    with pytest.raises(_blobs.QuotaExceeded) as refused:
        _blobs.put_blob_within(ns, "late", bytes(151), _quota(400), now=5001.0)
    assert refused.value.what == "total" and refused.value.used == 250 and refused.value.limit == 400
    assert refused.value.retry_after_s == pytest.approx(5000.0 + 3600 - 5001.0)
    assert _blobs.blob_keys(ns) == ["k3", "big"]  # refused: nothing dropped either
    assert _blobs.put_blob_within(ns, "big", bytes(250), _quota(400), now=5002.0) == []  # the same key: nothing added


def test_racing_writers_on_many_processes_never_take_the_total_past_its_bound(store):
    """Twelve forked processes store 100 bytes each at once under a bound of 450: four get in, and the
    namespace never holds more than 450 bytes (each checks and stores inside the namespace's lock)."""
    ns = namespace("race")
    _blobs.put_blob_within(ns, "first", bytes(50), _quota(450))
    children = []
    for i in range(12):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _blobs.put_blob_within(ns, f"k{i}", bytes(100), _quota(450))
            except _blobs.QuotaExceeded:
                code = 1
            except BaseException:  # noqa: BLE001 - reported through the exit status
                code = 2
            os._exit(code)
        children.append(pid)
    codes = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]
    assert sorted(codes) == [0] * 4 + [1] * 8
    assert _blobs.namespace_size(ns) == (5, 450)
