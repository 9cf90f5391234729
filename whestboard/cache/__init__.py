"""The one cache service of Whestboard: bounded, sized by config when called, local or shared.

Owns: every cache of computed data, in the core and in the pages. Imports only ``whestboard.config``,
``whestboard.logs`` and the store's shared secrets (it sits just above them in the layers), so any
layer above may use it.

Contract:

- A :class:`Region` is a named, process-local LRU bounded by entries (``max_entries``, a property of
  what it holds) and by bytes: ``share`` of ``WHESTBOARD_CACHE_BYTES``, read from
  :func:`whestboard.config.cache_bytes` at every store, so a test or a deployment that changes the
  setting changes the bound without a restart. ``size_of(value)`` says what one value weighs.
  Each key is loaded once even when several threads ask for it at the same moment.
- ``shared=True`` adds the configured backend as a second level: Redis when ``WHESTBOARD_REDIS_URL``
  is set (every machine, worker and restart reuse a value), otherwise a diskcache folder in the state
  folder (``<state>/cache``: every worker of this machine, and its restarts). Entries expire after
  ``timeout`` seconds, and the folder is bounded by ``WHESTBOARD_CACHE_BYTES``.
- A shared value is data the app vouches for, never code from whoever can write the backend: it is
  pickled and signed (HMAC-SHA256 under the store's shared secret ``cache-signing``, which lives in the
  database, never in Redis, over the entry's key and bytes). A value whose signature does not verify,
  or that is not signed at all, is never unpickled: it is a miss, recomputed and stored again signed.
  The folder backend hands back raw bytes only (diskcache's own pickled entries are refused).
- ``revision`` (a callable) is read at every call and is part of every key: a caller whose inputs change
  under the same arguments (a file rewritten, a run recorded) bumps it and old values are never served.
- A shared key also carries the code's revision (:func:`code_revision`, a digest of the app's Python
  source): values a process of another release stored (a figure drawn by older code, still within its
  24 hours) are never served by this one, while every machine and worker of one release share them.
- :func:`memoize` wraps a function in a shared region keyed by its arguments: the pages' decorator,
  ``@memoize("compare-verdict", timeout=24 * 3600)``.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
import os
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from whestboard import config, logs

V = TypeVar("V")
KEY_PREFIX = "whestboard-cache:"
DEFAULT_TIMEOUT = 24 * 3600



class Region(Generic[V]):
    """A named LRU bounded by entries and by ``share`` of the configured bytes; see the module's contract."""

    def __init__(self, name: str, *, max_entries: int | None = None, share: float = 1.0,
                 size_of: Callable[[V], int] = lambda _value: 0, shared: bool = False,
                 timeout: int = DEFAULT_TIMEOUT, revision: Callable[[], Hashable] | None = None,
                 on_store: Callable[[V], None] | None = None) -> None:
        self.name = name
        self.max_entries = max_entries
        self.share = float(share)
        self.shared = shared
        self.timeout = int(timeout)
        self._size_of = size_of
        self._revision = revision
        self._on_store = on_store
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    # ----------------------------------------------------------------- bounds

    @property
    def max_bytes(self) -> int:
        """This region's byte bound, read from the configuration now."""
        return int(self.share * config.cache_bytes())

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return self._full_key(key) in self._items

    # ----------------------------------------------------------------- reading and storing

    def _full_key(self, key: Hashable) -> Hashable:
        return key if self._revision is None else (self._revision(), key)

    def get_or_load(self, key: Hashable, load: Callable[[], V]) -> V:
        """The cached value, else the shared backend's, else ``load()`` once under a per-key lock."""
        full = self._full_key(key)
        found = self._local(full)
        if found is not _MISSING:
            return found
        with self._lock:
            key_lock = self._loading.setdefault(full, threading.Lock())
        with key_lock:
            found = self._local(full)
            if found is not _MISSING:
                return found
            try:
                value = self._from_backend(full)
                if value is _MISSING:
                    value = load()
                    self._to_backend(full, value)
                with self._lock:
                    self._store(full, value)
            finally:
                with self._lock:
                    self._loading.pop(full, None)
            return value

    def get(self, key: Hashable, default: Any = None) -> V | Any:
        """The value under ``key`` here or in the shared backend, else ``default``."""
        full = self._full_key(key)
        found = self._local(full)
        if found is _MISSING:
            found = self._from_backend(full)
            if found is not _MISSING:
                with self._lock:
                    self._store(full, found)
        return default if found is _MISSING else found

    def set(self, key: Hashable, value: V) -> None:
        full = self._full_key(key)
        self._to_backend(full, value)
        with self._lock:
            self._store(full, value)

    def warm(self, key: Hashable, load: Callable[[], V]) -> None:
        """Start ``load`` on this process's one warming thread unless the value is here already.

        For a value a page will want soon (the weights behind a drill-down): the view returns at once
        and no view starts a thread of its own.
        """
        if self._local(self._full_key(key)) is _MISSING:
            _warmer().submit(self.get_or_load, key, load)

    def clear(self) -> None:
        """Forget this process's values (the shared backend's expire on their own or by revision)."""
        with self._lock:
            self._items.clear()
            self._size = 0

    def _local(self, full: Hashable) -> V | object:
        with self._lock:
            if full in self._items:
                self._items.move_to_end(full)
                return self._items[full][0]
        return _MISSING

    def _store(self, full: Hashable, value: V) -> None:
        size = int(self._size_of(value))
        limit = self.max_bytes
        if size > limit or self.max_entries == 0:
            return  # too big to keep; the caller still gets it
        if self._on_store is not None:
            self._on_store(value)
        if full in self._items:
            self._size -= self._items.pop(full)[1]
        self._items[full] = (value, size)
        self._size += size
        while self._items and (self._size > limit or
                               (self.max_entries is not None and len(self._items) > self.max_entries)):
            _, (_, old_size) = self._items.popitem(last=False)
            self._size -= old_size

    # ----------------------------------------------------------------- the shared backend

    def _backend_key(self, full: Hashable) -> str:
        digest = hashlib.sha256(repr((code_revision(), full)).encode()).hexdigest()
        return f"{KEY_PREFIX}{self.name}:{digest}"

    def _from_backend(self, full: Hashable) -> V | object:
        client = shared_backend() if self.shared else None
        if client is None:
            return _MISSING
        key = self._backend_key(full)
        try:
            raw = client.get(key)
            payload = None if raw is None else verified(key, raw)
        except Exception:  # noqa: BLE001 - a cache that cannot answer is a miss, never a failed page
            return _MISSING
        if payload is None:
            if raw is not None:
                logs.event("cache.refused", level=logging.WARNING, region=self.name, bytes=len(raw),
                           reason="not signed by this deployment: not unpickled, read as a miss")
            return _MISSING
        try:
            return pickle.loads(payload)
        except Exception:  # noqa: BLE001 - signed by us, yet unreadable here (another version of a class)
            return _MISSING

    def _to_backend(self, full: Hashable, value: V) -> None:
        client = shared_backend() if self.shared else None
        if client is None:
            return
        key = self._backend_key(full)
        try:
            client.set(key, signed(key, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)),
                       ex=self.timeout or None)
        except Exception:  # noqa: BLE001 - the value is still returned and kept in this process
            pass


