"""Which datasets the app serves, opened once per process.

The embedded datasets under ``data/``, the datasets kept from the playground, plus every
directory listed in ``WHESTBOARD_DATASETS`` (separated by ``os.pathsep``), so a participant who
downloaded the official mini or full split just points the app at it.
A directory that cannot be read is reported with its reason, never fatal.

The embedded and the listed datasets are read-only inputs each machine has on its own disk. A kept
dataset is made on one machine and must be served by all: it lives in the shared artifact store
(``whestboard.store._blobs``, namespace ``kept-dataset``) and is unpacked into this machine's
``config.kept_datasets_dir()`` (a cache) when missing, checked every few seconds and at once when a
key is not found; one forgotten (``forget_kept``) leaves every machine's cache at its next sync. A kept
folder only ever comes from the store (the keep is baked in a staging folder), so one the store no longer
holds is dropped at once, whichever process of the machine unpacked it.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from whestboard import config
from whestboard.data import _compact
from whestboard.data._datasets import DamagedMLP, Dataset, DatasetError, open_dataset
from whestboard.store import blob_keys, fetch_blob_folder, remove_blob

KEPT = "kept-dataset"
KEPT_SYNC_EVERY_S = 2.0
_KEPT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")

REPO_ROOT = config.REPO_ROOT
data_dir = config.data_dir  # the embedded data folder (``WHESTBOARD_DATA_DIR`` overrides it)


class DatasetNotFound(KeyError):
    """No dataset with that key is served."""


@dataclass(frozen=True)
class Broken:
    key: str
    path: Path
    reason: str


def _looks_like_dataset(path: Path) -> bool:
    return _compact.is_compact_dir(path) or (path / "metadata.json").is_file()


def _datasets_in(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and _looks_like_dataset(p))


_kept_synced_at = -KEPT_SYNC_EVERY_S


def sync_kept(*, force: bool = False) -> None:
    """Unpack into this machine's cache every kept dataset the shared store holds and this machine lacks,
    and drop every one it no longer holds (at most every ``KEPT_SYNC_EVERY_S`` unless forced); an
    unreachable store leaves what is here.

    A kept dataset is baked elsewhere (``data._generated.keep_generated`` stages it outside this folder) and
    only ever arrives here from the store, so a folder the store does not hold was forgotten: whichever
    process of the machine unpacked it, it goes at once. Hidden folders are fetches being unpacked.
    """
    global _kept_synced_at
    if not force and time.monotonic() - _kept_synced_at < KEPT_SYNC_EVERY_S:
        return
    _kept_synced_at = time.monotonic()
    try:
        names = set(blob_keys(KEPT))
        folder = config.kept_datasets_dir()
        for name in names:
            if _KEPT_NAME.fullmatch(name) and not (folder / name).is_dir():
                fetch_blob_folder(KEPT, name, folder / name)
        for gone in _datasets_in(folder):  # forgotten on some machine: this cache drops it too
            if gone.name not in names and not gone.name.startswith("."):
                shutil.rmtree(gone, ignore_errors=True)
    except (SQLAlchemyError, OSError):
        return


def forget_kept(name: str) -> bool:
    """Delete a kept dataset on every machine: from the shared store now, from each machine's cache at its
    next sync (a few seconds). False when no kept dataset has that name."""
    removed = remove_blob(KEPT, name)
    shutil.rmtree(config.kept_datasets_dir() / name, ignore_errors=True)
    sync_kept(force=True)
    return removed


def candidate_paths() -> list[Path]:
    """Embedded dataset folders first (sorted), then those kept from the playground (sorted), then the
    user's, in the order given."""
    sync_kept()
    return [*_datasets_in(data_dir()), *_datasets_in(config.kept_datasets_dir()), *config.extra_dataset_paths()]


def _unique_key(path: Path, taken: set[str]) -> str:
    key = path.name or "dataset"
    n = 2
    while key in taken:
        key = f"{path.name}-{n}"
        n += 1
    return key


def _fingerprint(path: Path) -> tuple:
    """Changes when any file the dataset is read from does: a bake adding MLPs, a record damaged or
    repaired in place (which leaves the folders' own times alone), a parquet file replaced.

    A few ``stat`` calls per file on each lookup; 1000 records cost about a millisecond.
    """
    files = [path / _compact.MANIFEST_NAME, path / "metadata.json"]
    data = path / "data"
    if data.is_dir():
        files += sorted(data.glob("*.parquet"))
    stats = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        stats.append((f.name, st.st_size, st.st_mtime_ns))
    try:
        folder_time = path.stat().st_mtime_ns
    except OSError:
        return (0,)
    return (folder_time, tuple(stats), _compact.records_fingerprint(path))


