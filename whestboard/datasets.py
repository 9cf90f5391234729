"""Open WhestBench datasets without the Hugging Face cache.

Two formats, one interface (``Dataset``):

* **schema 3.0** as published (``metadata.json`` + ``data/<split>-*.parquet``),
  read straight from the parquet files with pyarrow, one row group at a time.
  Weights go from Arrow buffers to numpy without passing through Python lists,
  which is what makes ``whestbench.mlp_at`` take seconds at 1024 x 16.
* **compact** (``whestboard.compact``): seeds and ground truth only; weights are
  rebuilt from the seed and checked against a stored checksum.

Indices are positions in the dataset (0 .. n_mlps-1), as ``mlp_index`` is in
whestbench's reports.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whestboard import compact
from whestboard.mlp_cache import WEIGHTS_CACHE
from whestboard.rounds import Round, get_round, round_for_shape

#: A neuron whose ground-truth mean is at most this never fired in the reference run.
DEAD_MEAN_THRESHOLD = 1e-6
SUPPORTED_SEED_PROTOCOLS = ("2.0", "3.0", "4.0")
REQUIRED_COLUMNS = ("mlp_id", "mlp_name", "mlp_seed", "weights", "all_layer_means", "avg_variance")


class DatasetError(ValueError):
    """A directory that is not a readable WhestBench dataset; says what is wrong."""


class MLPNotFound(KeyError):
    """An MLP index outside the dataset."""


class WeightsMismatch(DatasetError):
    """Rebuilt weights differ from the checksum recorded at bake time."""


@dataclass(frozen=True)
class DatasetInfo:
    """Everything about a dataset that is not per-MLP."""

    key: str
    path: Path
    format: str  # "schema-3.0" or "compact"
    round_tag: str | None
    width: int
    depth: int
    n_mlps: int
    n_samples: int
    seed_protocol: str
    split: str
    versions: dict[str, str] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    declared_n_mlps: int | None = None

    @property
    def round(self) -> Round | None:
        return get_round(self.round_tag) if self.round_tag else None

    @property
    def shape_label(self) -> str:
        return f"{self.width} x {self.depth}"

    @property
    def complete(self) -> bool:
        return self.declared_n_mlps in (None, self.n_mlps)


class Dataset:
    """Common behaviour: summaries, MLP objects and noise floors."""

    info: DatasetInfo

    # -- implemented per format ------------------------------------------------
    def _read_truth_table(self) -> pd.DataFrame:  # pragma: no cover - abstract
        raise NotImplementedError

    def _load_weights(self, index: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def estimator_seed(self, index: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------
    @property
    def indices(self) -> list[int]:
        return list(range(self.info.n_mlps))

    def _check_index(self, index: int) -> int:
        index = int(index)
        if index not in self._index_set:
            raise MLPNotFound(
                f"MLP {index} is not in dataset {self.info.key!r} "
                f"(it holds {self.info.n_mlps} MLPs, indices 0..{self.info.n_mlps - 1})"
            )
        return index

    @cached_property
    def _index_set(self) -> set[int]:
        return set(self.indices)

    @cached_property
    def _truth(self) -> pd.DataFrame:
        return self._read_truth_table()

    def summary(self) -> pd.DataFrame:
        """One row per MLP, computed from the ground truth only (weights untouched)."""
        t = self._truth
        means = np.stack(t["all_layer_means"].to_numpy()) if len(t) else np.zeros((0, 1, 1))
        final = means[:, -1, :]
        out = pd.DataFrame(
            {
                "index": t["index"].to_numpy(),
                "mlp_id": t["mlp_id"].to_numpy(),
                "mlp_name": t["mlp_name"].to_numpy(),
                "mlp_seed": t["mlp_seed"].to_numpy(),
                "avg_variance": t["avg_variance"].to_numpy(dtype=np.float64),
                "final_mean_avg": final.mean(axis=1),
                "final_mean_median": np.median(final, axis=1),
                "final_mean_max": final.max(axis=1),
                "final_dead_fraction": (final <= DEAD_MEAN_THRESHOLD).mean(axis=1),
                "dead_fraction": (means <= DEAD_MEAN_THRESHOLD).mean(axis=(1, 2)),
            }
        )
        out["noise_floor"] = out["avg_variance"] / self.info.n_samples
        return out

    def truth(self, index: int) -> tuple[np.ndarray, float]:
        """``(all_layer_means float32 (depth, width), avg_variance)`` for one MLP."""
        index = self._check_index(index)
        row = self._truth.iloc[self.indices.index(index)]
        return np.asarray(row["all_layer_means"], dtype=np.float32), float(row["avg_variance"])

    def mlp_name(self, index: int) -> str:
        index = self._check_index(index)
        return str(self._truth.iloc[self.indices.index(index)]["mlp_name"])

    def weights(self, index: int) -> np.ndarray:
        """Read-only float32 array (depth, width, width), cached across calls."""
        index = self._check_index(index)
        return WEIGHTS_CACHE.get_or_load((str(self.info.path), index), lambda: self._load_weights(index))

    def mlp(self, index: int):
        """A ``whestbench.MLP`` with the seed and name whestbench would give it."""
        import flopscope.numpy as fnp
        from whestbench import MLP

        w = self.weights(index)
        mlp = MLP(
            width=self.info.width,
            depth=self.info.depth,
            weights=[fnp.asarray(layer) for layer in w],
            seed=self.estimator_seed(index),
            name=self.mlp_name(index),
        )
        mlp.validate()
        return mlp

    @cached_property
    def avg_variances(self) -> dict[int, float]:
        """avg_variance of every MLP by index (read-only: shared by every caller)."""
        t = self._truth
        return dict(zip(t["index"].astype(int).tolist(), t["avg_variance"].astype(float).tolist(), strict=True))

    @cached_property
    def mean_avg_variance(self) -> float:
        return float(self._truth["avg_variance"].mean()) if len(self._truth) else float("nan")

    @property
    def noise_floor(self) -> float:
        """Expected MSE the reference's own sampling noise adds: mean sigma^2 / N_ref."""
        return self.mean_avg_variance / self.info.n_samples

    def mc_at_bm(self) -> float | None:
        rnd = self.info.round
        if rnd is None or not np.isfinite(self.mean_avg_variance) or self.mean_avg_variance <= 0:
            return None
        return rnd.mc_at_bm(self.mean_avg_variance)


