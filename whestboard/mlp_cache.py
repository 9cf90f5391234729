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

import numpy as np

DEFAULT_CACHE_BYTES = 1 << 30


def _configured_limit() -> int:
    raw = os.environ.get("WHESTBOARD_CACHE_BYTES")
    if not raw:
        return DEFAULT_CACHE_BYTES
    try:
        return max(0, int(float(raw)))
    except ValueError:
        raise ValueError(
            f"WHESTBOARD_CACHE_BYTES must be a number of bytes, got {raw!r}"
        ) from None


class ByteBoundedCache:
    """LRU of numpy arrays whose ``nbytes`` sum stays under ``max_bytes``."""

    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = _configured_limit() if max_bytes is None else int(max_bytes)
        self._items: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def get_or_load(self, key: Hashable, load: Callable[[], np.ndarray]) -> np.ndarray:
        """Return the cached array, loading it once under a per-key lock."""
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
            value.setflags(write=False)
            with self._lock:
                self._store(key, value)
                self._loading.pop(key, None)
            return value

    def _store(self, key: Hashable, value: np.ndarray) -> None:
        if value.nbytes > self.max_bytes:
            return  # too big to keep; the caller still gets it
        self._items[key] = value
        self._bytes += value.nbytes
        while self._bytes > self.max_bytes and self._items:
            _, old = self._items.popitem(last=False)
            self._bytes -= old.nbytes

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


WEIGHTS_CACHE = ByteBoundedCache()
