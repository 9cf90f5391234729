"""Everything the convergence page draws for one dataset, gathered as plain values.

The page's figure builder (``components.figures.convergence``) takes a
``ConvergenceView`` and nothing else, so it stays a pure function of data:
band percentiles, the analytic sigma^2 / N, noise floors, budget markers,
white-box baselines and every recorded run of the round.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field

import pandas as pd

from whestboard.band._baselines import (
    BaselineResult,
    baseline_files_fingerprint,
    load_baselines,
    missing_kinds,
    unreadable_files,
)
from whestboard.band._folder import Band, band_fingerprint, load_band, recompute_command
from whestboard.band._measure import (
    METRICS,
    BandError,
    EqualFlopsComparison,
    compare_with_sampling,
    plan_for_dataset,
)
from whestboard.cache import Region
from whestboard.data import datasets_for_round, served_datasets
from whestboard.rules import failure_kind, failures_sentence
from whestboard.scoring import get_run, list_runs, runs_revision
from whestboard.store import finite


@dataclass(frozen=True)
class BaselinePoint:
    """A white-box estimator across the dataset's MLPs: mean MSE, percentiles, mean compute."""

    kind: str
    label: str
    flops: float  # mean effective compute C (= F where residual time is not priced)
    flops_used: float
    mse: dict[str, dict[str, float]]  # metric -> mean, p10 .. p90
    n_mlps: int
    n_failed: int
    adjusted_score: float
    mean_multiplier: float
    source: str
    failures: str | None = None  # "1 of 8 MLPs failed: residual time" (rules.failures_sentence), None when none did


@dataclass(frozen=True)
class RunPoint:
    """One recorded run, placed at the compute it actually spent."""

    run_id: str
    label: str
    kind: str
    team: str | None
    source: str
    dataset_key: str
    created_at: str
    flops: float  # mean effective compute C
    flops_used: float
    mse: dict[str, float | None]  # metric -> MSE against the reference
    adjusted_score: float | None
    mean_multiplier: float
    n_mlps: int
    n_failed: int
    sigma2: dict[str, float | None]  # metric -> mean sigma^2 of the run's own MLPs
    noise_floor: dict[str, float | None]
    sigma2_basis: str = "its own MLPs"
    failures: str | None = None  # what failed, when any MLP did (read from the run's report)

    def matches(self, highlight: str | None) -> bool:
        """``estimator:LABEL``, ``team:NAME`` or a bare name matching either (case-insensitive)."""
        if not highlight:
            return False
        kind, _, value = highlight.partition(":")
        if not value:
            kind, value = "", highlight
        value = value.strip().lower()
        label, team = self.label.lower(), (self.team or "").lower()
        if kind == "estimator":
            return label == value
        if kind == "team":
            return team == value
        return value in (label, team)


