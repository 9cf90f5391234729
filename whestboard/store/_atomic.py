"""Files that readers never see half written: the one atomic-write helper.

Every file Whestboard writes for others to read (baked MLP records, band files,
baselines, the sweep's CSVs) is written to a temporary file in the same folder
and renamed over the target, so a killed writer leaves the old file or the new
one, never a torn one. ``create_exclusive`` is the variant for a file that must
be written once by whichever of several racing processes gets there first.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def _temporary_beside(path: Path, mode: int) -> tuple[int, str]:
    """A temporary file in ``path``'s folder (so a rename is atomic), hidden and readable as ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.chmod(tmp, mode)
    return fd, tmp


def write_with(path: Path, write: Callable[[IO[bytes]], None], *, mode: int = 0o644) -> None:
    """Call ``write`` on a temporary file beside ``path``, then rename it over ``path``."""
    fd, tmp = _temporary_beside(Path(path), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    write_with(path, lambda fh: fh.write(data))


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, payload: Any, *, indent: int | None = 1) -> None:
    write_text(path, json.dumps(payload, indent=indent, sort_keys=False) + "\n")


def create_exclusive(path: Path, data: bytes, *, mode: int = 0o644) -> bool:
    """Write ``path`` only if it does not exist yet; False when another process won the race."""
    fd, tmp = _temporary_beside(Path(path), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)
