"""Metered runs: an estimator scored on some of a dataset's MLPs, exactly as the grader scores it.

Every MLP goes through ``whestbench.scoring.evaluate_estimator`` itself, one MLP
per call, so FLOPs, MSEs, fallbacks and failure flags are the grader's by
construction, while the caller still gets progress, cancellation and results as
each MLP finishes. ``aggregate_results`` then folds the per-MLP entries the way
``evaluate_estimator`` folds them over a whole suite (tests hold the two equal).

On top of the grader's fields each MLP carries what a participant needs to read
them honestly: the reference's noise floor (avg_variance / N_ref), the
noise-corrected MSE, what Monte Carlo would reach with the same FLOPs, a plain
sentence for any failure, and the library versions it was metered under.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import flopscope.numpy as fnp
import numpy as np
from whestbench.budget import mc_flops_per_sample, score_multiplier
from whestbench.scoring import (
    ContestData,
    ContestSpec,
    ScoringExhaustionWarning,
    evaluate_estimator,
)
from whestbench.sdk import SetupContext

from whestboard.data import dataset_identity
from whestboard.jobs import CpuWatch, contention_summary
from whestboard.rules import (
    FAILURE_FLAGS,
    FALLBACK,
    aggregate_budget_breakdowns,
    blas_environment,
    failure_kind,
    is_failed,
    judge,
    library_versions,
    load_caused,
    metered_mc_flops_per_sample,
    sampling_mse,
)
from whestboard.scoring import _run_records
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import RunError, check_budget, select_mlps
from whestboard.scoring._rulebook import Rulebook

# Part of every cache key: bumped when the same request would now be scored differently (2: the
# grader's import rule per round applies in the sandbox, so a stored v2 run of a numpy importer is stale;
# 3: each MLP says whether the meter was tampered with, which a stored run did not look for).
SCHEMA = "whestboard.run/3"


# ---------------------------------------------------------------------------
# what a user types: budgets and MLP selections
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# one MLP
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MLPCase:
    """One MLP with its reference: what a single grader call needs."""

    index: int
    mlp: Any  # whestbench.MLP
    all_layer_means: np.ndarray  # float32 (depth, width)
    avg_variance: float
    n_samples: int

    @property
    def noise_floor(self) -> float:
        return self.avg_variance / self.n_samples


class _RecordingEstimator:
    """Passes predict through unchanged and keeps what it returned (for heatmaps and scatter).

    Attributes the grader looks for (``last_predict_stats``,
    ``enforces_wall_time_limit``) are forwarded only when the wrapped estimator
    has them, so ``evaluate_estimator`` treats the pair exactly as the original.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.returned: Any = None

    def predict(self, mlp, budget: int):
        self.returned = None
        self.returned = self._inner.predict(mlp, budget)
        return self.returned

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def contest_data(cases: list[MLPCase], rulebook: Rulebook) -> ContestData:
    """The grader's ``ContestData`` for these MLPs and references."""
    first = cases[0]
    spec = rulebook.contest_spec(
        width=first.mlp.width, depth=first.mlp.depth, n_mlps=len(cases), n_samples=first.n_samples
    )
    return ContestData(
        spec=spec,
        mlps=[c.mlp for c in cases],
        all_layer_targets=[fnp.asarray(c.all_layer_means, dtype=fnp.float32) for c in cases],
        final_targets=[fnp.asarray(c.all_layer_means[-1], dtype=fnp.float32) for c in cases],
        avg_variances=[float(c.avg_variance) for c in cases],
    )


def failure_reason(entry: dict, rulebook: Rulebook) -> str | None:
    """One sentence a participant can act on, or None for a valid MLP (the one failure vocabulary)."""
    return judge(entry, rulebook)[1]


