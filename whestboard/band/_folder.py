"""Where a dataset's convergence band lives, how it is computed resumably, and how it is read back.

Layout (one small JSON file per MLP, each written atomically, so a killed run
leaves whole files or none and a re-run skips the finished ones)::

    <band dir>/band.json          manifest: dataset, stream, plan (checkpoints, prices), versions
    <band dir>/mlps/00000.json    one MLP: raw per-layer MSE at every checkpoint + its noise floor

The band dir is ``<dataset>/band/`` when the dataset folder is writable (the
embedded datasets ship theirs there, committed), otherwise
``<state dir>/bands/<key>-<hash of the dataset path>/`` (an official split in a
read-only download). Readers look in both places, beside the dataset first.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from whestboard import config
from whestboard.band._measure import (
    DEFAULT_MAX_BUDGET_MULTIPLE,
    STREAM_DESCRIPTION,
    BandError,
    BandPlan,
    MLPBand,
    band_table,
    measure_mlp,
    mlp_band_from_dict,
    mlp_band_to_dict,
    plan_for_dataset,
    reference_sha256,
)
from whestboard.cache import Region
from whestboard.data import dataset_identity, describe_error, same_dataset
from whestboard.rules import library_versions, metered_mc_flops_per_sample
from whestboard.store import write_json

FORMAT_NAME = "whestboard-band"
FORMAT_VERSION = 1
MANIFEST_NAME = "band.json"
BAND_DIR_NAME = "band"
MLP_DIR = "mlps"
KERNEL = {
    "blas_threads_per_mlp": 1,
    "chunking": "whestbench _pick_chunk_size(width); checkpoints inside a chunk use the sum of its first rows",
    "accumulation": "float64 per-layer sums, added chunk by chunk; means rounded to float32",
    "mse": "float64 mean over neurons of (float32 mean - float32 reference)^2",
}


# ---------------------------------------------------------------------------
# locations
# ---------------------------------------------------------------------------


def beside_dir(dataset) -> Path:
    return Path(dataset.info.path) / BAND_DIR_NAME


def state_band_dir(dataset) -> Path:

    digest = hashlib.sha256(str(Path(dataset.info.path).resolve()).encode()).hexdigest()[:12]
    return config.state_dir() / "bands" / f"{dataset.info.key}-{digest}"


def find_band_dir(dataset) -> Path | None:
    """The directory holding this dataset's band manifest, beside the dataset first."""
    for candidate in (beside_dir(dataset), state_band_dir(dataset)):
        if (candidate / MANIFEST_NAME).is_file():
            return candidate
    return None


def writable_band_dir(dataset) -> Path:
    """Where a new band is written: beside the dataset if that folder is writable."""
    existing = find_band_dir(dataset)
    if existing is not None:
        return existing
    if os.access(dataset.info.path, os.W_OK):
        return beside_dir(dataset)
    return state_band_dir(dataset)


def mlp_file(directory: Path, index: int) -> Path:
    return Path(directory) / MLP_DIR / f"{int(index):05d}.json"


def read_json(path: Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


#: No band, manifest or baseline file comes near this (a 1024 x 16 MLP's band file is ~20 kB); a larger
#: one is damaged, and refusing it before parsing bounds the memory a page view can need.
MAX_FILE_BYTES = 16 << 20


class BandFileUnreadable(BandError):
    """A stored band file that cannot be read as what it should be; ``path`` and ``reason`` say why."""

    def __init__(self, path: Path, reason: str, remedy: str = "") -> None:
        super().__init__(f"{path} is unreadable ({reason})" + (f". {remedy}" if remedy else ""))
        self.path = Path(path)
        self.reason = reason


def read_band_file(path: Path) -> dict[str, Any]:
    """A band, manifest or baseline JSON object; ``BandFileUnreadable`` names the file and the reason."""

    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise BandFileUnreadable(path, f"{size} bytes, more than any band file ({MAX_FILE_BYTES})")
        data = read_json(path)
    except BandFileUnreadable:
        raise
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise BandFileUnreadable(path, describe_error(exc)) from None
    if not isinstance(data, dict):
        raise BandFileUnreadable(path, f"a JSON {type(data).__name__}, not an object")
    return data


def recompute_command(dataset) -> str:
    """What rewrites a dataset's stored band (finished, valid MLP files are kept)."""
    return f"python -m whestboard band --dataset {dataset.info.path}"


# ---------------------------------------------------------------------------
# manifest
# ---------------------------------------------------------------------------


def build_manifest(dataset, plan: BandPlan) -> dict[str, Any]:

    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dataset": dataset_identity(dataset),
        "stream": STREAM_DESCRIPTION,
        "plan": plan.as_dict(),
        "metered_flops_per_sample": metered_mc_flops_per_sample(plan.width, plan.depth),
        "kernel": KERNEL,
        "created_at_utc": datetime.now(UTC).isoformat(),
        **library_versions(),
    }


