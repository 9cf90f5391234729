"""Open WhestBench datasets without the Hugging Face cache.

Two formats, one interface (``Dataset``):

* **schema 3.0** as published (``metadata.json`` + ``data/<split>-*.parquet``),
  read straight from the parquet files with pyarrow, one row group at a time.
  Weights go from Arrow buffers to numpy without passing through Python lists,
  which is what makes ``whestbench.mlp_at`` take seconds at 1024 x 16.
* **compact** (``whestboard.data._compact``): seeds and ground truth only; weights are
  rebuilt from the seed and checked against a stored checksum.

Indices are positions in the dataset (0 .. n_mlps-1), as ``mlp_index`` is in
whestbench's reports.

A damaged MLP (a truncated record file, an unreadable row group) is contained
to that MLP: ``Dataset.indices`` lists the readable MLPs, ``Dataset.damaged``
the others with the file and the reason, and asking for a damaged one raises
``MLPDamaged`` with that message. Aggregates (mean avg_variance, noise floor,
MC@B) are over the readable MLPs and ``aggregate_basis`` says how many were left out.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whestboard.cache import Region
from whestboard.data import _compact
from whestboard.data._weights_cache import WEIGHTS_CACHE
from whestboard.rules import Round, get_round, round_for_shape
from whestboard.data._bake import build_weights

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
class DamagedMLP:
    """One MLP whose stored reference cannot be read: which file, why, and how to repair it."""

    dataset_key: str
    index: int
    path: Path
    reason: str
    remedy: str
    name: str | None = None
    seed: int | None = None

    @property
    def problem(self) -> str:
        """``<file>: <reason>``, what a table cell or ``/healthz`` shows."""
        return f"{self.path}: {self.reason}"

    @property
    def message(self) -> str:
        return f"MLP {self.index} of {self.dataset_key} is damaged: {self.problem}. {self.remedy}"


class MLPDamaged(DatasetError):
    """An MLP whose stored reference is damaged was asked for; ``damage`` says which file and why."""

    def __init__(self, damage: DamagedMLP, *, also: list[int] | tuple[int, ...] = ()) -> None:
        more = f" MLP(s) {', '.join(map(str, also))} of the selection are damaged too." if also else ""
        super().__init__(damage.message + more)
        self.damage = damage


_GENERATIONS = itertools.count()


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
    def _read_truth_table(self) -> tuple[pd.DataFrame, list[DamagedMLP]]:  # pragma: no cover - abstract
        """The readable MLPs' references (one row each, by index) and the damaged MLPs."""
        raise NotImplementedError

    def _load_weights(self, index: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def estimator_seed(self, index: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------
    @cached_property
    def generation(self) -> int:
        """Unique per opened dataset object: a cache key part that a re-opened (changed) dataset never shares."""
        return next(_GENERATIONS)

    @cached_property
    def _truth(self) -> pd.DataFrame:
        table, damaged = self._read_truth_table()
        self._damaged = {d.index: d for d in sorted(damaged, key=lambda d: d.index)}
        return table.reset_index(drop=True)

    @property
    def damaged(self) -> dict[int, DamagedMLP]:
        """MLPs the dataset holds whose reference cannot be read, by index (read-only: shared)."""
        self._truth  # noqa: B018 - reading the references is what finds the damaged ones
        return self._damaged

    @cached_property
    def indices(self) -> list[int]:
        """Indices of the readable MLPs, ascending: what can be shown and scored."""
        return [int(i) for i in self._truth["index"]]

    @property
    def held_indices(self) -> list[int]:
        """Every MLP the dataset holds, readable or damaged, ascending."""
        return sorted(self.indices + list(self.damaged))

    def refuse_damaged(self, indices) -> None:
        """Raise ``MLPDamaged`` (file, reason, fix) when a selection includes a damaged MLP: a run
        checks its selection with this before any work, so it never half-runs."""
        damaged = self.damaged
        hit = [int(i) for i in indices if int(i) in damaged] if damaged else []
        if hit:
            raise MLPDamaged(self.damaged[hit[0]], also=hit[1:])

    @cached_property
    def _position(self) -> dict[int, int]:
        return {index: row for row, index in enumerate(self.indices)}

    def _check_index(self, index: int) -> int:
        index = int(index)
        if index in self._position:
            return index
        if index in self.damaged:
            raise MLPDamaged(self.damaged[index])
        held = self.info.n_mlps
        raise MLPNotFound(
            f"MLP {index} is not in dataset {self.info.key!r} "
            f"(it holds {held} MLPs, indices 0..{held - 1})"
        )

    def _row(self, index: int) -> pd.Series:
        return self._truth.iloc[self._position[self._check_index(index)]]

    def summary(self) -> pd.DataFrame:
        """One row per MLP held, computed from the ground truth only (weights untouched).

        Damaged MLPs are rows too, ``damaged`` True and ``damage`` naming the file
        and the reason, their statistics missing (NaN), so every list shows them.
        """
        t = self._truth
        means = np.stack(t["all_layer_means"].to_numpy()) if len(t) else np.zeros((0, 1, 1))
        final = means[:, -1, :]
        out = pd.DataFrame(
            {
                "index": t["index"].to_numpy(dtype=np.int64),
                "mlp_id": t["mlp_id"].to_numpy(dtype=np.int64),
                "mlp_name": t["mlp_name"].to_numpy(dtype=object),
                "mlp_seed": t["mlp_seed"].to_numpy(dtype=np.int64),
                "avg_variance": t["avg_variance"].to_numpy(dtype=np.float64),
                "final_mean_avg": final.mean(axis=1),
                "final_mean_median": np.median(final, axis=1) if len(t) else np.zeros(0),
                "final_mean_max": final.max(axis=1) if len(t) else np.zeros(0),
                "final_dead_fraction": (final <= DEAD_MEAN_THRESHOLD).mean(axis=1),
                "dead_fraction": (means <= DEAD_MEAN_THRESHOLD).mean(axis=(1, 2)),
            }
        )
        out["noise_floor"] = out["avg_variance"] / self.info.n_samples
        out["damaged"] = False
        out["damage"] = ""
        if not self.damaged:
            return out
        rows = pd.DataFrame(
            {
                "index": [d.index for d in self.damaged.values()],
                "mlp_id": pd.array([d.index if self.info.format == "compact" else None
                                    for d in self.damaged.values()], dtype="Int64"),
                "mlp_name": [d.name for d in self.damaged.values()],
                "mlp_seed": pd.array([d.seed for d in self.damaged.values()], dtype="Int64"),
                "damaged": True,
                "damage": [d.problem for d in self.damaged.values()],
            }
        )
        both = pd.concat([out.astype({"mlp_id": "Int64", "mlp_seed": "Int64"}), rows], ignore_index=True)
        both = both.sort_values("index", kind="stable").reset_index(drop=True)
        if not both["mlp_seed"].isna().any():
            both = both.astype({"mlp_id": np.int64, "mlp_seed": np.int64})
        return both

    def truth(self, index: int) -> tuple[np.ndarray, float]:
        """``(all_layer_means float32 (depth, width), avg_variance)`` for one MLP."""
        row = self._row(index)
        return np.asarray(row["all_layer_means"], dtype=np.float32), float(row["avg_variance"])

    def mlp_name(self, index: int) -> str:
        return str(self._row(index)["mlp_name"])

    def weights(self, index: int) -> np.ndarray:
        """Read-only float32 array (depth, width, width), cached across calls."""
        index = self._check_index(index)
        return WEIGHTS_CACHE.get_or_load((str(self.info.path), index), lambda: self._load_weights(index))

    def warm_weights(self, index: int) -> None:
        """Load the weights in the background (the cache service's warming thread) if not cached yet."""
        index = self._check_index(index)
        WEIGHTS_CACHE.warm((str(self.info.path), index), lambda: self._load_weights(index))

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
        """Mean avg_variance of the readable MLPs (``aggregate_basis`` says which)."""
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

    def aggregate_basis(self) -> str:
        """Which MLPs the dataset-wide figures are computed over, in words."""
        readable, damaged = len(self.indices), len(self.damaged)
        if not damaged:
            return f"all {readable} MLPs"
        return f"{readable} of {readable + damaged} MLPs ({damaged} damaged, left out)"


# ---------------------------------------------------------------------------
# schema 3.0 (official parquet)
# ---------------------------------------------------------------------------


class ParquetDataset(Dataset):
    """An official schema-3.0 directory, read with pyarrow one row group at a time."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        self.path = Path(path)
        meta = _read_json(self.path / "metadata.json")
        _validate_official_metadata(self.path, meta)
        split = str(meta.get("split") or "")
        files = sorted((self.path / "data").glob(f"{split}-*.parquet")) if split else []
        if not files:
            files = sorted((self.path / "data").glob("*.parquet"))
        if not files:
            raise DatasetError(f"{self.path}: no parquet files under data/ (expected data/{split}-NNNNN-of-MMMMM.parquet)")
        self._paths = files
        self._files = [_open_parquet(f) for f in files]
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

    def _remedy(self, path: Path) -> str:
        return f"Re-download {path.name} of this split (the other MLPs are served meanwhile)."

    def _read_truth_table(self) -> tuple[pd.DataFrame, list[DamagedMLP]]:
        """The small columns one row group at a time: an unreadable group damages only its own MLPs."""
        frames, damaged = [], []
        for fi, rg, start, n in self._groups:
            path = self._paths[fi]
            try:
                with self._lock:  # a ParquetFile is not safe to read from two threads
                    table = self._files[fi].read_row_group(rg, columns=TRUTH_COLUMNS)
                frame = self._truth_frame(table, start)
            except MemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - pyarrow reports corrupt pages as OSError, ArrowInvalid...
                reason = f"row group {rg} (rows {start}..{start + n - 1}) cannot be read ({_describe(exc)})"
                damaged += [DamagedMLP(self.info.key, i, path, reason, self._remedy(path)) for i in range(start, start + n)]
                continue
            bad = ~np.array([np.isfinite(m).all() for m in frame["all_layer_means"]], dtype=bool)
            bad |= ~np.isfinite(frame["avg_variance"].to_numpy(dtype=np.float64))
            for index, name, seed in frame.loc[bad, ["index", "mlp_name", "mlp_seed"]].to_numpy().tolist():
                damaged.append(DamagedMLP(self.info.key, int(index), path,
                                          f"row group {rg}: its reference holds non-finite values",
                                          self._remedy(path), str(name), int(seed)))
            frames.append(frame[~bad])
        _release_arrow_memory()
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
            {c: [] for c in ("index", "mlp_id", "mlp_name", "mlp_seed", "avg_variance", "all_layer_means")})
        return frame, damaged

    def _truth_frame(self, table, start: int) -> pd.DataFrame:
        d, w = self.info.depth, self.info.width
        flat = _flatten_to_numpy(table.column("all_layer_means"))
        if flat.size != len(table) * d * w:
            raise DatasetError(f"all_layer_means holds {flat.size} values for {len(table)} MLPs, "
                               f"expected {d} x {w} each")
        means = flat.reshape(len(table), d, w)
        return pd.DataFrame(
            {
                "index": np.arange(start, start + len(table)),
                "mlp_id": table.column("mlp_id").to_numpy(),
                "mlp_name": table.column("mlp_name").to_pylist(),
                "mlp_seed": table.column("mlp_seed").to_numpy(),
                "avg_variance": table.column("avg_variance").to_numpy(),
                "all_layer_means": list(means.astype(np.float32, copy=True)),
            }
        )

    def _load_weights(self, index: int) -> np.ndarray:
        fi, rg, row = self._locate(index)
        try:
            with self._lock:  # a ParquetFile is not safe to read from two threads
                table = self._files[fi].read_row_group(rg, columns=["weights"])
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - see _read_truth_table
            path = self._paths[fi]
            raise MLPDamaged(DamagedMLP(self.info.key, index, path,
                                        f"the weights of row group {rg} cannot be read ({_describe(exc)})",
                                        self._remedy(path), self.mlp_name(index))) from None
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

        raw = int(self._row(index)["mlp_seed"])
        if self._protocol == "3.0":
            return derive_estimator_seed(raw)
        if self._protocol == "4.0":
            return derive_estimator_seed_v4(raw, salt=resolve_salt(self._seed_proto_meta))
        return raw


TRUTH_COLUMNS = ["mlp_id", "mlp_name", "mlp_seed", "avg_variance", "all_layer_means"]


def dataset_identity(dataset: Dataset, indices: list[int] | None = None) -> dict[str, Any]:
    """What a result computed from a dataset was computed from: the one identity every record stores.

    ``key``, ``format``, ``round_tag``, ``width``, ``depth`` and ``n_samples`` (the reference's Monte Carlo
    samples). With ``indices``, also ``references_sha256``: the chosen MLPs' seeds and reference means,
    hashed, reading only those MLPs' references (no weights, no whole-dataset summary), so answering a
    repeated run stays instant on a 1000-MLP split. Band manifests written before this identity call
    ``n_samples`` ``reference_samples``: :func:`same_dataset` reads both.
    """
    info = dataset.info
    ident: dict[str, Any] = {"key": info.key, "format": info.format, "round_tag": info.round_tag,
                             "width": info.width, "depth": info.depth, "n_samples": info.n_samples}
    if indices is not None:
        ident["references_sha256"] = _references_sha256(dataset, indices)
    return ident


#: The references' digest of a dataset's MLPs, by (the dataset object, its MLPs): a sweep keys every point of
#: every curve on the same MLPs (12 curves x 32 budgets read each MLP's reference 384 times, seconds in a web
#: request on 32 MLPs, minutes on a 1000-MLP split). Held by a weak reference, so a dataset the registry let go
#: (its files changed) is never answered from here.
_REFERENCES: Region[tuple[weakref.ref, str]] = Region("dataset-references", max_entries=256)


def _references_sha256(dataset: Dataset, indices: list[int]) -> str:
    key = (id(dataset), tuple(int(i) for i in indices))
    held = _REFERENCES.get(key)
    if held is not None and held[0]() is dataset:
        return held[1]
    digest = hashlib.sha256()
    for index in indices:
        means, avg_variance = dataset.truth(index)
        digest.update(np.ascontiguousarray(means, dtype=np.float32).tobytes())
        digest.update(repr((int(dataset.estimator_seed(index)), float(avg_variance))).encode())
    _REFERENCES.set(key, (weakref.ref(dataset), digest.hexdigest()))
    return digest.hexdigest()


def same_dataset(stored: dict[str, Any], ident: dict[str, Any]) -> bool:
    """Whether a stored identity names the dataset of ``ident``, whatever its folder's name (``key``).

    Reads identities written before :func:`dataset_identity` was the one: ``reference_samples`` for
    ``n_samples``.
    """
    stored = dict(stored)
    if "reference_samples" in stored and "n_samples" not in stored:
        stored["n_samples"] = stored.pop("reference_samples")
    return {k: v for k, v in stored.items() if k != "key"} == {k: v for k, v in ident.items() if k != "key"}


def _describe(exc: BaseException) -> str:
    return _compact.describe_error(exc)


def _open_parquet(path: Path):
    """A ``ParquetFile``; a file whose footer cannot be read makes the whole split unreadable (its row
    count, hence every later MLP's index, is unknown).

    ``pre_buffer=False``: with pre-buffering, the file object keeps its last row group's raw pages
    (~105 MB for a 1024 x 16 MLP) until it is closed, and a dataset keeps its files open. Reads are
    one row group at a time from a local disk, where pre-buffering buys nothing.
    """
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, pre_buffer=False)
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError... for a bad footer
        raise DatasetError(f"{path}: not a readable parquet file ({_describe(exc)}); re-download it") from None


def _release_arrow_memory() -> None:
    """Hand the row group's freed buffers back to the OS.

    Arrow's allocator keeps freed pages for reuse; after reading a 1024 x 16 row
    group that is ~400 MB held by a process that only needs the 64 MiB it copied out.
    """
    import gc

    import pyarrow as pa

    # Arrow buffers still referenced from cycles made during the read are freed first. Those cycles are
    # young: collecting generations 0 and 1 finds them in about a millisecond, where a full collection
    # walks every object of a server that has imported Dash and plotly (~0.2 s per MLP read).
    gc.collect(1)
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
            meta = _compact.read_manifest(self.path)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{self.path}: {_compact.MANIFEST_NAME} is not valid JSON ({exc})") from None
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{self.path}: {_compact.MANIFEST_NAME} is not UTF-8 text ({exc})") from None
        _validate_compact_manifest(self.path, meta)
        self._meta = meta
        self._baked = _compact.baked_indices(self.path)
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

    def bake_command(self) -> str:
        """The command that resumes this dataset's bake (it bakes every record file that is missing)."""
        info = self.info
        shape = f"--round {info.round_tag}" if info.round_tag and self._meta.get("round") else (
            f"--width {info.width} --depth {info.depth}")
        return (f"python -m whestboard bake {shape} --n-mlps {info.declared_n_mlps} "
                f"--samples {info.n_samples} --out {self.path}")

    def _damage(self, index: int, path: Path, reason: str) -> DamagedMLP:
        names, seeds = self._meta["mlp_names"], self._meta["mlp_seeds"]
        known = 0 <= index < len(seeds)
        return DamagedMLP(
            self.info.key, index, path, reason,
            f"Replace it with a good copy, or delete it and re-bake that MLP: {self.bake_command()}",
            str(names[index]) if known else None, int(seeds[index]) if known else None,
        )

    def _read_truth_table(self) -> tuple[pd.DataFrame, list[DamagedMLP]]:
        """Every record, each checked on its own: a damaged file costs only its MLP."""
        readable: list[tuple[int, dict]] = []
        damaged: list[DamagedMLP] = []
        declared = len(self._meta["mlp_seeds"])
        for i in self._baked:
            path = _compact.mlp_path(self.path, i)
            if i >= declared:
                damaged.append(self._damage(i, path, f"the manifest lists only {declared} MLPs (0..{declared - 1})"))
                continue
            try:
                readable.append((i, _compact.read_mlp_record(self.path, i, depth=self.info.depth,
                                                            width=self.info.width)))
            except _compact.RecordDamaged as exc:
                damaged.append(self._damage(i, exc.path, exc.reason))
        indices = [i for i, _ in readable]
        records = [r for _, r in readable]
        frame = pd.DataFrame(
            {
                "index": pd.Series(indices, dtype=np.int64),
                "mlp_id": pd.Series(indices, dtype=np.int64),
                "mlp_name": pd.Series([self._meta["mlp_names"][i] for i in indices], dtype=object),
                "mlp_seed": pd.Series([int(self._meta["mlp_seeds"][i]) for i in indices], dtype=np.int64),
                "avg_variance": pd.Series([r["avg_variance"] for r in records], dtype=np.float64),
                "all_layer_means": pd.Series([r["all_layer_means"] for r in records], dtype=object),
                "weights_sha256": pd.Series([r["weights_sha256"] for r in records], dtype=object),
                "provenance": pd.Series([r["provenance"] for r in records], dtype=object),
            }
        )
        return frame, damaged

    def _load_weights(self, index: int) -> np.ndarray:

        expected = self._row(index)["weights_sha256"]
        weights = build_weights(self.info.width, self.info.depth, int(self._meta["mlp_seeds"][index]))
        if _compact.weights_checksum(weights) != expected:
            raise WeightsMismatch(
                f"{self.path}: MLP {index} rebuilt from its seed does not match the weights it was "
                "baked with (checksum differs). The installed numpy/whestbench generate different "
                f"weights; install the versions recorded in {_compact.MANIFEST_NAME}."
            )
        return weights

    def estimator_seed(self, index: int) -> int:
        return int(self._meta["estimator_seeds"][self._check_index(index)])

    def provenance(self, index: int) -> dict:
        return dict(self._row(index)["provenance"])


def _validate_compact_manifest(path: Path, meta: Any) -> None:
    """Every manifest field the dataset reads, checked once, so a mangled manifest is one clear error."""
    name = _compact.MANIFEST_NAME
    if not isinstance(meta, dict) or meta.get("format") != _compact.FORMAT_NAME:
        raise DatasetError(f"{path}: {name} is not a Whestboard compact manifest")
    try:
        version = int(meta.get("format_version", 0))
        if version > _compact.FORMAT_VERSION:
            raise DatasetError(f"{path}: written by a newer Whestboard (format {meta['format_version']})")
        if str((meta.get("seed_protocol") or {}).get("version")) != "3.0":
            raise DatasetError(f"{path}: compact datasets need seed protocol 3.0")
        sizes = {k: int(meta[k]) for k in ("width", "depth", "n_samples", "n_mlps")}
        lists = {k: meta[k] for k in ("mlp_seeds", "mlp_names", "estimator_seeds")}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DatasetError(f"{path}: {name} lacks or mangles a field ({_compact.describe_error(exc)}); "
                           "re-bake the dataset or restore the file") from None
    if any(v <= 0 for v in sizes.values()):
        raise DatasetError(f"{path}: {name} gives a non-positive size: {sizes}")
    wrong = [k for k, v in lists.items() if not isinstance(v, list) or len(v) != sizes["n_mlps"]]
    if wrong:
        raise DatasetError(f"{path}: {name}: {', '.join(wrong)} must list n_mlps = {sizes['n_mlps']} entries")


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
    if _compact.is_compact_dir(path):
        return CompactDataset(path, key)
    if (path / "metadata.json").is_file():
        return ParquetDataset(path, key)
    raise DatasetError(
        f"{path}: neither metadata.json (official WhestBench dataset) nor "
        f"{_compact.MANIFEST_NAME} (Whestboard compact dataset) is here"
    )