@dataclass
class ConvergenceView:
    """The convergence picture of one dataset of one round."""

    dataset_key: str
    round_tag: str | None
    width: int
    depth: int
    budget: float
    charging_floor: float
    flops_per_sample: float
    reference_samples: int
    n_mlps: int
    sigma2: dict[str, float | None]
    noise_floor: dict[str, float | None]
    band: dict[str, pd.DataFrame | None]
    band_n_mlps: int
    band_max_multiple: float | None
    baselines: list[BaselinePoint]
    runs: list[RunPoint]
    notes: list[str] = field(default_factory=list)

    @property
    def has_band(self) -> bool:
        return self.band.get("final") is not None and not self.band["final"].empty

    def run(self, run_id: str) -> RunPoint | None:
        return next((r for r in self.runs if r.run_id == run_id), None)

    def baseline(self, kind: str) -> BaselinePoint | None:
        return next((b for b in self.baselines if b.kind == kind), None)

    @functools.cached_property
    def static_token(self) -> str:
        """What the run-independent part of the picture is drawn from (band tables, baselines, variances).

        Recorded runs change far more often than the rest: a page can keep the rest under this token
        and redraw only the runs.
        """
        tables = {m: None if t is None else int(pd.util.hash_pandas_object(t, index=True).sum())
                  for m, t in self.band.items()}
        parts = (self.dataset_key, self.round_tag, self.width, self.depth, self.budget, self.flops_per_sample,
                 self.reference_samples, self.sigma2, self.noise_floor, self.band_n_mlps, self.band_max_multiple,
                 tables, self.baselines)
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]

    def missing_baselines(self) -> list[str]:
        """Baselines not yet scored on every MLP (what ``band_baselines.missing_baselines`` says, from the view)."""
        return missing_kinds({b.kind: b.n_mlps for b in self.baselines}, self.n_mlps)

    def highlight_options(self) -> list[dict[str, str]]:
        labels = sorted({r.label for r in self.runs if r.label})
        teams = sorted({r.team for r in self.runs if r.team})
        return ([{"label": f"estimator: {v}", "value": f"estimator:{v}"} for v in labels]
                + [{"label": f"team: {v}", "value": f"team:{v}"} for v in teams])

    def compare(self, flops: float, mse: float, metric: str, *, sigma2: float | None = None,
                noise_floor: float | None = None) -> EqualFlopsComparison | None:
        """"x better than sampling at equal FLOPs" for a point, with these MLPs' sigma^2 unless given."""
        sigma2 = sigma2 if sigma2 is not None else self.sigma2.get(metric)
        floor = noise_floor if noise_floor is not None else self.noise_floor.get(metric)
        if not sigma2 or not mse or mse <= 0 or flops <= 0 or floor is None:
            return None
        return compare_with_sampling(flops, mse, mean_sigma2=sigma2, flops_per_sample=self.flops_per_sample,
                                     noise_floor=floor)


def _baseline_point(result: BaselineResult) -> BaselinePoint:
    summaries = {metric: result.summary(metric) for metric in METRICS}
    final = summaries["final"]
    return BaselinePoint(
        kind=result.kind,
        label=result.label,
        flops=final["mean_effective_compute"],
        flops_used=final["mean_flops_used"],
        mse={m: {k: v for k, v in s.items() if k == "mean" or k.startswith("p")} for m, s in summaries.items()},
        n_mlps=final["n_mlps"],
        n_failed=final["n_failed"],
        adjusted_score=final["adjusted_score"],
        mean_multiplier=final["mean_multiplier"],
        source=result.source,
        failures=failures_sentence([failure_kind(e) for e in result.per_mlp]),
    )


def _list_runs(round_tag: str | None) -> list[dict]:
    """The run store's summaries for the round; a missing or unreachable store means no runs."""
    if round_tag is None:
        return []
    try:
        return list(list_runs(round_tag=round_tag))
    except Exception:  # noqa: BLE001 - an unreachable store means no runs, never a broken page
        return []


class _Variances:
    """sigma^2 of any subset of a served dataset's MLPs (final layer; all layers from the band)."""

    def __init__(self, dataset, band: Band | None) -> None:
        self.final = dataset.avg_variances
        self.all = {b.index: b.sigma2("all") for b in band.mlps} if band is not None else {}
        self.reference_samples = dataset.info.n_samples

    def indices(self, metric: str) -> list[int]:
        return list(self.final if metric == "final" else self.all)

    def mean(self, indices: list[int], metric: str) -> float | None:
        table = self.final if metric == "final" else self.all
        values = [table[i] for i in indices if i in table]
        if not values or len(values) < len(indices):
            return None
        return math.fsum(values) / len(values)  # called per run and metric: numpy's overhead dominated