def _same_plan(stored: dict, plan: BandPlan) -> bool:
    try:
        return BandPlan.from_dict(stored) == plan
    except (KeyError, TypeError, ValueError):
        return False


def _readable_manifest(path: Path, dataset) -> dict[str, Any] | None:
    """The stored manifest, or None when there is none or ``load_band`` could not read it (then it is
    rewritten: each MLP file is checked against the plan on its own, so the valid ones are kept)."""
    if not path.is_file():
        return None
    try:
        return _read_manifest(path, dataset)[0]
    except BandFileUnreadable:
        return None


def prepare_directory(directory: Path, dataset, plan: BandPlan, *, restart: bool = False) -> dict[str, Any]:
    """Create the manifest (again, if it is unreadable), or check that an existing one has the same plan."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST_NAME
    manifest = _readable_manifest(manifest_path, dataset) if not restart else None
    if manifest is not None:
        if manifest.get("format") != FORMAT_NAME or not same_dataset(manifest.get("dataset", {}),
                                                                     dataset_identity(dataset)):
            raise BandError(f"{directory} holds a band for another dataset; choose another --out or pass --restart")
        if not _same_plan(manifest.get("plan", {}), plan):
            old = manifest.get("plan", {})
            raise BandError(
                f"{directory} was computed with --max-budget-multiple {old.get('max_budget_multiple')} and budget "
                f"{old.get('budget')}; re-run with the same settings to resume, or pass --restart to recompute"
            )
        return manifest
    if restart and (directory / MLP_DIR).is_dir():
        for old in (directory / MLP_DIR).glob("*.json"):
            old.unlink()
    manifest = build_manifest(dataset, plan)
    write_json(manifest_path, manifest)
    return manifest


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------


@dataclass
class Band:
    """A dataset's band as stored: the plan it followed and every MLP measured so far."""

    directory: Path
    manifest: dict[str, Any]
    plan: BandPlan
    mlps: list[MLPBand]
    dataset_n_mlps: int  # the dataset's readable MLPs: a damaged one cannot have a band
    stale: list[int] = field(default_factory=list)  # measured against another reference
    unreadable: dict[int, str] = field(default_factory=dict)  # index -> "<file>: <reason>"
    _tables: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        return len(self.mlps) == self.dataset_n_mlps

    @property
    def indices(self) -> list[int]:
        return [b.index for b in self.mlps]

    def table(self, metric: str = "final"):
        """Percentiles across MLPs per checkpoint; computed once per loaded band (a copy is returned)."""
        if metric not in self._tables:
            self._tables[metric] = band_table(self.mlps, metric)
        return self._tables[metric].copy()

    def mean_sigma2(self, metric: str = "final") -> float:
        return float(np.mean([b.sigma2(metric) for b in self.mlps])) if self.mlps else float("nan")

    def noise_floor(self, metric: str = "final") -> float:
        return float(np.mean([b.noise_floor(metric) for b in self.mlps])) if self.mlps else float("nan")

    def mean_wall_time_s(self) -> float:
        times = [b.wall_time_s for b in self.mlps if np.isfinite(b.wall_time_s)]
        return float(np.mean(times)) if times else float("nan")


def _expected_references(dataset) -> dict[int, tuple[int, str]]:
    """mlp_seed and reference checksum per readable dataset index: what a valid band file must match."""
    summary = dataset.summary().set_index("index")
    out = {}
    for index in dataset.indices:
        means, avg_variance = dataset.truth(index)
        out[int(index)] = (int(summary.loc[index, "mlp_seed"]), reference_sha256(means, avg_variance))
    return out


@dataclass
class MLPBandFiles:
    """The per-MLP files of a band directory, sorted out."""

    valid: list[MLPBand]
    stale: list[int]  # whole files measured against another reference or other checkpoints
    unreadable: dict[int, str]  # index -> "<file>: <reason>"