def _honesty_fields(entry: dict, case: MLPCase, mc_per_sample: int) -> dict:
    """Noise floor, corrected MSE and the Monte Carlo equivalent, for one MLP."""
    floor = case.noise_floor
    corrected = max(0.0, float(entry["final_layer_mse"]) - floor)
    flops = float(entry["flops_used"])
    mc_samples = flops / mc_per_sample if flops > 0 else 0.0
    return {
        "avg_variance": case.avg_variance,
        "n_reference_samples": case.n_samples,
        "noise_floor": floor,
        "final_layer_mse_corrected": corrected,
        "below_noise_floor": corrected < floor,
        "mc_samples_at_same_flops": mc_samples,
        "mc_mse_at_same_flops": sampling_mse(flops, case.avg_variance, mc_per_sample) if flops > 0 else None,
    }


def score_case(
    estimator: Any, case: MLPCase, rulebook: Rulebook, *, mc_per_sample: int | None = None
) -> tuple[dict, np.ndarray]:
    """Score one MLP through ``evaluate_estimator``; returns (per-MLP entry, predictions scored).

    The entry has every field the grader reports (``mlp_index`` is the dataset
    index), then Whestboard's: failure sentence, multiplier, noise floor,
    corrected MSE, Monte Carlo equivalent and versions. The predictions are the
    ones the MSEs were computed from: the zero fallback when the MLP failed.
    """
    recorder = _RecordingEstimator(estimator)
    data = contest_data([case], rulebook)
    with CpuWatch(helper_pid=_helper_pid(estimator)) as watch:
        results = evaluate_estimator(recorder, data)
    entry = dict(results["per_mlp"][0])
    entry["mlp_index"] = case.index
    failed = is_failed(entry)
    depth, width = case.all_layer_means.shape
    if failed or recorder.returned is None:
        predictions = np.zeros((depth, width), dtype=np.float32)
    else:
        predictions = np.array(fnp.asarray(recorder.returned, dtype=fnp.float32), dtype=np.float32)
    per_sample = mc_per_sample or mc_flops_per_sample(width, depth, dtype_aware_billing=rulebook.dtype_aware_billing)
    entry.update(scoring_wall_s=watch.wall_s, cpu_wait_s=watch.waited_s)  # read by the failure sentence
    entry.update(_predict_wait(estimator, entry))
    entry.update(
        failed=failed,
        failure_reason=failure_reason(entry, rulebook),
        fallback=FALLBACK if failed else None,
        score_multiplier=score_multiplier(entry["effective_compute"], rulebook.flop_budget, failed=failed),
        estimator_seed=int(case.mlp.seed),
        **_honesty_fields(entry, case, per_sample),
        scoring_wall_s=watch.wall_s,
        cpu_wait_s=watch.waited_s,
        meter_tampering=meter_tampering(estimator),
        **library_versions(),
    )
    return entry, predictions


def _predict_wait(estimator: Any, entry: dict) -> dict:
    """``predict_wait_s``: predict's wall time not spent on the sandbox worker's CPU (its own count), when known.

    Narrower than ``cpu_wait_s`` (the whole scoring call, hand-over included): the wait that can have
    pushed predict's wall or residual time over a cap.
    """
    cpu = _last_predict_stats(estimator).get("cpu_s")
    if cpu is None:
        return {}
    return {"predict_wait_s": max(0.0, float(entry.get("wall_time_s") or 0.0) - float(cpu))}


def meter_tampering(estimator: Any) -> str | None:
    """What the sandbox saw make flopscope count less in the last predict (None: nothing seen, or not sandboxed).

    A flag beside the grader's verdict, never a change to it: the MLP keeps the score the grader gives.
    """
    seen = _last_predict_stats(estimator).get("meter_tampering")
    return str(seen) if seen else None


def _last_predict_stats(estimator: Any) -> dict:
    """The sandbox worker's own account of the last predict; empty for an estimator run in this process."""
    stats_of = getattr(estimator, "last_predict_stats", None)
    stats = stats_of() if callable(stats_of) else None
    return stats if isinstance(stats, dict) else {}