def _run_point(row: dict, variances: dict[str, _Variances], fallback: _Variances) -> RunPoint:
    """A run summary, with sigma^2 of its own MLPs (or of this dataset's when its dataset is not served)."""
    indices = [int(i) for i in row.get("mlp_indices") or []]
    source = variances.get(row.get("dataset_key"))
    basis = source or fallback
    sigma2 = {m: basis.mean(indices if source is not None else basis.indices(m), m) for m in METRICS}
    floor = {m: (v / basis.reference_samples if v is not None else None) for m, v in sigma2.items()}
    stored_floor = finite(row.get("noise_floor"))
    if stored_floor is not None:
        floor["final"] = stored_floor
    effective = finite(row.get("mean_effective_compute")) or finite(row.get("mean_flops_used")) or 0.0
    return RunPoint(
        run_id=str(row.get("run_id")),
        label=str(row.get("estimator_label") or row.get("estimator_kind") or "?"),
        kind=str(row.get("estimator_kind") or ""),
        team=row.get("team"),
        source=str(row.get("source") or ""),
        dataset_key=str(row.get("dataset_key") or ""),
        created_at=str(row.get("created_at") or ""),
        flops=effective,
        flops_used=finite(row.get("mean_flops_used")) or 0.0,
        mse={"final": finite(row.get("final_layer_mse")), "all": finite(row.get("all_layers_mse"))},
        adjusted_score=finite(row.get("adjusted_score")),
        mean_multiplier=finite(row.get("mean_multiplier")) or 1.0,
        n_mlps=int(row.get("n_mlps") or len(indices)),
        n_failed=int(row.get("n_failed") or 0),
        sigma2=sigma2,
        noise_floor=floor,
        sigma2_basis="its own MLPs" if source is not None else f"this dataset's MLPs ({row.get('dataset_key')} "
                                                                  "is not served)",
        failures=_run_failures(row) if int(row.get("n_failed") or 0) else None,
    )


def _run_failures(row: dict) -> str:
    """What failed in a run with failed MLPs, from its stored report (only such runs are read)."""
    n_failed, n_mlps = int(row.get("n_failed") or 0), int(row.get("n_mlps") or 0)
    try:
        report = get_run(str(row.get("run_id"))) or {}
    except Exception:  # noqa: BLE001 - an unreachable store still says how many failed
        report = {}
    per_mlp = (report.get("results") or {}).get("per_mlp") or []
    return failures_sentence([failure_kind(e) for e in per_mlp]) or f"{n_failed} of {n_mlps} MLPs failed"


def _stored_band(dataset, notes: list[str]) -> Band | None:
    """The dataset's band, or None with the reason in ``notes`` when its manifest cannot be read."""
    try:
        return load_band(dataset)
    except BandError as exc:
        notes.append(f"The Monte Carlo band is not drawn: {exc}")
        return None


def _damage_notes(dataset, band: Band | None) -> list[str]:
    """Sentences for every damaged file behind the picture: what is left out, which file, why, and the fix."""
    info = dataset.info
    notes = []
    if dataset.damaged:
        problems = "; ".join(d.problem for d in dataset.damaged.values())
        first = next(iter(dataset.damaged.values()))
        notes.append(f"Damaged MLP(s) of {info.key} left out of the band, sigma^2 and baselines, which are over "
                     f"{dataset.aggregate_basis()}: {problems}. {first.remedy}")
    if band is not None and band.unreadable:
        notes.append(f"{len(band.unreadable)} stored band file(s) are unreadable and left out: "
                     f"{'; '.join(band.unreadable.values())}. Re-run `{recompute_command(dataset)}` to recompute them.")
    if band is not None and band.stale:
        notes.append(f"{len(band.stale)} stored band file(s) were measured against another reference and "
                     f"are left out; re-run `{recompute_command(dataset)}` to recompute them.")
    unreadable = unreadable_files(dataset)
    if unreadable:
        notes.append("Baseline file(s) unreadable and ignored: "
                     + "; ".join(f"{path}: {reason}" for path, reason in unreadable.items())
                     + ". Computing the baselines again rewrites them.")
    return notes