def _read_mlp_band(path: Path, depth: int) -> MLPBand:
    try:
        band = mlp_band_from_dict(read_band_file(path))
    except BandFileUnreadable:
        raise
    except (BandError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:

        raise BandFileUnreadable(path, f"not a band file ({describe_error(exc)})") from None
    if band.index != int(path.stem):
        raise BandFileUnreadable(path, f"holds the band of MLP {band.index}, not of MLP {int(path.stem)}")
    if band.per_layer_mse_raw.shape[1] != depth:
        raise BandFileUnreadable(path, f"has {band.per_layer_mse_raw.shape[1]} layers, the dataset {depth}")
    return band


def sort_mlp_band_files(directory: Path, dataset, plan: BandPlan) -> MLPBandFiles:
    """Valid per-MLP files (same seed, reference and checkpoints), stale ones, unreadable ones."""
    expected = _expected_references(dataset)
    found = MLPBandFiles([], [], {})
    folder = Path(directory) / MLP_DIR
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not path.stem.isdigit() or int(path.stem) not in expected:
            continue  # an MLP the dataset does not serve (yet, or no longer: a damaged one)
        try:
            band = _read_mlp_band(path, dataset.info.depth)
        except BandFileUnreadable as exc:
            found.unreadable[int(path.stem)] = f"{exc.path}: {exc.reason}"
            continue
        if (band.mlp_seed, band.reference_sha256) != expected[band.index] or \
                tuple(int(n) for n in band.n) != plan.checkpoints:
            found.stale.append(band.index)
            continue
        found.valid.append(band)
    return found


def read_mlp_bands(directory: Path, dataset, plan: BandPlan) -> tuple[list[MLPBand], list[int]]:
    """Valid per-MLP files, and the indices of those to recompute (stale or unreadable)."""
    found = sort_mlp_band_files(directory, dataset, plan)
    return found.valid, sorted(found.stale + list(found.unreadable))


#: Bands by (folder, the fingerprint of its files): a rewritten file is a new key.
_BANDS: Region[Band] = Region("bands", max_entries=32)


def _fingerprint(directory: Path, dataset) -> tuple:
    folder = directory / MLP_DIR
    try:
        files = tuple(sorted(_stamp(p) for p in folder.glob("*.json"))) if folder.is_dir() else ()
        manifest = _stamp(directory / MANIFEST_NAME)
    except OSError:
        return ()
    return (manifest, files, tuple(dataset.indices))


def _stamp(path: Path) -> tuple[str, int, int]:
    """Name, size and modification time: a file rewritten within one clock tick still changes size."""
    st = path.stat()
    return (path.name, st.st_size, st.st_mtime_ns)


def band_fingerprint(dataset) -> tuple:
    """What the stored band of a dataset is made of (files and their times): changes when it does."""
    directory = find_band_dir(dataset)
    return () if directory is None else (str(directory), _fingerprint(directory, dataset))


def _read_manifest(path: Path, dataset) -> tuple[dict[str, Any], BandPlan]:
    """The manifest and its plan; ``BandFileUnreadable`` (saying how to rewrite it) for anything else."""
    remedy = f"Re-run `{recompute_command(dataset)}` to rewrite it (stored MLP files that still match are kept)"
    try:
        manifest = read_band_file(path)
    except BandFileUnreadable as exc:
        raise BandFileUnreadable(path, exc.reason, remedy) from None
    if manifest.get("format") != FORMAT_NAME or not isinstance(manifest.get("format_version", 0), int):
        raise BandFileUnreadable(path, "not a band manifest", remedy)
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise BandError(f"{path} was written by a newer Whestboard (format {manifest['format_version']})")
    try:
        return manifest, BandPlan.from_dict(manifest["plan"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:

        raise BandFileUnreadable(path, f"its plan cannot be read ({describe_error(exc)})", remedy) from None


def load_band(dataset) -> Band | None:
    """The stored band of a dataset, or None when none has been computed (cached per file set).

    An unreadable manifest raises ``BandFileUnreadable`` naming the file and the fix;
    unreadable per-MLP files are left out and listed in ``Band.unreadable``.
    """
    directory = find_band_dir(dataset)
    if directory is None:
        return None

    def read() -> Band:
        manifest, plan = _read_manifest(directory / MANIFEST_NAME, dataset)
        found = sort_mlp_band_files(directory, dataset, plan)
        return Band(directory, manifest, plan, found.valid, len(dataset.indices), found.stale, found.unreadable)

    return _BANDS.get_or_load((str(directory), _fingerprint(directory, dataset)), read)


# ---------------------------------------------------------------------------
# computing
# ---------------------------------------------------------------------------


@dataclass
class ComputeReport:
    """What a ``compute_band`` call did."""

    directory: Path
    plan: BandPlan
    computed: list[MLPBand]
    skipped: int
    wall_time_s: float

    @property
    def samples_per_second(self) -> float:
        total = sum(int(b.n[-1]) for b in self.computed)
        return total / self.wall_time_s if self.wall_time_s > 0 else float("nan")


class _Stopped(Exception):
    """Raised inside a worker's pass once the user interrupted the run."""


def default_jobs(n_todo: int) -> int:
    return max(1, min(os.cpu_count() or 1, n_todo))


_weights_lock = threading.Lock()


def _compute_one(dataset, index: int, plan: BandPlan, directory: Path, seeds: dict, names: dict,
                 on_chunk: Callable[[int], None]) -> MLPBand:
    with _weights_lock:  # rebuilding weights goes through flopscope's RNG; one at a time
        weights = dataset.weights(index)
    truth, avg_variance = dataset.truth(index)
    band = measure_mlp(
        weights, truth, avg_variance, plan, index=index, mlp_seed=seeds[index], mlp_name=names[index],
        reference_samples=dataset.info.n_samples, on_chunk=on_chunk,
    )
    write_json(mlp_file(directory, index), mlp_band_to_dict(band), indent=None)
    return band


def compute_band(
    dataset,
    *,
    max_budget_multiple: float = DEFAULT_MAX_BUDGET_MULTIPLE,
    budget: int | None = None,
    jobs: int | None = None,
    out: Path | None = None,
    restart: bool = False,
    show_progress: bool = True,
) -> ComputeReport:
    """Measure every MLP that has no valid band file yet; safe to kill and re-run.

    ``jobs`` MLPs run at once, each with one BLAS thread: on this kind of
    machine that is both the fastest split (measured by
    ``benchmarks/bench_band_throughput.py``) and the one whose float results do
    not depend on the core count (OpenBLAS rounds differently with 1 and 2
    threads).
    """
    from threadpoolctl import threadpool_limits

    plan = plan_for_dataset(dataset, max_budget_multiple, budget)
    directory = Path(out) if out is not None else writable_band_dir(dataset)
    prepare_directory(directory, dataset, plan, restart=restart)
    done, _stale = read_mlp_bands(directory, dataset, plan)
    finished = {b.index for b in done}
    todo = [i for i in dataset.indices if i not in finished]
    started = time.perf_counter()
    if not todo:
        return ComputeReport(directory, plan, [], len(finished), 0.0)
    summary = dataset.summary().set_index("index")
    seeds = {int(i): int(summary.loc[i, "mlp_seed"]) for i in todo}
    names = {int(i): str(summary.loc[i, "mlp_name"]) for i in todo}
    workers = jobs or default_jobs(len(todo))
    computed: list[MLPBand] = []
    stop = threading.Event()
    bar = _progress_bar(len(todo) * plan.n_max, show_progress, dataset.info.key)
    bar_lock = threading.Lock()

    def on_chunk(rows: int) -> None:
        if stop.is_set():
            raise _Stopped
        with bar_lock:
            bar.update(rows)

    try:
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(max_workers=workers) as pool:
            pending: set[Future] = {
                pool.submit(_compute_one, dataset, i, plan, directory, seeds, names, on_chunk) for i in todo
            }
            try:
                while pending:
                    finished_now, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for future in finished_now:
                        band = future.result()
                        computed.append(band)
                        with bar_lock:
                            bar.set_postfix_str(f"{len(finished) + len(computed)}/{len(dataset.indices)} MLPs")
            except BaseException:
                stop.set()
                for future in pending:
                    future.cancel()
                raise
    finally:
        bar.close()
    return ComputeReport(directory, plan, sorted(computed, key=lambda b: b.index), len(finished),
                         time.perf_counter() - started)


def _progress_bar(total: int, enabled: bool, label: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="sample", unit_scale=True, desc=f"band {label}", disable=not enabled,
                mininterval=1.0, smoothing=0.05)