#: The shared secret (``whestboard.store``, in the database every machine shares) that signs shared values.
SIGNING_SECRET = "cache-signing"
#: What a signed value starts with: the format's name, then the 32-byte HMAC-SHA256, then the pickle.
SIGNED_MAGIC = b"wbcache-hmac1:"
_DIGEST_BYTES = 32


#: The app's source folders (beside ``whestboard/``) whose code draws or computes what the cache holds.
_SOURCE_FOLDERS = ("whestboard", "components", "pages", "server")


@functools.cache
def code_revision() -> str:
    """A digest of the app's Python source, read once per process: the release a shared value was made by.

    Every machine running one checkout computes the same digest; a deployment of changed code gets new keys,
    so a figure an older release drew is not shown by the new one (old entries expire on their own)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout
    digest = hashlib.sha256()
    for folder in _SOURCE_FOLDERS:
        for directory, _subdirs, files in sorted(os.walk(os.path.join(root, folder))):
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(directory, name)
                digest.update(os.path.relpath(path, root).encode())
                with open(path, "rb") as source:
                    digest.update(hashlib.sha256(source.read()).digest())
    return digest.hexdigest()[:16]


def _signing_key() -> bytes:
    from whestboard.store import shared_secret

    return shared_secret(SIGNING_SECRET)


def _mac(key: str, payload: bytes) -> bytes:
    return hmac.new(_signing_key(), key.encode() + b"\0" + payload, hashlib.sha256).digest()


def signed(key: str, payload: bytes) -> bytes:
    """``payload`` as the backend keeps it under ``key``: tagged and signed, so only this deployment's
    processes (which can read the database) can make a value a reader will unpickle."""
    return SIGNED_MAGIC + _mac(key, payload) + payload


def verified(key: str, raw: bytes) -> bytes | None:
    """The payload of a value signed for ``key`` by this deployment, else None (never unpickled)."""
    raw = bytes(raw)
    head = len(SIGNED_MAGIC) + _DIGEST_BYTES
    if len(raw) < head or not raw.startswith(SIGNED_MAGIC):
        return None
    digest, payload = raw[len(SIGNED_MAGIC):head], raw[head:]
    return payload if hmac.compare_digest(digest, _mac(key, payload)) else None


_MISSING = object()
_clients_lock = threading.Lock()
_warming: list = [None, 0]  # (executor, pid): one warming thread per process, remade after a fork


def _warmer():
    from concurrent.futures import ThreadPoolExecutor

    with _clients_lock:
        if _warming[1] != os.getpid():
            _warming[:] = [ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-warm"), os.getpid()]
        return _warming[0]

_client: list = [None, None]  # ((place, pid), client): one per process, remade when the place changes


class _FolderBackend:
    """The state folder's diskcache, spoken to as the Redis client is (``get``, ``set(..., ex=)``)."""

    def __init__(self, folder) -> None:
        import diskcache

        self._cache = diskcache.Cache(str(folder), size_limit=config.cache_bytes(), eviction_policy="least-recently-used",
                                      disk=_bytes_only_disk())

    def get(self, key: str):
        return self._cache.get(key)

    def set(self, key: str, value: bytes, ex: int | None = None) -> None:
        self._cache.set(key, value, expire=ex)

    def close(self) -> None:
        self._cache.close()