def _helper_pid(estimator: Any) -> int | None:
    """The sandbox worker's pid when the estimator runs in one (its CPU is the run's CPU too)."""
    worker = getattr(estimator, "worker", None)
    pid = getattr(worker, "pid", None)
    return pid if isinstance(pid, int) else None


# ---------------------------------------------------------------------------
# many MLPs
# ---------------------------------------------------------------------------


def aggregate_results(per_mlp: list[dict], *, flop_budget: int, depth: int) -> dict:
    """Suite-level results from per-MLP entries, computed as ``evaluate_estimator`` computes them.

    Same operations in the same order (flopscope means, float32 per-layer
    average, the grader's multiplier and failure test), so a run split into
    single-MLP calls reports what one call over all of them would.
    """
    primary = [float(e["adjusted_final_layer_score"]) for e in per_mlp]
    secondary = [float(e["all_layers_mse"]) for e in per_mlp]
    final = [float(e["final_layer_mse"]) for e in per_mlp]
    per_layer = [e["per_layer_mse"] for e in per_mlp]
    computes = [float(e.get("effective_compute", 0.0)) for e in per_mlp]
    multipliers = [score_multiplier(c, flop_budget, failed=is_failed(e)) for c, e in zip(computes, per_mlp, strict=True)]
    utilizations = [(c / float(flop_budget)) if flop_budget > 0 else 0.0 for c in computes]
    breakdowns = [e["breakdowns"]["estimator"] for e in per_mlp if (e.get("breakdowns") or {}).get("estimator")]
    return {
        "adjusted_final_layer_score": float(fnp.mean(fnp.asarray(primary))) if primary else float("inf"),
        "final_layer_mse": float(fnp.mean(fnp.asarray(final))) if final else float("inf"),
        "all_layers_mse": float(fnp.mean(fnp.asarray(secondary))) if secondary else float("inf"),
        "per_layer_mse": [float(x) for x in fnp.mean(fnp.asarray(per_layer, dtype=fnp.float32), axis=0)]
        if per_layer
        else [float("inf")] * depth,
        "best_mlp_adjusted_final_layer_score": min(primary) if primary else float("inf"),
        "worst_mlp_adjusted_final_layer_score": max(primary) if primary else float("inf"),
        "mean_score_multiplier": (sum(multipliers) / len(multipliers)) if multipliers else 1.0,
        "mean_compute_utilization": (sum(utilizations) / len(utilizations)) if utilizations else 0.0,
        "n_failed_mlps": sum(1 for e in per_mlp if is_failed(e)),
        "mean_effective_compute": (sum(computes) / len(computes)) if computes else 0.0,
        "failure_breakdown": {
            **{flag: sum(1 for e in per_mlp if bool(e.get(flag))) for flag in FAILURE_FLAGS},
            "error": sum(1 for e in per_mlp if bool(e.get("error_code"))),
        },
        "per_mlp": per_mlp,
        "breakdowns": {"sampling": None, "estimator": aggregate_budget_breakdowns(breakdowns)},
    }


def cases_from_dataset(dataset, indices: list[int]) -> Iterator[MLPCase]:
    """MLPs built one at a time, so a 1024 x 16 suite never holds every weight tensor at once."""
    for index in indices:
        means, avg_variance = dataset.truth(index)
        yield MLPCase(index, dataset.mlp(index), means, avg_variance, dataset.info.n_samples)


ProgressFn = Callable[[int, int, dict], None]


@dataclass
class RunRequest:
    """What to run: an estimator on some of a dataset's MLPs under a rulebook."""

    dataset: Any  # whestboard.data._datasets.Dataset
    indices: list[int]
    estimator: EstimatorHandle
    rulebook: Rulebook
    source: str = "lab"
    team: str | None = None
    rescore_of: str | None = None  # the run this one re-scores under the installed versions

    def __post_init__(self) -> None:
        """Bounded here, whoever built the request: the MLPs against the dataset, the budget against B."""
        self.indices = select_mlps(self.dataset, self.indices)
        if self.rulebook.custom_budget:
            check_budget(float(self.rulebook.flop_budget), self.rulebook.round_budget)

    @property
    def cost_flops(self) -> float:
        """The most work the run may do, estimated before it starts: its MLPs times each one's FLOP budget."""
        return float(len(self.indices)) * float(self.rulebook.flop_budget)


