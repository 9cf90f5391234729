"""White-box baselines for the convergence plot: mean and covariance propagation and cumulant
propagation at each order K (``cumulant:K``, whose K = 1 and K = 2 repeat the first two by
construction, at the same FLOPs) and the paper's SIMPLE at K = 3 (``cumulant:3:simple``), per MLP.

Each MLP is scored by ``whestboard.scoring._runs`` (one ``evaluate_estimator`` call per
MLP, under the round's whole rulebook), so a baseline's FLOPs and MSE are the
grader's. Shipped baselines sit beside the band as ``baselines/<kind>.json`` (read-only inputs
of the embedded data, so the page needs no computing on a fresh machine; the CLI writes them with
``--directory``). Baselines computed in the app go to the shared artifact store
(``whestboard.store._blobs``, namespace ``baseline``), rewritten after every MLP (resumable), so
every machine serves what a worker on any of them computed. When neither exists, a complete run of
the same estimator on the same dataset in the run store is used instead; failing all, the page
offers to compute them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy.exc import SQLAlchemyError

from whestboard.band._folder import (
    MAX_FILE_BYTES,
    BandFileUnreadable,
    beside_dir,
    load_band,
    read_band_file,
    state_band_dir,
)
from whestboard.band._measure import QUANTILES, BandError
from whestboard.rules import FAILURE_FLAGS, UNRECORDED, failure_kind, library_versions, load_caused
from whestboard.scoring import (
    CUMULANT_KINDS,
    RunRequest,
    builtin_choices,
    execute_for_keeps,
    get_run,
    list_runs,
    resolve_estimator,
    rulebook_for,
)
from whestboard.store import blob_meta, get_blob, put_blob, write_json

#: The cumulant propagations drawn over the band: each order's default and the paper's best at K = 3 (every
#: variant is on the paper's figure, ``_paper``).
BAND_CUMULANT_KINDS = ("cumulant:1", "cumulant:2", "cumulant:3", "cumulant:3:simple")
BASELINE_LABELS = {"mean": "Mean propagation", "cov": "Covariance propagation",
                   **{choice["value"]: choice["label"] for choice in builtin_choices()
                      if choice["value"] in BAND_CUMULANT_KINDS and choice["value"] in CUMULANT_KINDS}}
BASELINES_DIR = "baselines"
#: The per-MLP fields kept from a run entry: enough for the plot, its hover and a readout.
KEPT_FIELDS = (
    "mlp_index", "mlp_name", "final_layer_mse", "all_layers_mse", "per_layer_mse",
    "adjusted_final_layer_score", "flops_used", "effective_compute", "score_multiplier", "failed",
    "failure_reason", "wall_time_s", "residual_wall_time_s", "noise_floor", "final_layer_mse_corrected",
    "avg_variance", "whestbench_version", "flopscope_version",
    # what the rules judge a failure's cause from (``rules.failure_kind``, ``rules.load_caused``)
    *FAILURE_FLAGS, "error_code", "predict_wait_s", "cpu_wait_s", "scoring_wall_s",
)

ProgressFn = Callable[[str, int, int], None]


@dataclass
class BaselineResult:
    """One white-box estimator's per-MLP results on a dataset."""

    kind: str
    label: str
    per_mlp: list[dict[str, Any]]
    source: str  # "file" or "run store"
    budget: int | None = None

    @property
    def indices(self) -> list[int]:
        return [int(e["mlp_index"]) for e in self.per_mlp]

    @property
    def n_failed(self) -> int:
        return sum(1 for e in self.per_mlp if e.get("failed"))

    def values(self, metric: str = "final") -> np.ndarray:
        key = "final_layer_mse" if metric == "final" else "all_layers_mse"
        return np.asarray([float(e[key]) for e in self.per_mlp], dtype=np.float64)

    def summary(self, metric: str = "final") -> dict[str, float]:
        """Mean MSE (what the leaderboard averages), percentiles across MLPs, mean FLOPs and compute."""
        values = self.values(metric)
        out = {"mean": float(np.mean(values)), "n_mlps": len(values), "n_failed": self.n_failed}
        for q, v in zip(QUANTILES, np.percentile(values, QUANTILES), strict=True):
            out[f"p{q}"] = float(v)
        out["mean_flops_used"] = float(np.mean([float(e["flops_used"]) for e in self.per_mlp]))
        out["mean_effective_compute"] = float(np.mean([float(e["effective_compute"]) for e in self.per_mlp]))
        out["adjusted_score"] = float(np.mean([float(e["adjusted_final_layer_score"]) for e in self.per_mlp]))
        out["mean_multiplier"] = float(np.mean([float(e["score_multiplier"]) for e in self.per_mlp]))
        return out