def convergence_view(dataset, *, runs: list[dict] | None = None) -> ConvergenceView:
    """Gather the band, baselines and runs of a dataset's round into one ``ConvergenceView``.

    Damaged files cost only what they hold: a damaged MLP is left out, an
    unreadable band file too, an unreadable band manifest leaves the analytic
    line, baselines and runs; ``notes`` names each file, the reason and the fix.
    """

    info = dataset.info
    notes: list[str] = []
    band = _stored_band(dataset, notes)
    if band is not None:
        plan = band.plan
    else:
        plan = plan_for_dataset(dataset) if info.round is not None else None
    if plan is None:
        raise ValueError(f"dataset {info.key!r} is not a round's shape and has no band; run the band command "
                         "with --budget first")
    tables: dict[str, pd.DataFrame | None] = {m: None for m in METRICS}
    if band is not None and band.mlps:
        tables = {m: band.table(m) for m in METRICS}
        if not band.complete:
            notes.append(f"The band covers {len(band.mlps)} of the dataset's {len(dataset.indices)} readable MLPs; "
                         f"run `{recompute_command(dataset)}` to finish it.")
    elif not notes and not (band is not None and (band.unreadable or band.stale)):  # else said below
        notes.append(f"No Monte Carlo band has been measured for {info.key} yet: only the analytic sigma^2/N "
                     f"line is drawn. Run `{recompute_command(dataset)}`.")
    notes += _damage_notes(dataset, band)
    own = _Variances(dataset, band)
    served = {key: ds for key, ds in served_datasets().items() if ds.info.round_tag == info.round_tag}
    variances = {info.key: own}
    rows = runs if runs is not None else _list_runs(info.round_tag)
    for key in {r.get("dataset_key") for r in rows} - {info.key}:
        if key in served:
            variances[key] = _Variances(served[key], _stored_band(served[key], []))
    sigma2 = {"final": dataset.mean_avg_variance,
              "all": band.mean_sigma2("all") if band is not None and band.mlps else None}
    floors = {m: (s / info.n_samples if s is not None else None) for m, s in sigma2.items()}
    return ConvergenceView(
        dataset_key=info.key,
        round_tag=info.round_tag,
        width=info.width,
        depth=info.depth,
        budget=float(plan.budget),
        charging_floor=0.1 * float(plan.budget),
        flops_per_sample=float(plan.flops_per_sample),
        reference_samples=info.n_samples,
        n_mlps=len(dataset.indices),
        sigma2=sigma2,
        noise_floor=floors,
        band=tables,
        band_n_mlps=len(band.mlps) if band is not None else 0,
        band_max_multiple=plan.max_budget_multiple if band is not None else None,
        baselines=[_baseline_point(r) for r in load_baselines(dataset).values()],
        runs=[_run_point(r, variances, own) for r in rows],
        notes=notes,
    )


# ---------------------------------------------------------------------------
# one view per dataset and data version, per process
# ---------------------------------------------------------------------------

#: Views by (dataset, version): a new version is a new key, old ones age out.
_VIEWS: Region[ConvergenceView] = Region("convergence-views", max_entries=32)


def view_version(dataset) -> str:
    """Everything a dataset's convergence view is computed from, as one token.

    The opened dataset (re-opened when its files change), the run store's
    revision, the band's files and the stored baselines: when
    none of them changed, the view (and any figure drawn from it) is the same,
    so a page view costs a query and a few ``stat`` calls instead of a rebuild.
    """
    try:

        runs = runs_revision()
    except Exception:  # an unreachable store lists no runs; retry on the next call
        runs = "unreachable"
    parts = (dataset.info.key, dataset.info.path, dataset.generation, runs, band_fingerprint(dataset),
             baseline_files_fingerprint(dataset))
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:20]


def cached_convergence_view(dataset) -> tuple[ConvergenceView, str]:
    """``convergence_view(dataset)`` and its version, rebuilt only when the version changes."""
    version = view_version(dataset)
    return _VIEWS.get_or_load((dataset.info.key, version), lambda: convergence_view(dataset)), version


def band_frame(round_tag: str, metric: str = "final") -> pd.DataFrame | None:
    """The band table of a round's reference dataset (the embedded one first), for other pages.

    Datasets in the registry's order for the round (the one rule for which dataset stands for a
    round); None when no band has been computed for any of them.
    """
    for dataset in datasets_for_round(round_tag):
        try:
            band = load_band(dataset)
        except BandError:  # an unreadable band manifest: the convergence page names it; try the next dataset
            continue
        if band is not None and band.mlps:
            return band.table(metric)
    return None
