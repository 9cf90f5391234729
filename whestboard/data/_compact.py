"""Whestboard's compact dataset format: seeds and ground truth, no weights.

A schema-3.0 dataset stores every weight matrix (64 MiB per 1024 x 16 MLP).
Under seed protocol 3.0 those weights are a pure function of ``mlp_seed``, so a
compact dataset keeps only what cannot be rebuilt: the seed, the name, the
Monte Carlo ground truth and its provenance, plus a checksum of the weights so
a rebuilt MLP that differs (a changed numpy or whestbench) is refused rather
than silently scored against the wrong truth.

Layout::

    <dir>/whestboard-dataset.json   manifest: round, shape, seeds, names, versions
    <dir>/mlps/00000.npz            one file per baked MLP, written atomically

One file per MLP is what makes baking resumable: a killed bake leaves whole
files or none, and a re-run skips the files already there.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from whestboard.store import create_exclusive, write_with

MANIFEST_NAME = "whestboard-dataset.json"
FORMAT_NAME = "whestboard-compact"
FORMAT_VERSION = 1
MLP_DIR = "mlps"
RECORD_MEMBERS = ("all_layer_means", "avg_variance", "weights_sha256", "provenance")
#: What a member may hold beyond its array's own bytes (the .npy header); bounds what a damaged or
#: hostile archive can make a reader decompress.
MEMBER_HEADER_BYTES = 1 << 12
PROVENANCE_MAX_BYTES = 1 << 20


class RecordDamaged(ValueError):
    """One MLP's record cannot be read. ``path`` and ``reason`` say which file and why, for the pages,
    ``/healthz`` and the CLI; every other record of the dataset is unaffected."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = Path(path)
        self.reason = reason


def weights_checksum(weights: np.ndarray) -> str:
    """sha256 of the float32 weights in C order, shape (depth, width, width)."""
    arr = np.ascontiguousarray(weights, dtype=np.float32)
    return hashlib.sha256(arr.tobytes()).hexdigest()


def manifest_path(directory: Path) -> Path:
    return Path(directory) / MANIFEST_NAME


def mlp_path(directory: Path, index: int) -> Path:
    return Path(directory) / MLP_DIR / f"{index:05d}.npz"


def is_compact_dir(directory: Path) -> bool:
    return manifest_path(directory).is_file()


def create_manifest(directory: Path, manifest: dict[str, Any]) -> bool:
    """Write the manifest only if none exists; False when another process won the race."""
    directory = Path(directory)
    (directory / MLP_DIR).mkdir(parents=True, exist_ok=True)
    return create_exclusive(manifest_path(directory), (json.dumps(manifest, indent=1) + "\n").encode())


def read_manifest(directory: Path) -> dict[str, Any]:
    with open(manifest_path(directory), encoding="utf-8") as fh:
        return json.load(fh)


def write_mlp_record(
    directory: Path,
    index: int,
    *,
    all_layer_means: np.ndarray,
    avg_variance: float,
    weights_sha256: str,
    provenance: dict[str, Any],
) -> None:
    """Write one baked MLP; readers never see a half-written file."""
    write_with(mlp_path(directory, index), lambda fh: np.savez_compressed(
        fh,
        all_layer_means=np.asarray(all_layer_means, dtype=np.float32),
        avg_variance=np.float64(avg_variance),
        weights_sha256=np.array(weights_sha256),
        provenance=np.array(json.dumps(provenance, sort_keys=True)),
    ))