def _file(directory: Path, kind: str) -> Path:
    """``baselines/<kind>.json``, a kind's ':' written as '-' (``cumulant:3`` -> ``cumulant-3.json``)."""
    return directory / BASELINES_DIR / f"{kind.replace(':', '-')}.json"


def _candidates(dataset) -> list[Path]:
    return [beside_dir(dataset), state_band_dir(dataset)]


BLOBS = "baseline"


def _blob_key(dataset, kind: str) -> str:
    return f"{dataset.info.key}/{dataset.info.n_samples}/{kind}"


def _blob_time(dataset, kind: str) -> float | None:
    try:
        found = blob_meta(BLOBS, _blob_key(dataset, kind))
    except SQLAlchemyError:  # an unreachable store means "none stored", never a broken page
        return None
    return None if found is None else float(found["created_at"])


def _from_blob(dataset, kind: str) -> dict[str, Any] | None:
    """A baseline computed in the app (on any machine), or None when there is none or it is mangled."""
    try:
        raw = get_blob(BLOBS, _blob_key(dataset, kind))
        if raw is None or len(raw) > MAX_FILE_BYTES:
            return None
        data = json.loads(raw)
        return _checked(data if isinstance(data, dict) else {"per_mlp": None}, Path(f"store:{BLOBS}"))
    except (SQLAlchemyError, ValueError, BandFileUnreadable):
        return None


def baseline_files_fingerprint(dataset) -> tuple:
    """The stored baselines of a dataset and when each was written (what ``_from_file`` reads)."""
    out = [(f"store:{kind}", when) for kind in BASELINE_LABELS if (when := _blob_time(dataset, kind)) is not None]
    for directory in _candidates(dataset):
        for kind in BASELINE_LABELS:
            try:
                out.append((str(_file(directory, kind)), _file(directory, kind).stat().st_mtime_ns))
            except OSError:
                continue
    return tuple(out)


#: The per-MLP fields ``BaselineResult.summary`` averages: a stored entry must have each as a number.
NUMERIC_FIELDS = ("final_layer_mse", "all_layers_mse", "flops_used", "effective_compute",
                  "adjusted_final_layer_score", "score_multiplier")


def _read_stored(path: Path) -> dict[str, Any]:
    """A baseline file's contents; ``BandFileUnreadable`` when it cannot be read or its entries are mangled."""
    return _checked(read_band_file(path), path)


def _checked(data: dict[str, Any], path: Path) -> dict[str, Any]:
    entries = data.get("per_mlp", [])
    try:
        whole = isinstance(entries, list) and all(
            int(e["mlp_index"]) >= 0 and all(np.isfinite(float(e[k])) for k in NUMERIC_FIELDS) for e in entries)
    except (KeyError, TypeError, ValueError):
        whole = False
    if not whole:
        raise BandFileUnreadable(path, f"per_mlp is not a list of entries with mlp_index and {', '.join(NUMERIC_FIELDS)}")
    return data


def _stored(path: Path) -> dict[str, Any] | None:
    """A baseline file's contents, or None when it is missing or unreadable (``unreadable_files`` says why)."""
    if not path.is_file():
        return None
    try:
        return _read_stored(path)
    except BandFileUnreadable:
        return None


def unreadable_files(dataset) -> dict[str, str]:
    """Stored baseline files that cannot be read (ignored, and recomputed by the next run): path -> reason."""
    out = {}
    for directory in _candidates(dataset):
        for kind in BASELINE_LABELS:
            path = _file(directory, kind)
            if path.is_file():
                try:
                    _read_stored(path)
                except BandFileUnreadable as exc:
                    out[str(path)] = exc.reason
    return out


def _from_file(dataset, kind: str) -> BaselineResult | None:
    """The shipped file beside the dataset, else one computed in the app (the shared store), else an
    older release's file in the state folder."""
    served = set(dataset.indices)
    beside, in_state = _candidates(dataset)
    for data in (_stored(_file(beside, kind)), _from_blob(dataset, kind), _stored(_file(in_state, kind))):
        if data is None:
            continue
        entries = [e for e in data["per_mlp"] if int(e["mlp_index"]) in served]
        if entries and data.get("reference_samples") == dataset.info.n_samples:
            return BaselineResult(kind, BASELINE_LABELS[kind], entries, "file", data.get("budget"))
    return None


def _from_run_store(dataset, kind: str) -> BaselineResult | None:
    """The newest complete run of this estimator over every MLP of the dataset, if one is stored."""
    try:
        runs = list_runs(dataset_key=dataset.info.key)
    except Exception:  # an unreachable store means "no stored runs", never a broken page
        return None
    wanted = sorted(dataset.indices)
    rnd = dataset.info.round
    for run in runs:
        if run.get("estimator_kind") != kind or sorted(run.get("mlp_indices") or []) != wanted:
            continue
        if rnd is not None and int(run.get("budget") or 0) != rnd.budget:
            continue
        report = get_run(run["run_id"]) or {}
        entries = [{k: e.get(k) for k in KEPT_FIELDS} for e in (report.get("results") or {}).get("per_mlp", [])]
        if entries:
            return BaselineResult(kind, BASELINE_LABELS[kind], entries, "run store", run.get("budget"))
    return None


