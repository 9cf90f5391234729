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


def blas_environment(kernel_env: dict[str, str] | None = None) -> dict:
    """The BLAS a result was computed with: library, version, kernel (OpenBLAS coretype), threads.

    Two runs agree bit for bit only under the same library and kernel; the kernel variables
    (``OPENBLAS_CORETYPE``, ``OPENBLAS_L2_SIZE``) are recorded because they pin it.
    """
    from threadpoolctl import threadpool_info

    from whestboard.config import blas_kernel_env

    kernel_env = blas_kernel_env() if kernel_env is None else kernel_env
    libraries = [{"library": info.get("internal_api"), "version": info.get("version"),
                  "kernel": info.get("architecture"), "threads": info.get("num_threads"),
                  "threading_layer": info.get("threading_layer")}
                 for info in threadpool_info() if info.get("user_api") == "blas"]
    return {"blas": libraries, "kernel_env": dict(kernel_env)}


def blas_setup(environment: dict | None) -> tuple | None:
    """What must match for two runs to agree bit for bit: (library, version, kernel) of each BLAS, and the
    kernel variables; None when a report predates the record."""
    if not environment or "blas" not in environment:
        return None
    return (tuple((b.get("library"), b.get("version"), b.get("kernel")) for b in environment["blas"]),
            tuple(sorted((environment.get("kernel_env") or {}).items())))


def describe_blas(environment: dict | None) -> str:
    """One line for a report: ``openblas 0.3.31 (kernel Haswell, 1 thread)``."""
    if not environment or not environment.get("blas"):
        return "BLAS not recorded"
    parts = [f"{b['library']} {b['version']} (kernel {b['kernel']}, {b['threads']} thread"
             f"{'' if b['threads'] == 1 else 's'})" for b in environment["blas"]]
    kernel_env = environment.get("kernel_env") or {}
    return ", ".join(parts) + ("; " + " ".join(f"{k}={v}" for k, v in kernel_env.items()) if kernel_env else "")