def read_mlp_record(directory: Path, index: int, *, depth: int | None = None,
                    width: int | None = None) -> dict[str, Any]:
    """One baked MLP's record, checked (shape ``(depth, width)`` when given, finite values).

    Raises ``RecordDamaged`` naming the file and the reason for anything short of
    a whole, well-formed record: a truncated or overwritten archive, a missing
    member, a wrong shape, non-finite numbers. A member larger than its expected
    array is refused before it is decompressed, so memory stays bounded.
    """
    path = mlp_path(directory, index)
    try:
        _check_is_archive(path)
        with np.load(path, allow_pickle=False) as archive:
            _check_member_sizes(path, archive, depth, width)
            record = {
                "all_layer_means": archive["all_layer_means"],
                "avg_variance": float(archive["avg_variance"]),
                "weights_sha256": str(archive["weights_sha256"]),
                "provenance": json.loads(str(archive["provenance"])),
            }
    except (RecordDamaged, MemoryError):
        raise
    except FileNotFoundError:
        raise RecordDamaged(path, "the file is missing") from None
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise RecordDamaged(path, f"the archive is truncated or corrupt ({describe_error(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - numpy's header parser alone raises SyntaxError, TokenError...
        raise RecordDamaged(path, f"cannot be read ({describe_error(exc)})") from None
    _check_record(path, record, depth, width)
    return record


ZIP_MAGIC = b"PK\x03\x04"


def _check_is_archive(path: Path) -> None:
    with open(path, "rb") as fh:
        head = fh.read(len(ZIP_MAGIC))
    if not head:
        raise RecordDamaged(path, "the file is empty (0 bytes)")
    if head != ZIP_MAGIC:
        raise RecordDamaged(path, f"not an .npz archive (it starts with {head!r})")


def describe_error(exc: BaseException) -> str:
    """``Type: message``, the reason part of every damaged-file message."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_member_sizes(path: Path, archive, depth: int | None, width: int | None) -> None:
    names = set(archive.files)
    missing = [m for m in RECORD_MEMBERS if m not in names]
    if missing:
        raise RecordDamaged(path, f"lacks {', '.join(missing)} (a record holds {', '.join(RECORD_MEMBERS)})")
    means_bytes = 4 * depth * width if depth and width else None
    limits = {"all_layer_means": means_bytes, "avg_variance": 8, "weights_sha256": 4 * 64,
              "provenance": PROVENANCE_MAX_BYTES}
    for member, limit in limits.items():
        if limit is None:
            continue
        size = archive.zip.getinfo(f"{member}.npy").file_size
        if size > limit + MEMBER_HEADER_BYTES:
            raise RecordDamaged(path, f"{member} declares {size} bytes, more than a record's ({limit})")


def _check_record(path: Path, record: dict[str, Any], depth: int | None, width: int | None) -> None:
    means = record["all_layer_means"]
    if means.ndim != 2 or (depth and width and means.shape != (depth, width)):
        raise RecordDamaged(path, f"all_layer_means has shape {tuple(means.shape)}, expected ({depth}, {width})")
    if not np.issubdtype(means.dtype, np.floating) or not np.isfinite(means).all():
        raise RecordDamaged(path, "all_layer_means holds non-finite or non-numeric values")
    if not np.isfinite(record["avg_variance"]) or record["avg_variance"] < 0:
        raise RecordDamaged(path, f"avg_variance is {record['avg_variance']}, not a finite variance")
    digest = record["weights_sha256"]
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise RecordDamaged(path, "weights_sha256 is not a sha256 hex digest")
    if not isinstance(record["provenance"], dict):
        raise RecordDamaged(path, "provenance is not a JSON object")


def records_fingerprint(directory: Path) -> tuple:
    """Name, size and modification time of every record file: changes when one is added, damaged or
    repaired, even in place (which leaves the folder's own modification time alone)."""
    folder = Path(directory) / MLP_DIR
    try:
        with os.scandir(folder) as entries:
            stats = [(e.name, e.stat()) for e in entries if e.name.endswith(".npz")]
    except OSError:
        return ()
    return tuple(sorted((name, st.st_size, st.st_mtime_ns) for name, st in stats))


def baked_indices(directory: Path) -> list[int]:
    """Indices whose record file is complete (temporary files are ignored)."""
    folder = Path(directory) / MLP_DIR
    if not folder.is_dir():
        return []
    out = []
    for p in folder.glob("*.npz"):
        if p.stem.isdigit():
            out.append(int(p.stem))
    return sorted(out)