def load_baselines(dataset) -> dict[str, BaselineResult]:
    """Every baseline available without computing: stored file first, then the run store."""
    found = {}
    for kind in BASELINE_LABELS:
        result = _from_file(dataset, kind) or _from_run_store(dataset, kind)
        if result is not None:
            found[kind] = result
    return found


def missing_baselines(dataset) -> list[str]:
    have = load_baselines(dataset)
    return missing_kinds({kind: len(result.per_mlp) for kind, result in have.items()}, len(dataset.indices))


def missing_kinds(scored: dict[str, int], n_mlps: int) -> list[str]:
    """Baselines not yet scored on every MLP, given how many MLPs each kind has been scored on."""
    return [kind for kind in BASELINE_LABELS if scored.get(kind, 0) < n_mlps]


def baselines_cost(dataset) -> float:
    """The missing baselines' work before it starts: each is metered under the round's FLOP budget per MLP."""
    rulebook = rulebook_for(dataset.info.round_tag, _custom_budget(dataset))
    return float(len(missing_baselines(dataset))) * len(dataset.indices) * float(rulebook.flop_budget)


def compute_baselines(
    dataset,
    *,
    kinds: tuple[str, ...] = tuple(BASELINE_LABELS),
    budget: int | None = None,
    directory: Path | None = None,
    on_progress: ProgressFn | None = None,
) -> dict[str, BaselineResult]:
    """Score each baseline on every MLP that has no stored result yet, stored after each MLP: in the
    shared store, or as files under ``directory`` when one is given (the CLI, shipped data)."""
    rulebook = rulebook_for(dataset.info.round_tag, budget if budget is not None else _custom_budget(dataset))
    for kind in kinds:
        stored = _from_blob(dataset, kind) if directory is None else _stored(_file(Path(directory), kind))
        if stored and (stored.get("reference_samples") != dataset.info.n_samples
                       or stored.get("budget") != rulebook.flop_budget):
            stored = None
        entries = {int(e["mlp_index"]): e for e in (stored or {}).get("per_mlp", [])
                   if not _scored_again(e, rulebook)}
        todo = [i for i in dataset.indices if i not in entries]
        if not todo:
            continue

        def save(done: int, total: int, entry: dict, kind: str = kind, entries: dict = entries) -> None:
            entries[int(entry["mlp_index"])] = {k: entry.get(k) for k in KEPT_FIELDS}
            payload = _payload(dataset, kind, rulebook, entries)
            if directory is None:
                put_blob(BLOBS, _blob_key(dataset, kind), json.dumps(payload, indent=1).encode())
            else:
                write_json(_file(Path(directory), kind), payload)
            if on_progress is not None:
                on_progress(kind, done, total)

        request = RunRequest(dataset=dataset, indices=todo, estimator=resolve_estimator(kind), rulebook=rulebook)
        execute_for_keeps(request, on_progress=save)  # a load accident is scored again, never saved
    if directory is None or Path(directory) in _candidates(dataset):
        return load_baselines(dataset)
    return {kind: BaselineResult(kind, BASELINE_LABELS[kind], stored["per_mlp"], "file")
            for kind in kinds if (stored := _stored(_file(Path(directory), kind))) is not None}


def _scored_again(entry: dict, rulebook) -> bool:
    """A stored MLP that a bake scores again: a failure the rules attribute to waiting, or one whose cause
    the entry does not record (written before the flags were kept), which nothing can vouch for."""
    return load_caused(entry, rulebook) or failure_kind(entry, rulebook) == UNRECORDED


def _custom_budget(dataset) -> int | None:
    """A custom-shaped dataset is scored at its band's budget (it has no round to take one from)."""
    if dataset.info.round is not None:
        return None

    band = load_band(dataset)
    if band is None:
        raise BandError(f"dataset {dataset.info.key!r} is not a round's shape: compute its band with --budget first")
    return band.plan.budget


def _payload(dataset, kind: str, rulebook, entries: dict[int, dict]) -> dict[str, Any]:
    return {
        "estimator": kind,
        "label": BASELINE_LABELS[kind],
        "dataset": dataset.info.key,
        "round_tag": dataset.info.round_tag,
        "budget": rulebook.flop_budget,
        "rulebook": rulebook.as_dict(),
        "reference_samples": dataset.info.n_samples,
        "scored_with": "whestboard.scoring._runs (one whestbench.scoring.evaluate_estimator call per MLP)",
        "updated_at_utc": datetime.now(UTC).isoformat(),
        **library_versions(),
        "per_mlp": [entries[i] for i in sorted(entries)],
    }
