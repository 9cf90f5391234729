"""The MLP weights' region of the cache service, bounded in bytes.

A 1024 x 16 MLP is 64 MiB, so a count-bounded cache is either useless or a
memory leak. This region evicts least-recently-used weights once their total
exceeds ``WHESTBOARD_CACHE_BYTES`` (default 1 GiB, read at every store), and
loads each key once even when several threads ask for it at the same moment.
"""

from __future__ import annotations

import numpy as np

from whestboard.cache import Region


def _read_only(array: np.ndarray) -> None:
    array.setflags(write=False)  # shared between requests: nobody may modify it


WEIGHTS_CACHE: Region[np.ndarray] = Region("mlp-weights", share=1.0, size_of=lambda array: int(array.nbytes),
                                           on_store=_read_only)
