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
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST_NAME = "whestboard-dataset.json"
FORMAT_NAME = "whestboard-compact"
FORMAT_VERSION = 1
MLP_DIR = "mlps"


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
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    os.chmod(tmp, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write((json.dumps(manifest, indent=1) + "\n").encode())
        os.link(tmp, manifest_path(directory))
        return True
    except FileExistsError:
        return False
    finally:
        Path(tmp).unlink(missing_ok=True)


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
    path = mlp_path(directory, index)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.chmod(tmp, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(
                fh,
                all_layer_means=np.asarray(all_layer_means, dtype=np.float32),
                avg_variance=np.float64(avg_variance),
                weights_sha256=np.array(weights_sha256),
                provenance=np.array(json.dumps(provenance, sort_keys=True)),
            )
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_mlp_record(directory: Path, index: int) -> dict[str, Any]:
    with np.load(mlp_path(directory, index), allow_pickle=False) as z:
        return {
            "all_layer_means": z["all_layer_means"],
            "avg_variance": float(z["avg_variance"]),
            "weights_sha256": str(z["weights_sha256"]),
            "provenance": json.loads(str(z["provenance"])),
        }


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


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.chmod(tmp, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
