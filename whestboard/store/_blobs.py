"""Bytes every machine must see, kept in the database: the one artifact store for files the app makes.

Uploaded estimators, playground truths and scores, computed baselines, kept datasets and the
shared secrets live here, not in the state folder, so a second machine (its own state folder, the
same ``WHESTBOARD_DATABASE_URL``) finds what the first one made, and the state folder is only a
per-machine cache that may be deleted at any time.

One row per blob (``blobs``: namespace, key, size, sha256, meta) and its bytes in chunks of
``CHUNK_BYTES`` (``blob_chunks``), so a large blob never has to pass through one bind parameter.
A blob is written in one transaction (readers see the old one or the new one, never a part) and
read back only when its size and sha256 match. Sizes are bounded: ``MAX_BLOB_BYTES`` per blob, and
each namespace is pruned by count or bytes by its owner. A namespace anyone on the internet adds to
(uploads) is bounded at the moment of storing instead (:func:`put_blob_within`): in one transaction,
serialized across processes and machines, room is made by dropping its oldest prunable blobs, and a blob
that would take the namespace past its bytes, or its owner past the owner's share, is refused. Sessions come from
:func:`whestboard.store._database.session`, so connections never cross a fork (``store.forksafe``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Float, Integer, LargeBinary, String, Text, delete, exc, func, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from whestboard import config
from whestboard.store import _atomic
from whestboard.store._database import Base, session

CHUNK_BYTES = 1 << 20
#: No artifact comes near this (an upload is capped at 50 MiB by whestbench); a larger one is refused.
MAX_BLOB_BYTES = 256 << 20
SECRETS = "secret"


class BlobTooLarge(ValueError):
    """A blob over ``MAX_BLOB_BYTES``: the message says how large it was."""


class Blob(Base):
    __tablename__ = "blobs"

    namespace: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    n_chunks: Mapped[int] = mapped_column(Integer)
    meta: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[float] = mapped_column(Float, index=True)
    #: Who added it, where a quota counts by owner (an upload's hashed client); None elsewhere.
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True, default=None)


class BlobChunk(Base):
    __tablename__ = "blob_chunks"

    namespace: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


def _where(model, namespace: str, key: str):
    return (model.namespace == namespace) & (model.key == key)


def put_blob(namespace: str, key: str, data: bytes, *, meta: dict[str, Any] | None = None,
             replace: bool = True, url: str | None = None) -> bool:
    """Store ``data`` under (namespace, key) in one transaction; False when ``replace`` is off and a
    blob is there already (or a racing writer stored it first). ``url``: another database than the
    configured one (what the leaderboard's store functions take)."""
    data = bytes(data)
    if len(data) > MAX_BLOB_BYTES:
        raise BlobTooLarge(f"{namespace}/{key} is {len(data) / 2**20:.1f} MiB, over the store's "
                           f"{MAX_BLOB_BYTES >> 20} MiB per artifact")
    chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    try:
        with session(url) as s:
            if s.get(Blob, (namespace, key)) is not None:
                if not replace:
                    return False
                s.execute(delete(BlobChunk).where(_where(BlobChunk, namespace, key)))
                s.execute(delete(Blob).where(_where(Blob, namespace, key)))
                s.flush()
            s.add(Blob(namespace=namespace, key=key, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                       n_chunks=len(chunks), meta=json.dumps(meta or {}), created_at=time.time()))
            s.add_all(BlobChunk(namespace=namespace, key=key, position=i, data=c) for i, c in enumerate(chunks))
        return True
    except exc.IntegrityError:  # another process stored the same key between our read and our insert
        return False


def get_blob(namespace: str, key: str, *, url: str | None = None) -> bytes | None:
    """The stored bytes, or None when there are none (or they no longer match their size and sha256)."""
    with session(url) as s:
        blob = s.get(Blob, (namespace, key))
        if blob is None:
            return None
        parts = s.scalars(select(BlobChunk.data).where(_where(BlobChunk, namespace, key))
                          .order_by(BlobChunk.position)).all()
    data = b"".join(bytes(p) for p in parts)
    if len(parts) != blob.n_chunks or len(data) != blob.size or hashlib.sha256(data).hexdigest() != blob.sha256:
        return None
    return data


def blob_exists(namespace: str, key: str) -> bool:
    with session() as s:
        return s.get(Blob, (namespace, key)) is not None


def blob_meta(namespace: str, key: str) -> dict[str, Any] | None:
    """What the writer said about the blob (without reading its bytes), or None when there is none."""
    with session() as s:
        blob = s.get(Blob, (namespace, key))
        return None if blob is None else {**json.loads(blob.meta or "{}"), "size": blob.size,
                                          "sha256": blob.sha256, "created_at": blob.created_at}


def blob_keys(namespace: str, *, url: str | None = None) -> list[str]:
    """Every key of a namespace, oldest first."""
    with session(url) as s:
        return list(s.scalars(select(Blob.key).where(Blob.namespace == namespace).order_by(Blob.created_at)))


#: Keys per ``IN (...)`` query: well under SQLite's 32,766 bound variables and PostgreSQL's 65,535.
_KEYS_PER_QUERY = 500


def stored_blob_keys(namespace: str, keys: Iterable[str], *, url: str | None = None) -> set[str]:
    """Which of ``keys`` the namespace holds: a lookup of those keys only, by primary key, so a caller
    waiting on a few thousand results never reads every key a busy namespace has ever stored."""
    wanted, found = sorted(set(keys)), set()
    with session(url) as s:
        for start in range(0, len(wanted), _KEYS_PER_QUERY):
            part = wanted[start:start + _KEYS_PER_QUERY]
            found.update(s.scalars(select(Blob.key).where(Blob.namespace == namespace, Blob.key.in_(part))))
    return found


def remove_blob(namespace: str, key: str, *, url: str | None = None) -> bool:
    with session(url) as s:
        s.execute(delete(BlobChunk).where(_where(BlobChunk, namespace, key)))
        return s.execute(delete(Blob).where(_where(Blob, namespace, key))).rowcount > 0


def prune_blobs(namespace: str, *, max_count: int | None = None, max_bytes: int | None = None,
                keep_newer_than_s: float = 0.0) -> int:
    """Delete a namespace's oldest blobs while it holds more than ``max_count`` or ``max_bytes``;
    blobs younger than ``keep_newer_than_s`` stay whatever the total. Returns how many went."""
    with session() as s:
        rows = s.execute(select(Blob.key, Blob.size, Blob.created_at).where(Blob.namespace == namespace)
                         .order_by(Blob.created_at)).all()
    count, total = len(rows), sum(size for _, size, _ in rows)
    removed = 0
    for key, size, created in rows:
        over = (max_count is not None and count > max_count) or (max_bytes is not None and total > max_bytes)
        if not over or created > time.time() - keep_newer_than_s:
            break
        removed += remove_blob(namespace, key)
        count, total = count - 1, total - size
    return removed


def blob_listing(namespace: str) -> list[dict[str, Any]]:
    """Every blob of a namespace without its bytes, oldest first: key, size, created_at and the writer's meta."""
    with session() as s:
        rows = s.execute(select(Blob.key, Blob.size, Blob.created_at, Blob.meta).where(Blob.namespace == namespace)
                         .order_by(Blob.created_at, Blob.key)).all()
    return [{**json.loads(meta or "{}"), "key": key, "size": int(size), "created_at": float(created)}
            for key, size, created, meta in rows]


def namespace_size(namespace: str) -> tuple[int, int]:
    """(blobs, bytes) held by a namespace."""
    with session() as s:
        n, total = s.execute(select(func.count(), func.coalesce(func.sum(Blob.size), 0))
                             .where(Blob.namespace == namespace)).one()
    return int(n), int(total)


# --------------------------------------------------------------------------- bounded at the moment of storing

#: The namespace of the rows :func:`locked` takes (one per lock name, no bytes): a bounded namespace's name for
#: :func:`put_blob_within`.
LOCKS = "lock"


@dataclass(frozen=True)
class Quota:
    """Bounds a namespace keeps at every moment: ``max_bytes`` in all; ``owner_max_bytes`` added by one
    owner within ``keep_s`` (None: no share). Blobs younger than ``keep_s`` are in use (a queued job may
    need them) and are never dropped to make room; older ones go, oldest first."""

    max_bytes: int
    keep_s: float
    owner: str | None = None
    owner_max_bytes: int | None = None


class QuotaExceeded(ValueError):
    """A blob :func:`put_blob_within` refused: ``what`` is ``"owner"`` or ``"total"``; ``used`` the bytes
    that count against the bound, ``limit`` the bound, ``retry_after_s`` when room frees up by itself."""

    def __init__(self, what: str, size: int, used: int, limit: int, retry_after_s: float) -> None:
        super().__init__(f"{what}: {size} bytes would take {used} bytes past {limit}")
        self.what, self.size, self.used, self.limit, self.retry_after_s = what, size, used, limit, retry_after_s


@contextmanager
def locked(name: str) -> Iterator[Session]:
    """A transaction that holds the lock ``name`` until it ends, on every process and machine sharing the
    database: what a check-then-write must run in when two requests at once may both pass the check (a
    namespace's quota, a client's job slots). The lock is a row of ``LOCKS``, taken by an UPDATE, so SQLite
    takes its write lock first (the reads after it see every committed row) and PostgreSQL a row lock other
    writers wait on."""
    put_blob(LOCKS, name, b"", replace=False)  # the lock row, once per name and database
    with session() as s:
        if s.execute(update(Blob).where(_where(Blob, LOCKS, name)).values(size=0)).rowcount == 0:
            raise LookupError(name)
        yield s


def put_blob_within(namespace: str, key: str, data: bytes, quota: Quota, *, meta: dict[str, Any] | None = None,
                    now: float | None = None) -> list[str]:
    """Store ``data`` under (namespace, key) only if the namespace stays within ``quota`` with it, dropping
    its oldest prunable blobs to make room, all in one transaction that no other writer of the namespace
    interleaves with (any machine: the lock is a row of the shared database). Returns the keys dropped.

    Raises :class:`QuotaExceeded` (nothing stored, nothing dropped) when the owner's share or the total
    cannot hold it, and stores nothing when the key is there already (the same bytes, by content hash)."""
    data = bytes(data)
    if len(data) > MAX_BLOB_BYTES:
        raise BlobTooLarge(f"{namespace}/{key} is {len(data) / 2**20:.1f} MiB, over the store's "
                           f"{MAX_BLOB_BYTES >> 20} MiB per artifact")
    size, now = len(data), time.time() if now is None else now
    cutoff = now - quota.keep_s
    with locked(namespace) as s:
        if s.get(Blob, (namespace, key)) is not None:
            return []
        in_namespace = Blob.namespace == namespace
        if quota.owner is not None and quota.owner_max_bytes is not None:
            mine = s.execute(select(func.coalesce(func.sum(Blob.size), 0), func.min(Blob.created_at))
                             .where(in_namespace, Blob.owner == quota.owner, Blob.created_at > cutoff)).one()
            if int(mine[0]) + size > quota.owner_max_bytes:
                raise QuotaExceeded("owner", size, int(mine[0]), quota.owner_max_bytes,
                                    max(0.0, float(mine[1] or now) + quota.keep_s - now))
        total = int(s.scalar(select(func.coalesce(func.sum(Blob.size), 0)).where(in_namespace)) or 0)
        dropped: list[tuple[str, int]] = []
        if total + size > quota.max_bytes:
            freed = 0
            for old_key, old_size in s.execute(select(Blob.key, Blob.size).where(in_namespace, Blob.created_at <= cutoff)
                                               .order_by(Blob.created_at)):
                if total - freed + size <= quota.max_bytes:
                    break
                dropped.append((old_key, int(old_size)))
                freed += int(old_size)
            if total - freed + size > quota.max_bytes:
                oldest_young = s.scalar(select(func.min(Blob.created_at)).where(in_namespace, Blob.created_at > cutoff))
                raise QuotaExceeded("total", size, total - freed, quota.max_bytes,
                                    max(0.0, float(oldest_young or now) + quota.keep_s - now))
        for old_key, _ in dropped:
            s.execute(delete(BlobChunk).where(_where(BlobChunk, namespace, old_key)))
            s.execute(delete(Blob).where(_where(Blob, namespace, old_key)))
        chunks = [data[i:i + CHUNK_BYTES] for i in range(0, size, CHUNK_BYTES)] or [b""]
        s.add(Blob(namespace=namespace, key=key, size=size, sha256=hashlib.sha256(data).hexdigest(),
                   n_chunks=len(chunks), meta=json.dumps(meta or {}), created_at=now, owner=quota.owner))
        s.add_all(BlobChunk(namespace=namespace, key=key, position=i, data=c) for i, c in enumerate(chunks))
    return [old_key for old_key, _ in dropped]


# --------------------------------------------------------------------------- arrays


def put_blob_arrays(namespace: str, key: str, *, url: str | None = None, **arrays: Any) -> bool:
    """Numpy arrays (and scalars) as one ``.npz`` blob: no pickles, read back by :func:`get_blob_arrays`."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(value) for name, value in arrays.items()})
    return put_blob(namespace, key, buffer.getvalue(), url=url)


def get_blob_arrays(namespace: str, key: str, *, url: str | None = None) -> dict[str, np.ndarray] | None:
    """The arrays of an ``.npz`` blob, or None when there is none or it cannot be read."""
    data = get_blob(namespace, key, url=url)
    if data is None:
        return None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


# --------------------------------------------------------------------------- local copies


def fetch_file(namespace: str, key: str, path: Path) -> bool:
    """Copy a blob to ``path`` (atomically) unless it is there already; False when the store has none."""
    path = Path(path)
    if path.is_file():
        return True
    data = get_blob(namespace, key)
    if data is None:
        return False
    _atomic.write_bytes(path, data)
    return True


def pack_files(files: dict[str, bytes]) -> bytes:
    """Files (relative name: bytes) as an uncompressed tar, names sorted: what :func:`fetch_blob_folder`
    unpacks. A caller that holds the bytes already packs them without writing a folder first."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            body = bytes(files[name])
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(body), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def pack_folder(folder: Path) -> bytes:
    """A folder's regular files as an uncompressed tar (names relative to ``folder``, sorted)."""
    folder = Path(folder)
    return pack_files({str(path.relative_to(folder)): path.read_bytes()
                       for path in folder.rglob("*") if path.is_file() and not path.is_symlink()})


def put_blob_folder(namespace: str, key: str, folder: Path, *, meta: dict[str, Any] | None = None,
                    replace: bool = True) -> bool:
    return put_blob(namespace, key, pack_folder(folder), meta=meta, replace=replace)


def fetch_blob_folder(namespace: str, key: str, target: Path) -> bool:
    """Unpack a stored folder to ``target`` unless it exists; staged beside it and renamed into place, so
    a reader never sees half a folder. False when the store has none."""
    target = Path(target)
    if target.is_dir():
        return True
    data = get_blob(namespace, key)
    if data is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name[:40]}-", dir=target.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(staging, filter="data")
        try:
            os.rename(staging, target)
        except OSError:  # a concurrent fetch put it there first
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


# --------------------------------------------------------------------------- shared secrets

_secrets: dict[tuple[str, str], bytes] = {}


def shared_secret(name: str, nbytes: int = 32) -> bytes:
    """A random key every process of every machine sharing the database agrees on (first writer wins)."""
    cache_key = (config.database_url(), name)
    if cache_key not in _secrets:
        value = get_blob(SECRETS, name)  # read first: a store whose disk is full still answers reads
        if value is None:
            put_blob(SECRETS, name, secrets.token_bytes(nbytes), replace=False)
            value = get_blob(SECRETS, name)
        if value is None:
            raise RuntimeError(f"the shared secret {name!r} could not be read back from the store")
        _secrets[cache_key] = value
    return _secrets[cache_key]
