"""An in-process cache of MLP weights, bounded in bytes.

A 1024 x 16 MLP is 64 MiB, so a count-bounded cache is either useless or a
memory leak. This one evicts least-recently-used weights once their total
exceeds ``WHESTBOARD_CACHE_BYTES`` (default 1 GiB), and loads each key once
even when several threads ask for it at the same moment.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np
from whestboard import config

DEFAULT_CACHE_BYTES = 1 << 30
V = TypeVar("V")


def _configured_limit() -> int:
    return config.weights_cache_bytes(DEFAULT_CACHE_BYTES)


class BoundedCache(Generic[V]):
    """LRU whose total ``size_of(value)`` stays under ``max_size``; each key loaded once.

    Concurrent requests for a key that is still loading wait for that one load
    instead of starting their own (a 1024 x 16 rebuild costs a second).
    """

    def __init__(self, max_size: int, size_of: Callable[[V], int] = lambda _value: 1) -> None:
        self.max_size = int(max_size)
        self._size_of = size_of
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get_or_load(self, key: Hashable, load: Callable[[], V]) -> V:
        """Return the cached value, loading it once under a per-key lock."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key]
            value = load()
            with self._lock:
                self._store(key, value)
                self._loading.pop(key, None)
            return value

    def _store(self, key: Hashable, value: V) -> None:
        size = self._size_of(value)
        if size > self.max_size:
            return  # too big to keep; the caller still gets it
        self._items[key] = value
        self._size += size
        while self._size > self.max_size and self._items:
            _, old = self._items.popitem(last=False)
            self._size -= self._size_of(old)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0


class ByteBoundedCache(BoundedCache[np.ndarray]):
    """Read-only numpy arrays bounded by their total ``nbytes`` (``WHESTBOARD_CACHE_BYTES``)."""

    def __init__(self, max_bytes: int | None = None) -> None:
        super().__init__(_configured_limit() if max_bytes is None else int(max_bytes),
                         size_of=lambda array: array.nbytes)

    @property
    def nbytes(self) -> int:
        return self.size

    def _store(self, key: Hashable, value: np.ndarray) -> None:
        value.setflags(write=False)  # shared between requests: nobody may modify it
        super()._store(key, value)


WEIGHTS_CACHE = ByteBoundedCache()