@dataclass
class RunOutcome:
    """A finished (or cancelled) run: the report and the predictions behind it."""

    report: dict
    predictions: dict[int, np.ndarray] = field(default_factory=dict)
    cancelled: bool = False
    cached: bool = False

    @property
    def run_id(self) -> str | None:
        return self.report.get("run_id")


def cache_key(request: RunRequest) -> str:
    """Dataset + MLPs + estimator code + budget + round rules + library versions, hashed.

    Library versions are in because flopscope releases move FLOP prices: the same
    code on a new flopscope is a different measurement.
    """
    dataset = dataset_identity(request.dataset, request.indices)
    dataset.pop("round_tag")  # the rulebook names the round: keys of runs stored before still match
    payload = {
        "dataset": dataset,
        "mlps": list(request.indices),
        "estimator": {k: v for k, v in request.estimator.describe().items() if k != "description"},
        "rulebook": dataclasses.asdict(request.rulebook),
        "versions": {k: v for k, v in library_versions().items() if k != "numpy_version"},
        "schema": SCHEMA,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _start_estimator(handle: EstimatorHandle, spec: ContestSpec) -> tuple[Any, float | None]:
    """The estimator, built and set up, with setup()'s wall time (None: it has no setup()).

    A sandboxed estimator's is the worker's own measure of setup() (``StartInfo.setup_s``): the time around
    the call here also holds the worker's start and imports, which the grader's setup limit does not count.
    """
    try:
        estimator = handle.factory()
    except Exception as exc:
        raise RunError(f"could not build estimator {handle.label}: {type(exc).__name__}: {exc}") from exc
    setup = getattr(estimator, "setup", None)
    setup_wall_s = None
    if callable(setup):
        context = SetupContext(
            width=spec.width,
            depth=spec.depth,
            flop_budget=spec.flop_budget,
            api_version="1.0",
            submission_dir=handle.submission_dir,
            seed=0,
        )
        began = time.perf_counter()
        try:
            setup(context)
        except Exception as exc:
            raise RunError(f"{handle.label}: setup() raised {type(exc).__name__}: {exc}") from exc
        setup_wall_s = time.perf_counter() - began
        own = getattr(getattr(estimator, "started", None), "setup_s", None)
        setup_wall_s = float(own) if own else setup_wall_s
    return estimator, setup_wall_s


def score_one(handle: EstimatorHandle, case: MLPCase, rulebook: Rulebook) -> tuple[dict, np.ndarray]:
    """One estimator on one MLP that belongs to no dataset (the playground's): set up, scored through
    ``score_case`` as a run scores each MLP, torn down."""
    _quiet_exhaustion_warnings()
    spec = rulebook.contest_spec(width=case.mlp.width, depth=case.mlp.depth, n_mlps=1, n_samples=case.n_samples)
    estimator, setup_wall_s = _start_estimator(handle, spec)
    try:
        entry, predicted = score_case(estimator, case, rulebook)
    finally:
        _stop_estimator(estimator)
    return {**entry, "setup_wall_s": setup_wall_s}, predicted


def captured_output(estimator: Any) -> dict | None:
    """What a sandboxed estimator printed (stdout and stderr, bounded as the sandbox keeps it); None in-process."""
    capture = getattr(estimator, "output", None)
    if capture is None or not callable(getattr(capture, "text", None)):
        return None
    return {"text": capture.text(), "bytes": int(capture.total), "truncated": bool(capture.truncated)}


def _stop_estimator(estimator: Any) -> None:
    for name in ("teardown", "close"):
        hook = getattr(estimator, name, None)
        if callable(hook):
            try:
                hook()
            except Exception:  # a failing cleanup must not lose finished results
                pass


def mc_reference(per_mlp: list[dict], rulebook: Rulebook, width: int, depth: int, final_mse: float,
                 adjusted_score: float) -> dict:
    """MC@B for these MLPs (their own mean avg_variance) and how far the run is from it."""
    per_sample = mc_flops_per_sample(width, depth, dtype_aware_billing=rulebook.dtype_aware_billing)
    mean_var = float(np.mean([e["avg_variance"] for e in per_mlp])) if per_mlp else float("nan")
    samples = rulebook.flop_budget / per_sample
    mc_at_b = mean_var / samples if mean_var > 0 else None
    return {
        "mc_flops_per_sample": per_sample,
        "metered_mc_flops_per_sample": metered_mc_flops_per_sample(width, depth),
        "mc_samples_at_budget": samples,
        "mean_avg_variance": mean_var,
        "mc_at_budget": mc_at_b,
        "score_vs_mc": (mc_at_b / adjusted_score) if mc_at_b and adjusted_score > 0 else None,
        "final_mse_vs_mc": (mc_at_b / final_mse) if mc_at_b and final_mse > 0 else None,
    }


def build_report(request: RunRequest, per_mlp: list[dict], *, key: str, started: float,
                 finished: float, cancelled: bool = False, environment: dict | None = None) -> dict:
    """The run as stored and served: grader-shaped ``results`` plus Whestboard's context.

    ``environment`` is the BLAS predict ran with (the sandbox worker's own, for a participant's code);
    this process's when not given.
    """
    info = request.dataset.info
    rb = request.rulebook
    results = aggregate_results(per_mlp, flop_budget=rb.flop_budget, depth=info.depth)
    floors = [e["noise_floor"] for e in per_mlp]
    floor = float(np.mean(floors)) if floors else float("nan")
    corrected = max(0.0, results["final_layer_mse"] - floor) if floors else float("nan")
    versions = library_versions()
    return {
        "schema": SCHEMA,
        "run_id": None,
        "cache_key": key,
        "created_at": datetime.fromtimestamp(finished, UTC).isoformat(),
        "source": request.source,
        "team": request.team,
        "complete": not cancelled and len(per_mlp) == len(request.indices),
        "dataset": {
            "key": info.key,
            "path": str(info.path),
            "format": info.format,
            "round_tag": info.round_tag,
            "width": info.width,
            "depth": info.depth,
            "n_samples": info.n_samples,
            "n_mlps": info.n_mlps,
            "seed_protocol": info.seed_protocol,
        },
        "rescore_of": request.rescore_of,
        "mlp_indices": list(request.indices),
        "estimator": request.estimator.describe(),
        "rulebook": rb.as_dict(),
        "results": results,
        "noise": {
            "n_reference_samples": info.n_samples,
            "noise_floor": floor,
            "final_layer_mse_corrected": corrected,
            "below_noise_floor": bool(corrected < floor) if floors else False,
            "n_mlps_below_noise_floor": sum(1 for e in per_mlp if e["below_noise_floor"]),
        },
        "mc_reference": mc_reference(per_mlp, rb, info.width, info.depth, results["final_layer_mse"],
                                     results["adjusted_final_layer_score"]),
        "machine": contention_summary(per_mlp, rb),
        "environment": environment or blas_environment(),
        "versions": versions,
        "run_config": {
            "n_mlps": len(request.indices),
            "width": info.width,
            "depth": info.depth,
            "seed": None,
            "flop_budget": rb.flop_budget,
            "setup_timeout_s": 5.0,
            "wall_time_limit_s": rb.wall_time_limit_s,
            "residual_wall_time_limit_s": rb.residual_wall_time_limit_s,
            "lambda_flops_per_second": rb.lambda_flops_per_second,
            "dataset": {"path": str(info.path), "key": info.key, "n_mlps": info.n_mlps},
        },
        "run_meta": {
            "run_started_at_utc": datetime.fromtimestamp(started, UTC).isoformat(),
            "run_finished_at_utc": datetime.fromtimestamp(finished, UTC).isoformat(),
            "run_duration_s": finished - started,
        },
    }


_quieted = False


def _quiet_exhaustion_warnings() -> None:
    """evaluate_estimator warns for every exhausted MLP; a run reports the same fact in its results.

    A process-wide filter (``catch_warnings`` is not thread-safe and two runs may score at once),
    installed by the first run a process scores rather than by importing this module.
    """
    global _quieted
    if not _quieted:
        warnings.filterwarnings("ignore", category=ScoringExhaustionWarning)
        _quieted = True


def execute(
    request: RunRequest,
    *,
    on_progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    key: str | None = None,
) -> RunOutcome:
    """Score every selected MLP, one grader call each; progress after each, cancel between them."""
    _quiet_exhaustion_warnings()
    info = request.dataset.info
    spec = request.rulebook.contest_spec(
        width=info.width, depth=info.depth, n_mlps=len(request.indices), n_samples=info.n_samples
    )
    mc_per_sample = mc_flops_per_sample(info.width, info.depth, dtype_aware_billing=request.rulebook.dtype_aware_billing)
    started = time.time()
    per_mlp: list[dict] = []
    predictions: dict[int, np.ndarray] = {}
    cancelled = False
    estimator, setup_wall_s = _start_estimator(request.estimator, spec)
    try:
        for case in cases_from_dataset(request.dataset, request.indices):
            if should_cancel is not None and should_cancel():
                cancelled = True
                break
            entry, predicted = score_case(estimator, case, request.rulebook, mc_per_sample=mc_per_sample)
            per_mlp.append(entry)
            predictions[case.index] = predicted
            if on_progress is not None:
                on_progress(len(per_mlp), len(request.indices), entry)
    finally:
        _stop_estimator(estimator)
    started_info = getattr(estimator, "started", None)
    report = build_report(request, per_mlp, key=key or cache_key(request), started=started,
                          finished=time.time(), cancelled=cancelled,
                          environment=getattr(started_info, "environment", None))
    report["setup_wall_s"] = setup_wall_s  # once per run, as the grader runs setup() once per worker
    report["estimator_output"] = captured_output(estimator)
    report["missing_files"] = getattr(estimator, "missing_files", None)  # what it reached for and did not get
    return RunOutcome(report, predictions, cancelled=cancelled)


#: How many times a kept result's MLP is scored before a failure the rules attribute to waiting is refused.
LOAD_ATTEMPTS = 3


class LoadCausedFailure(RunError):
    """Results meant to be kept (a shipped baseline, a sweep's submission) refused: MLPs failed a time rule
    only because the machine was busy (``rules.load_caused``), on every attempt."""

    def __init__(self, request: RunRequest, entries: list[dict], attempts: int) -> None:
        self.entries = entries
        self.indices = [int(e["mlp_index"]) for e in entries]
        kinds = ", ".join(sorted({failure_kind(e, request.rulebook) or "?" for e in entries}))
        try:
            load = f"; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
        except OSError:
            load = ""
        super().__init__(
            f"{request.estimator.label} on {request.dataset.info.key}: MLP(s) {', '.join(map(str, self.indices))} "
            f"failed a time rule ({kinds}) on each of {attempts} attempts, and the rules attribute it to waiting "
            f"for a core{load}. Nothing of them was kept: a busy machine's failure is not a result. Run again on a "
            "quiet machine (load average under 1); the MLPs already kept are not scored again.")


def execute_for_keeps(
    request: RunRequest,
    *,
    on_progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    attempts: int = LOAD_ATTEMPTS,
) -> RunOutcome:
    """``execute`` for results kept as data: a load accident is scored again, never kept.

    An MLP whose failure the rules attribute to waiting (``rules.load_caused``: a time rule it would have
    met without the time it spent not computing) is scored again, up to ``attempts`` times in all; when it
    still is, ``LoadCausedFailure`` names it. ``on_progress`` sees only entries that are kept, so a caller
    that saves after each MLP never writes a load accident; the report is built over the kept entries, in
    the request's MLP order, as one ``execute`` would have built it.
    """
    kept: dict[int, dict] = {}
    accidents: dict[int, dict] = {}  # the latest attempt's load accidents
    predictions: dict[int, np.ndarray] = {}
    started = time.time()

    def keep(_done: int, _total: int, entry: dict) -> None:
        index = int(entry["mlp_index"])
        if load_caused(entry, request.rulebook):
            accidents[index] = entry
            return
        accidents.pop(index, None)
        kept[index] = entry
        if on_progress is not None:
            on_progress(len(kept), len(request.indices), entry)

    pending = list(request.indices)
    for _ in range(max(1, attempts)):
        outcome = execute(dataclasses.replace(request, indices=pending), on_progress=keep,
                          should_cancel=should_cancel)
        predictions.update({i: p for i, p in outcome.predictions.items() if i in kept})
        pending = [i for i in pending if i in accidents]
        if outcome.cancelled or not pending:
            break
    if pending and not outcome.cancelled:
        raise LoadCausedFailure(request, [accidents[i] for i in pending], max(1, attempts))
    per_mlp = [kept[i] for i in request.indices if i in kept]
    built = build_report(request, per_mlp, key=cache_key(request), started=started, finished=time.time(),
                         cancelled=outcome.cancelled, environment=outcome.report.get("environment"))
    # what execute adds beside the built report (the estimator's output, missing files, ...) comes from the last
    # attempt; everything built from the MLPs is built again over the kept ones
    return RunOutcome({**outcome.report, **built}, predictions, cancelled=outcome.cancelled)


def run_and_record(
    request: RunRequest,
    *,
    use_cache: bool = True,
    record: bool = True,
    on_progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> RunOutcome:
    """A run as the app and CLI do it: served from the store when identical, else scored and recorded."""

    key = cache_key(request)
    if use_cache:
        cached = _run_records.find_cached(key)
        if cached is not None:
            report = _run_records.get_run(cached)
            if report is not None:
                if on_progress is not None:
                    for done, entry in enumerate(report["results"]["per_mlp"], start=1):
                        on_progress(done, len(request.indices), entry)
                return RunOutcome(report, _run_records.get_run_predictions(cached), cached=True)
    outcome = execute(request, on_progress=on_progress, should_cancel=should_cancel, key=key)
    if record and outcome.report["complete"]:
        _run_records.record_run(outcome.report, predictions=outcome.predictions)
    return outcome


def operation_flops(breakdown: dict | None) -> dict[str, int]:
    """Flat ``operation -> FLOPs`` from a (normalised) flopscope breakdown, largest first."""
    totals: dict[str, int] = {}
    for bucket in ((breakdown or {}).get("by_namespace") or {}).values():
        for op, info in (bucket.get("operations") or {}).items():
            totals[op] = totals.get(op, 0) + int(info.get("flop_cost", 0))
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def layer_comparison(report: dict, predictions: dict[int, np.ndarray], dataset, layer: int) -> dict:
    """Predicted and true means of one layer for every MLP of a run (for heatmap and scatter)."""
    rows = []
    for entry in report["results"]["per_mlp"]:
        index = int(entry["mlp_index"])
        if index not in predictions:
            continue
        truth, _ = dataset.truth(index)
        rows.append((index, entry.get("mlp_name", ""), predictions[index][layer], truth[layer]))
    return {
        "layer": layer,
        "indices": [r[0] for r in rows],
        "names": [r[1] for r in rows],
        "predicted": np.stack([r[2] for r in rows]) if rows else np.zeros((0, 0)),
        "truth": np.stack([r[3] for r in rows]) if rows else np.zeros((0, 0)),
    }