def absent_reason(path: Path) -> str:
    """What the page and /healthz say about a listed dataset this machine does not have."""
    return (f"{path} is not on this machine: each machine serving Whestboard needs its own read-only copy "
            "of every dataset named in WHESTBOARD_DATASETS (copy it to that path, or remove it from the "
            "variable on this machine)")


_lock = threading.Lock()
_opened: dict[Path, tuple[tuple, Dataset | Broken]] = {}


def _open_all() -> tuple[dict[str, Dataset], list[Broken]]:
    found: dict[str, Dataset] = {}
    broken: list[Broken] = []
    taken: set[str] = set()
    with _lock:
        for path in candidate_paths():
            key = _unique_key(path, taken)
            taken.add(key)
            if not path.exists():  # only a WHESTBOARD_DATASETS entry can be absent: listed, not here
                broken.append(Broken(key, path, absent_reason(path)))
                continue
            fp = _fingerprint(path)
            cached = _opened.get(path)
            if cached is None or cached[0] != fp or getattr(cached[1], "key", None) not in (None, key):
                try:
                    entry: Dataset | Broken = open_dataset(path, key=key)
                except (DatasetError, OSError) as exc:
                    entry = Broken(key, path, str(exc))
                _opened[path] = (fp, entry)
            entry = _opened[path][1]
            if isinstance(entry, Broken):
                broken.append(entry)
            else:
                found[key] = entry
    return found, broken


def served_datasets() -> dict[str, Dataset]:
    """Every readable dataset, keyed by folder name."""
    return _open_all()[0]


def broken_datasets() -> list[Broken]:
    return _open_all()[1]


def damaged_mlps() -> dict[str, list[DamagedMLP]]:
    """Per served dataset, its MLPs whose stored reference cannot be read (datasets with none omitted)."""
    return {key: list(ds.damaged.values()) for key, ds in served_datasets().items() if ds.damaged}


def get_dataset(key: str) -> Dataset:
    found = served_datasets()
    if key not in found:  # kept on another machine a moment ago?
        sync_kept(force=True)
        found = served_datasets()
    if key not in found:
        known = ", ".join(found) or "none"
        raise DatasetNotFound(f"no dataset {key!r}; available: {known}")
    return found[key]


def datasets_for_round(tag: str) -> list[Dataset]:
    """The served datasets of a round, the one that stands for the round first.

    The one rule for "which dataset is the round's": the embedded dataset named after the round, then
    the other embedded ones, then the user's in the order given. Every page's default, the
    leaderboard's Monte Carlo reference and the band other pages draw come from this order.
    """
    found = [d for d in served_datasets().values() if d.info.round_tag == tag]
    return sorted(found, key=lambda d: d.info.key != tag)


def default_dataset_key(round_tag: str | None = None) -> str | None:
    """The dataset that stands for the round (or the first served of any round): what a bare URL shows."""
    if round_tag is not None:
        found = datasets_for_round(round_tag)
        return found[0].info.key if found else None
    return next(iter(served_datasets()), None)


def dataset_overview() -> list[dict]:
    """One plain dict per served dataset: what the home page and CLI list.

    ``n_mlps`` counts the readable MLPs and every aggregate is over them;
    ``n_held`` counts the MLPs the dataset holds, ``damaged`` lists the others.
    """
    rows = []
    kept_folder = config.kept_datasets_dir().resolve()
    for key, ds in served_datasets().items():
        info = ds.info
        rnd = info.round
        rows.append(
            {
                "key": key,
                "path": str(info.path),
                "kept": Path(info.path).resolve().parent == kept_folder,
                "format": info.format,
                "round": info.round_tag,
                "shape": info.shape_label,
                "width": info.width,
                "depth": info.depth,
                "budget": rnd.budget if rnd else None,
                "n_mlps": len(ds.indices),
                "n_held": len(ds.indices) + len(ds.damaged),
                "declared_n_mlps": info.declared_n_mlps,
                "n_samples": info.n_samples,
                "mean_avg_variance": ds.mean_avg_variance,
                "noise_floor": ds.noise_floor,
                "mc_at_bm": ds.mc_at_bm(),
                "mc_samples_at_budget": rnd.mc_samples_at_budget if rnd else None,
                "aggregate_basis": ds.aggregate_basis(),
                "damaged": [{"index": d.index, "path": str(d.path), "reason": d.reason, "remedy": d.remedy}
                            for d in ds.damaged.values()],
            }
        )
    return rows