# ---------------------------------------------------------------------------
# schema 3.0 (official parquet)
# ---------------------------------------------------------------------------


class ParquetDataset(Dataset):
    """An official schema-3.0 directory, read with pyarrow one row group at a time."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        import pyarrow.parquet as pq

        self.path = Path(path)
        meta = _read_json(self.path / "metadata.json")
        _validate_official_metadata(self.path, meta)
        split = str(meta.get("split") or "")
        files = sorted((self.path / "data").glob(f"{split}-*.parquet")) if split else []
        if not files:
            files = sorted((self.path / "data").glob("*.parquet"))
        if not files:
            raise DatasetError(f"{self.path}: no parquet files under data/ (expected data/{split}-NNNNN-of-MMMMM.parquet)")
        self._files = [pq.ParquetFile(f) for f in files]
        self._check_columns()
        # (file number, row group, first row) for every row group, in dataset order.
        self._groups: list[tuple[int, int, int, int]] = []
        start = 0
        for fi, pf in enumerate(self._files):
            for rg in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(rg).num_rows
                self._groups.append((fi, rg, start, n))
                start += n
        width, depth = int(meta["width"]), int(meta["depth"])
        rnd = round_for_shape(width, depth)
        self._protocol = str(meta["seed_protocol"]["version"])
        self._seed_proto_meta = meta["seed_protocol"]
        self._lock = threading.Lock()
        self.info = DatasetInfo(
            key=key or self.path.name,
            path=self.path,
            format="schema-3.0",
            round_tag=rnd.tag if rnd else None,
            width=width,
            depth=depth,
            n_mlps=start,
            n_samples=int(meta["n_samples"]),
            seed_protocol=self._protocol,
            split=split,
            versions={k: str(meta[k]) for k in ("whestbench_version", "flopscope_version") if k in meta},
            provenance={k: meta[k] for k in ("created_at_utc", "hardware", "backend") if k in meta},
            declared_n_mlps=int(meta.get("n_mlps", start)),
        )

    def _check_columns(self) -> None:
        names = set(self._files[0].schema_arrow.names)
        missing = [c for c in REQUIRED_COLUMNS if c not in names]
        if missing:
            raise DatasetError(
                f"{self.path}: parquet lacks column(s) {', '.join(missing)}; "
                "is this a WhestBench schema-3.0 dataset?"
            )

    def _locate(self, index: int) -> tuple[int, int, int]:
        for fi, rg, start, n in self._groups:
            if start <= index < start + n:
                return fi, rg, index - start
        raise MLPNotFound(index)

    def _read_truth_table(self) -> pd.DataFrame:
        import pyarrow as pa

        cols = ["mlp_id", "mlp_name", "mlp_seed", "avg_variance", "all_layer_means"]
        tables = [pf.read(columns=cols) for pf in self._files]
        table = pa.concat_tables(tables)
        d, w = self.info.depth, self.info.width
        flat = _flatten_to_numpy(table.column("all_layer_means"))
        means = flat.reshape(len(table), d, w)
        frame = pd.DataFrame(
            {
                "index": np.arange(len(table)),
                "mlp_id": table.column("mlp_id").to_numpy(),
                "mlp_name": table.column("mlp_name").to_pylist(),
                "mlp_seed": table.column("mlp_seed").to_numpy(),
                "avg_variance": table.column("avg_variance").to_numpy(),
                "all_layer_means": list(means.copy()),
            }
        )
        del table, tables, flat, means
        _release_arrow_memory()
        return frame

    def _load_weights(self, index: int) -> np.ndarray:
        fi, rg, row = self._locate(index)
        with self._lock:  # a ParquetFile is not safe to read from two threads
            table = self._files[fi].read_row_group(rg, columns=["weights"])
        column = table.column("weights").slice(row, 1)
        d, w = self.info.depth, self.info.width
        flat = _flatten_to_numpy(column)
        if flat.size != d * w * w:
            raise DatasetError(f"{self.path}: MLP {index} has {flat.size} weights, expected {d * w * w}")
        weights = np.array(flat.reshape(d, w, w), dtype=np.float32, copy=True)
        del table, column, flat
        _release_arrow_memory()
        return weights

    def estimator_seed(self, index: int) -> int:
        from whestbench.seeds import derive_estimator_seed, derive_estimator_seed_v4, resolve_salt

        raw = int(self._truth.iloc[self._check_index(index)]["mlp_seed"])
        if self._protocol == "3.0":
            return derive_estimator_seed(raw)
        if self._protocol == "4.0":
            return derive_estimator_seed_v4(raw, salt=resolve_salt(self._seed_proto_meta))
        return raw


def _release_arrow_memory() -> None:
    """Hand the row group's freed buffers back to the OS.

    Arrow's allocator keeps freed pages for reuse; after reading a 1024 x 16 row
    group that is ~400 MB held by a process that only needs the 64 MiB it copied out.
    """
    import gc

    import pyarrow as pa

    gc.collect()  # Arrow buffers still referenced from cycles are freed first
    pa.default_memory_pool().release_unused()


def _flatten_to_numpy(column) -> np.ndarray:
    """Leaf values of a (chunked) nested list column as one float32 array, no Python lists."""
    import pyarrow as pa

    parts = []
    for chunk in column.chunks:
        arr = chunk.storage if isinstance(chunk, pa.ExtensionArray) else chunk
        while pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type) or pa.types.is_fixed_size_list(arr.type):
            arr = arr.flatten()
        parts.append(arr.to_numpy(zero_copy_only=False))
    if not parts:
        return np.zeros(0, dtype=np.float32)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _validate_official_metadata(path: Path, meta: dict) -> None:
    schema = str(meta.get("schema_version", ""))
    if schema != "3.0":
        raise DatasetError(
            f"{path}: metadata.json says schema_version {schema or 'missing'}; "
            "Whestboard reads schema 3.0 (whestbench 0.16). Re-download the dataset."
        )
    for key in ("width", "depth", "n_samples", "seed_protocol"):
        if key not in meta:
            raise DatasetError(f"{path}: metadata.json lacks {key!r}")
    version = str((meta.get("seed_protocol") or {}).get("version", ""))
    if version not in SUPPORTED_SEED_PROTOCOLS:
        raise DatasetError(f"{path}: unsupported seed protocol {version!r}")


# ---------------------------------------------------------------------------
# compact (seeds + truth)
# ---------------------------------------------------------------------------


class CompactDataset(Dataset):
    """A Whestboard compact directory: weights rebuilt from seeds and verified."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        self.path = Path(path)
        try:
            meta = compact.read_manifest(self.path)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{self.path}: {compact.MANIFEST_NAME} is not valid JSON ({exc})") from None
        if meta.get("format") != compact.FORMAT_NAME:
            raise DatasetError(f"{self.path}: {compact.MANIFEST_NAME} is not a Whestboard compact manifest")
        if int(meta.get("format_version", 0)) > compact.FORMAT_VERSION:
            raise DatasetError(f"{self.path}: written by a newer Whestboard (format {meta['format_version']})")
        if str(meta.get("seed_protocol", {}).get("version")) != "3.0":
            raise DatasetError(f"{self.path}: compact datasets need seed protocol 3.0")
        self._meta = meta
        self._baked = compact.baked_indices(self.path)
        width, depth = int(meta["width"]), int(meta["depth"])
        rnd = get_round(meta["round"]) if meta.get("round") else round_for_shape(width, depth)
        self.info = DatasetInfo(
            key=key or self.path.name,
            path=self.path,
            format="compact",
            round_tag=rnd.tag if rnd else None,
            width=width,
            depth=depth,
            n_mlps=len(self._baked),
            n_samples=int(meta["n_samples"]),
            seed_protocol="3.0",
            split="embedded",
            versions={k: str(meta[k]) for k in ("whestbench_version", "flopscope_version", "numpy_version") if k in meta},
            provenance={k: meta[k] for k in ("created_at_utc", "engine") if k in meta},
            declared_n_mlps=int(meta["n_mlps"]),
        )
        if not self._baked:
            raise DatasetError(f"{self.path}: no MLP has been baked yet; run `python -m whestboard bake` to finish it")

    @property
    def indices(self) -> list[int]:
        return list(self._baked)

    def _read_truth_table(self) -> pd.DataFrame:
        records = [compact.read_mlp_record(self.path, i) for i in self._baked]
        return pd.DataFrame(
            {
                "index": self._baked,
                "mlp_id": self._baked,
                "mlp_name": [self._meta["mlp_names"][i] for i in self._baked],
                "mlp_seed": [int(self._meta["mlp_seeds"][i]) for i in self._baked],
                "avg_variance": [r["avg_variance"] for r in records],
                "all_layer_means": [r["all_layer_means"] for r in records],
                "weights_sha256": [r["weights_sha256"] for r in records],
                "provenance": [r["provenance"] for r in records],
            }
        )

    def _load_weights(self, index: int) -> np.ndarray:
        from whestboard.bake import build_weights

        weights = build_weights(self.info.width, self.info.depth, int(self._meta["mlp_seeds"][index]))
        expected = self._truth.iloc[self._baked.index(index)]["weights_sha256"]
        if compact.weights_checksum(weights) != expected:
            raise WeightsMismatch(
                f"{self.path}: MLP {index} rebuilt from its seed does not match the weights it was "
                "baked with (checksum differs). The installed numpy/whestbench generate different "
                f"weights; install the versions recorded in {compact.MANIFEST_NAME}."
            )
        return weights

    def estimator_seed(self, index: int) -> int:
        return int(self._meta["estimator_seeds"][self._check_index(index)])

    def provenance(self, index: int) -> dict:
        return dict(self._truth.iloc[self._baked.index(self._check_index(index))]["provenance"])


# ---------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise DatasetError(f"{path.parent}: no metadata.json; not a WhestBench dataset directory") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{path}: expected a JSON object")
    return data


def open_dataset(path: str | Path, key: str | None = None) -> Dataset:
    """Open an official schema-3.0 or a compact dataset directory."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise DatasetError(f"{path}: no such directory")
    if compact.is_compact_dir(path):
        return CompactDataset(path, key)
    if (path / "metadata.json").is_file():
        return ParquetDataset(path, key)
    raise DatasetError(
        f"{path}: neither metadata.json (official WhestBench dataset) nor "
        f"{compact.MANIFEST_NAME} (Whestboard compact dataset) is here"
    )
