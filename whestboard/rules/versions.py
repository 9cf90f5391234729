"""Library versions a result was computed under.

flopscope releases move FLOP prices, so every recorded number carries the
versions that produced it.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import version


@lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    return {
        "whestbench_version": version("whestbench"),
        "flopscope_version": version("flopscope"),
        "numpy_version": version("numpy"),
    }