def _bytes_only_disk():
    import diskcache

    class BytesOnlyDisk(diskcache.Disk):
        """diskcache's storage, reading back bytes only: an entry it would unpickle (one this service
        never writes) raises instead, which the region reads as a miss."""

        def fetch(self, mode, filename, value, read):
            if mode not in (diskcache.core.MODE_RAW, diskcache.core.MODE_BINARY):
                raise ValueError(f"a cache entry stored in diskcache mode {mode}, not as bytes: refused")
            return super().fetch(mode, filename, value, read)

    return BytesOnlyDisk


def shared_backend():
    """Redis when ``WHESTBOARD_REDIS_URL`` is set, else the state folder's diskcache (both read now).

    One client per process and place: remade after a fork and when the setting changes.
    """
    url = config.redis_url()
    place = (url or str(config.state_dir() / "cache"), os.getpid())
    with _clients_lock:
        if _client[0] != place:
            if isinstance(_client[1], _FolderBackend):
                # Closed before this process opens its own: SQLite keeps a file's locks in process memory,
                # which a fork copies, and a connection opened beside an inherited one takes no lock of its
                # own, so another process may checkpoint and delete the log this one still writes to.
                _client[1].close()
            if url:
                import redis

                client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            else:
                client = _FolderBackend(place[0])
            _client[:] = [place, client]
        return _client[1]


def memoize(name: str, *, timeout: int = DEFAULT_TIMEOUT, max_entries: int = 512, shared: bool = True,
            revision: Callable[[], Hashable] | None = None, share: float = 1.0,
            size_of: Callable[[Any], int] = lambda _value: 0) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """Decorator: cache ``fn(*args, **kwargs)`` in a region named ``name``, keyed by its arguments.

    ``shared=False`` keeps values in this process only (for values that do not pickle cheaply: figures).

    Arguments must have a stable ``repr`` (strings, numbers, tuples): the key of the shared backend is
    its hash. ``wrapped.cache`` is the region (``wrapped.cache.clear()`` forgets this process's values).
    """
    def decorate(fn: Callable[..., V]) -> Callable[..., V]:
        region: Region[V] = Region(name, max_entries=max_entries, shared=shared, timeout=timeout,
                                   revision=revision, share=share, size_of=size_of)
        qualified = f"{fn.__module__}.{fn.__qualname__}"

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            key = (qualified, args, tuple(sorted(kwargs.items())))
            return region.get_or_load(key, lambda: fn(*args, **kwargs))

        wrapped.cache = region  # type: ignore[attr-defined]
        return wrapped

    return decorate

__all__ = [
    "code_revision",
    "KEY_PREFIX",
    "memoize",
    "Region",
    "shared_backend",
    "SIGNED_MAGIC",
]
