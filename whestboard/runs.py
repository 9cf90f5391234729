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
import itertools
import json
import math
import numbers
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import flopscope.numpy as fnp
import numpy as np
from whestbench.budget import CURRENT_ROUND, mc_flops_per_sample, score_multiplier
from whestbench.scoring import (
    ContestData,
    ContestSpec,
    ScoringExhaustionWarning,
    _aggregate_budget_breakdowns,
    evaluate_estimator,
)
from whestbench.sdk import SetupContext

from whestboard import contention
from whestboard.datasets import MLPDamaged
from whestboard.estimators import EstimatorHandle, metered_dtype_aware_billing, metered_mc_flops_per_sample
from whestboard.rounds import get_round
from whestboard.versions import library_versions

SCHEMA = "whestboard.run/1"
FALLBACK = "scored as the all-zero prediction with multiplier 1.0 (the grader's fallback)"
FAILURE_FLAGS = ("budget_exhausted", "time_exhausted", "residual_wall_time_exhausted", "combined_budget_exhausted")
TIMING_FIELDS = ("wall_time_s", "flopscope_backend_time_s", "flopscope_overhead_time_s", "residual_wall_time_s")

# evaluate_estimator warns for every exhausted MLP; runs report the same fact in
# their results. A process-wide filter, because ``catch_warnings`` is not
# thread-safe and two runs may score at once.
warnings.filterwarnings("ignore", category=ScoringExhaustionWarning)


class RunError(ValueError):
    """A run that cannot start (bad MLP selection, estimator setup failed); says what to change."""


# ---------------------------------------------------------------------------
# the rulebook a run is scored under
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rulebook:
    """One round's settings, restored together, with the budget optionally overridden."""

    round_tag: str
    flop_budget: int
    round_budget: int
    wall_time_limit_s: float | None
    residual_wall_time_limit_s: float | None
    lambda_flops_per_second: float
    residual_mode: str
    dtype_aware_billing: bool

    @property
    def custom_budget(self) -> bool:
        return self.flop_budget != self.round_budget

    @property
    def charging_floor(self) -> float:
        return 0.1 * self.flop_budget

    @property
    def metered_dtype_aware_billing(self) -> bool:
        return metered_dtype_aware_billing()

    @property
    def billing_note(self) -> str | None:
        """Why this run's FLOPs can differ from what the round's own grader charged, if they can."""
        if self.dtype_aware_billing == self.metered_dtype_aware_billing:
            return None
        flopscope_version = library_versions()["flopscope_version"]
        if not self.dtype_aware_billing:
            return (
                f"{self.round_tag} was graded before flopscope 0.9, when float64 cost the same as float32 and "
                f"float32->float64 casts were free. flopscope {flopscope_version} keeps dtype rates in one "
                "process-wide table (flopscope._weights), not on a BudgetContext, and even with unit rates it "
                "still bills each cast 1 FLOP per element; so this run is metered with dtype-aware billing. "
                "float32-only estimators are unaffected; float64 work costs more here than the round charged."
            )
        return (
            f"{self.round_tag} bills float64 at twice float32, but the installed flopscope {flopscope_version} "
            "does not; float64 work costs less here than the round charged."
        )

    def contest_spec(self, *, width: int, depth: int, n_mlps: int, n_samples: int) -> ContestSpec:
        spec = ContestSpec(
            width=width,
            depth=depth,
            n_mlps=n_mlps,
            flop_budget=self.flop_budget,
            ground_truth_samples=n_samples,
            wall_time_limit_s=self.wall_time_limit_s,
            residual_wall_time_limit_s=self.residual_wall_time_limit_s,
            lambda_flops_per_second=self.lambda_flops_per_second,
        )
        spec.validate()
        return spec

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(
            custom_budget=self.custom_budget,
            charging_floor=self.charging_floor,
            metered_dtype_aware_billing=self.metered_dtype_aware_billing,
            billing_note=self.billing_note,
        )
        return out


def rulebook_for(round_tag: str | None, budget: int | None = None) -> Rulebook:
    """The round's full rulebook (the current round when none is known), budget overridable."""
    cfg = get_round(round_tag).config if round_tag else CURRENT_ROUND
    if budget is not None:
        check_budget(_budget_value(budget, int(cfg.flop_budget)), int(cfg.flop_budget))
    return Rulebook(
        round_tag=cfg.tag,
        flop_budget=int(budget) if budget is not None else int(cfg.flop_budget),
        round_budget=int(cfg.flop_budget),
        wall_time_limit_s=cfg.wall_time_limit_s,
        residual_wall_time_limit_s=cfg.residual_wall_time_limit_s,
        lambda_flops_per_second=float(cfg.lambda_flops_per_second),
        residual_mode=cfg.residual_mode,
        dtype_aware_billing=bool(cfg.dtype_aware_billing),
    )


# ---------------------------------------------------------------------------
# what a user types: budgets and MLP selections
# ---------------------------------------------------------------------------

#: A budget above this many times the round's B is refused. The grader grants exactly B, the
#: convergence band is measured to 4 x B, and no predict could spend 1000 x B (6.8e13 FLOPs at
#: v1-warmup, 2.2e15 at v2-phase2) inside the round's 60-120 s wall cap; the cap also keeps every
#: budget far inside the run store's 64-bit integer column.
MAX_BUDGET_MULTIPLE = 1000
#: The longest budget text read: a budget is a number, never a kilobyte.
MAX_BUDGET_CHARS = 64
BUDGET_HELP = "write FLOPs (2.2e12, 2**41, 68_000_000_000) or a multiple of the round's B (0.5B); empty means B"
SELECTION_HELP = "write indices such as 0:8, 3 or 0,2,5 (start:stop[:step], stop excluded); empty means all"
#: Characters a selection may use per MLP of the dataset: every MLP listed once, with spaces.
SELECTION_CHARS_PER_MLP = 16

_DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_MULTIPLE_OF_B = re.compile(rf"([+-]?{_DECIMAL})?\s*[bB]")
_POWER = re.compile(rf"({_DECIMAL})\s*\*\*\s*([+-]?{_DECIMAL})")
_PLAIN = re.compile(rf"[+-]?(?:{_DECIMAL}|inf|infinity|nan)", re.IGNORECASE)  # float() reads it
_INDEX = re.compile(r"\+?[0-9]{1,40}")


def quoted(value: object, limit: int = 40) -> str:
    """``repr`` of what a user sent, cut to ``limit`` characters so a message never echoes a megabyte."""
    if isinstance(value, int) and value.bit_length() > 4 * limit:  # repr() refuses past 4300 digits
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    return repr(text[:limit]) + f"… ({len(text):,} characters)"


def check_budget(value: float, round_budget: int, *, shown: str | None = None) -> None:
    """Refuse a budget that is not a number, below 1 FLOP or above MAX_BUDGET_MULTIPLE x B, saying why."""
    shown = shown or quoted(value)
    cap = MAX_BUDGET_MULTIPLE * round_budget
    if math.isnan(value):
        raise RunError(f"budget per MLP {shown} is not a number: {BUDGET_HELP}")
    if value < 1:
        raise RunError(f"budget per MLP {shown} is below 1 FLOP: write a positive budget such as 2.2e12 or 0.5B")
    if value > cap:
        size = "more than 1e300" if math.isinf(value) else f"{value:.3g}"
        raise RunError(
            f"budget per MLP {shown} is {size} FLOPs, above the most a run accepts, {MAX_BUDGET_MULTIPLE} x B = "
            f"{cap:.3g} FLOPs (the grader grants B = {round_budget:.3g}; no predict could spend more within the "
            f"round's wall cap): write at most {MAX_BUDGET_MULTIPLE}B, e.g. 2B or {2 * round_budget:.3g}"
        )


def parse_budget(text: str | int | float | None, round_budget: int) -> int | None:
    """``None``/"" -> None (the round's); "2.2e12", "2**41", "68_000_000_000" or "0.5B" -> FLOPs.

    Sizes are bounded before anything is computed: the text's length, and for a
    power its magnitude ``exp * log10(base)``, so "2**99999999" is refused without
    building the number. Accepted budgets lie in [1, MAX_BUDGET_MULTIPLE x B].
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    value = _budget_value(text, round_budget)
    check_budget(value, round_budget, shown=quoted(text))
    return int(round(value))


def _budget_value(text: object, round_budget: int) -> float:
    """What a text or JSON number names, as a float (inf when beyond 1e300, nan when undefined)."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise RunError(f"budget per MLP {quoted(text)} is not a number: {BUDGET_HELP}")
    if isinstance(text, int):
        return float(text) if text.bit_length() < 1000 else math.inf
    if isinstance(text, float):
        return text
    if len(text) > MAX_BUDGET_CHARS:
        raise RunError(f"budget per MLP {quoted(text)} is too long to be a budget: {BUDGET_HELP}")
    raw = text.strip().replace("_", "").replace(",", "")
    if match := _MULTIPLE_OF_B.fullmatch(raw):
        return (float(match.group(1)) if match.group(1) else 1.0) * round_budget  # a float overflow is inf
    if match := _POWER.fullmatch(raw):
        return _bounded_power(float(match.group(1)), float(match.group(2)))
    if _PLAIN.fullmatch(raw):
        return float(raw)
    raise RunError(f"cannot read budget per MLP {quoted(text)}: {BUDGET_HELP}")


def _bounded_power(base: float, exponent: float) -> float:
    """``base ** exponent`` when it is within 1e-300..1e300; inf above, 0 below, judged from the logarithm."""
    if base == 0 or base == 1:
        return float(base) if exponent > 0 or base == 1 else math.nan
    magnitude = exponent * math.log10(base)  # base > 0: the grammar has no sign on it
    if math.isnan(magnitude) or magnitude > 300:
        return math.inf
    return base**exponent if magnitude > -300 else 0.0


def parse_mlp_selection(text: str | int | Iterable[int] | None, available: list[int]) -> list[int]:
    """"0:8", "3", "0,2,5", "0:4,7" (or a list) -> sorted dataset indices; all when empty.

    Ranges are checked against the dataset's indices by arithmetic and never
    expanded past its last index, so memory is O(MLPs selected) whatever the
    numbers: "0:100000000" on a 32-MLP dataset is refused at once, naming the MLPs
    it lacks. No selection needs more comma parts (or list entries) than the
    dataset has MLPs, nor more than SELECTION_CHARS_PER_MLP characters per MLP.
    """
    if text is None or (isinstance(text, str) and not text.strip()):
        return list(available)
    if not available:
        raise RunError("this dataset has no MLPs to select")
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if isinstance(text, str):
        spans = _selection_spans(text, len(available))
    elif isinstance(text, Iterable) and not isinstance(text, (bytes, dict)):
        spans = [(i, i + 1, 1) for i in _selection_list(text, len(available))]
    else:
        raise RunError(f"cannot read MLP selection {quoted(text)}: {SELECTION_HELP}")
    return _select(spans, available)


Span = tuple[int, int | None, int]  # start, stop (None: to the dataset's end), step


def select_mlps(dataset, selection: str | int | Iterable[int] | None) -> list[int]:
    """The MLPs of ``dataset`` a user's selection names; empty means every readable one.

    Checked against every MLP the dataset holds, so a damaged one is refused with its file, reason and
    fix (``MLPDamaged``) rather than reported missing, before any work starts.
    """
    if selection is None or (isinstance(selection, str) and not selection.strip()):
        return list(dataset.indices)
    chosen = parse_mlp_selection(selection, dataset.held_indices)
    try:
        dataset.refuse_damaged(chosen)
    except MLPDamaged as exc:
        raise RunError(str(exc)) from exc
    return chosen


def _selection_spans(text: str, n_mlps: int) -> list[Span]:
    max_chars = SELECTION_CHARS_PER_MLP * n_mlps + 64
    if len(text) > max_chars:
        raise RunError(f"the MLP selection is {len(text):,} characters long, more than the {max_chars:,} that "
                       f"can name this dataset's {n_mlps} MLPs: {SELECTION_HELP}")
    parts = text.split(",", n_mlps)
    if len(parts) > n_mlps:
        raise RunError(f"the MLP selection has more than {n_mlps:,} comma-separated parts but the dataset has only "
                       f"{n_mlps:,} MLPs: {SELECTION_HELP}")
    return [_selection_part(part.replace(" ", "")) for part in parts if part.strip()]


def _selection_part(part: str) -> Span:
    """One comma part, "3" or "start:stop[:step]", as numbers (nothing is enumerated here)."""
    pieces = part.split(":", 3)
    if len(pieces) > 3 or not all(p == "" or _INDEX.fullmatch(p) for p in pieces):
        if any(p.startswith("-") and _INDEX.fullmatch(p[1:]) for p in pieces):
            raise RunError(f"MLP selection part {quoted(part)} has a negative number: indices and steps count up "
                           f"from 0 (no counting from the end): {SELECTION_HELP}")
        raise RunError(f"cannot read MLP selection part {quoted(part)}: {SELECTION_HELP}")
    if len(pieces) == 1:
        return int(pieces[0]), int(pieces[0]) + 1, 1
    start = int(pieces[0]) if pieces[0] else 0
    stop = int(pieces[1]) if pieces[1] else None
    step = int(pieces[2]) if len(pieces) == 3 and pieces[2] else 1
    if step < 1:
        raise RunError(f"MLP selection part {quoted(part)} has step {step}: a step must be 1 or more")
    if stop is not None and stop <= start:
        raise RunError(f"MLP range {quoted(part)} selects no MLP (the stop is excluded): write start:stop with "
                       f"start below stop, e.g. {start}:{start + 1}")
    return start, stop, step


def _selection_list(items: Iterable, n_mlps: int) -> list[int]:
    chosen = list(itertools.islice(iter(items), n_mlps + 1))
    if len(chosen) > n_mlps:
        raise RunError(f"the MLP selection lists more than {n_mlps:,} MLPs but the dataset has only {n_mlps:,}: "
                       f"{SELECTION_HELP}")
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in chosen):
        raise RunError(f"cannot read MLP selection {quoted(chosen)}: indices are whole numbers")
    if any(i < 0 for i in chosen):
        raise RunError(f"MLP selection {quoted(chosen)} has a negative index: indices count up from 0")
    return [int(i) for i in chosen]


def _select(spans: list[Span], available: list[int]) -> list[int]:
    """The dataset indices the spans cover, or a RunError naming the ones the dataset lacks.

    Coverage is marked in one bytearray over the dataset's index span by slice
    assignment, so many overlapping parts cost C loops, never a Python loop per
    index; what lies past the dataset's last index stays a lazy ``range``.
    """
    present = set(available)
    end = max(available) + 1
    covered = bytearray(end)
    beyond: list[range] = []
    for start, stop, step in spans:
        wanted = range(start, max(end, start + 1) if stop is None else stop, step)  # lazy: O(1) memory
        inside = range(start, min(wanted.stop, end), step)  # never longer than the dataset's index span
        if inside:
            covered[inside.start:inside.stop:step] = b"\x01" * len(inside)
        outside = wanted[len(inside):]  # len() of a huge range overflows; slicing and indexing do not
        if outside:
            beyond.append(outside)
    gaps = (i for i in itertools.compress(range(end), covered) if i not in present)
    missing = [range(i, i + 1) for i in itertools.islice(gaps, 7)] + list(dict.fromkeys(beyond))
    if missing:
        raise RunError(_missing_message(missing, available))
    chosen = sorted(i for i in present if covered[i])
    if not chosen:
        raise RunError(f"the MLP selection is empty: {SELECTION_HELP}")
    return chosen


def _missing_message(missing: list[range], available: list[int]) -> str:
    """"MLPs 32..99999999 are not in this dataset (it has 32 MLPs: 0..31)", naming at most six pieces."""
    names = [_range_name(piece) for piece in missing[:6]] + (["…"] if len(missing) > 6 else [])
    single = len(missing) == 1 and missing[0][0] == missing[0][-1]
    subject = f"MLP {names[0]} is" if single else f"MLPs {', '.join(names)} are"
    return (f"{subject} not in this dataset (it has {len(available)} MLPs: {_span(available)}); "
            f"{SELECTION_HELP}")


def _range_name(piece: range) -> str:
    if piece[0] == piece[-1]:
        return str(piece[0])
    return f"{piece[0]}..{piece[-1]}" + (f" (step {piece.step})" if piece.step != 1 else "")


def _span(indices: list[int]) -> str:
    if indices and indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]}..{indices[-1]}"
    return ", ".join(map(str, indices[:10])) + (" ..." if len(indices) > 10 else "")


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


def is_failed(entry: dict) -> bool:
    """The grader's own test (``evaluate_estimator``'s ``_is_failed_entry``)."""
    return bool(entry.get("error_code")) or any(bool(entry.get(k)) for k in FAILURE_FLAGS)


def failure_reason(entry: dict, rulebook: Rulebook) -> str | None:
    """One sentence a participant can act on, or None for a valid MLP."""
    if entry.get("budget_exhausted"):
        return (f"over the FLOP budget: flopscope stopped predict at {entry['flops_used']:,} FLOPs "
                f"(budget {rulebook.flop_budget:,})")
    if entry.get("time_exhausted"):
        return (f"over the wall-clock cap: predict ran {entry['wall_time_s']:.2f} s "
                f"(cap {rulebook.wall_time_limit_s:g} s)")
    if entry.get("residual_wall_time_exhausted"):
        return (f"over the residual wall-time cap: {entry['residual_wall_time_s']:.3f} s outside flopscope "
                f"(cap {rulebook.residual_wall_time_limit_s:g} s)")
    if entry.get("combined_budget_exhausted"):
        return (f"over the combined budget: C = F + lambda*R = {entry['effective_compute']:,.0f} "
                f"> B = {rulebook.flop_budget:,}")
    if entry.get("error_code"):
        error = entry.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        details = (error.get("details") or {}) if isinstance(error, dict) else {}
        hint = details.get("hint")
        if "expected_shape" in details:  # raised by the grader's own check of the returned array
            text = f"the grader rejected the predictions: {message}"
        else:
            text = f"predict raised {entry['error_code']}: {message}"
        return f"{text} ({hint})" if hint and hint not in text else text
    return None


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
        "mc_mse_at_same_flops": case.avg_variance / mc_samples if mc_samples > 0 else None,
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
    with contention.CpuWatch(helper_pid=_helper_pid(estimator)) as watch:
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
    entry.update(
        failed=failed,
        failure_reason=failure_reason(entry, rulebook),
        fallback=FALLBACK if failed else None,
        score_multiplier=score_multiplier(entry["effective_compute"], rulebook.flop_budget, failed=failed),
        estimator_seed=int(case.mlp.seed),
        **_honesty_fields(entry, case, per_sample),
        scoring_wall_s=watch.wall_s,
        cpu_wait_s=watch.waited_s,
        **library_versions(),
    )
    return entry, predictions


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
        "breakdowns": {"sampling": None, "estimator": _aggregate_budget_breakdowns(breakdowns)},
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

    dataset: Any  # whestboard.datasets.Dataset
    indices: list[int]
    estimator: EstimatorHandle
    rulebook: Rulebook
    source: str = "lab"
    team: str | None = None

    def __post_init__(self) -> None:
        self.indices = select_mlps(self.dataset, self.indices)


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


def dataset_identity(dataset, indices: list[int]) -> dict:
    """What pins the scored MLPs and references: seeds plus a hash of the reference means.

    Reads only the chosen MLPs' references (no weights, no whole-dataset summary),
    so answering a repeated run stays instant on a 1000-MLP split.
    """
    digest = hashlib.sha256()
    for index in indices:
        means, avg_variance = dataset.truth(index)
        digest.update(np.ascontiguousarray(means, dtype=np.float32).tobytes())
        digest.update(repr((int(dataset.estimator_seed(index)), float(avg_variance))).encode())
    info = dataset.info
    return {
        "key": info.key,
        "format": info.format,
        "width": info.width,
        "depth": info.depth,
        "n_samples": info.n_samples,
        "references_sha256": digest.hexdigest(),
    }


def cache_key(request: RunRequest) -> str:
    """Dataset + MLPs + estimator code + budget + round rules + library versions, hashed.

    Library versions are in because flopscope releases move FLOP prices: the same
    code on a new flopscope is a different measurement.
    """
    payload = {
        "dataset": dataset_identity(request.dataset, request.indices),
        "mlps": list(request.indices),
        "estimator": {k: v for k, v in request.estimator.describe().items() if k != "description"},
        "rulebook": dataclasses.asdict(request.rulebook),
        "versions": {k: v for k, v in library_versions().items() if k != "numpy_version"},
        "schema": SCHEMA,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _start_estimator(request: RunRequest, spec: ContestSpec) -> Any:
    try:
        estimator = request.estimator.factory()
    except Exception as exc:
        raise RunError(f"could not build estimator {request.estimator.label}: {type(exc).__name__}: {exc}") from exc
    setup = getattr(estimator, "setup", None)
    if callable(setup):
        context = SetupContext(
            width=spec.width,
            depth=spec.depth,
            flop_budget=spec.flop_budget,
            api_version="1.0",
            submission_dir=request.estimator.submission_dir,
            seed=0,
        )
        try:
            setup(context)
        except Exception as exc:
            raise RunError(f"{request.estimator.label}: setup() raised {type(exc).__name__}: {exc}") from exc
    return estimator


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
                 finished: float, cancelled: bool = False) -> dict:
    """The run as stored and served: grader-shaped ``results`` plus Whestboard's context."""
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
        },
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
        "machine": contention.summarize(per_mlp),
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


def execute(
    request: RunRequest,
    *,
    on_progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
    key: str | None = None,
) -> RunOutcome:
    """Score every selected MLP, one grader call each; progress after each, cancel between them."""
    info = request.dataset.info
    spec = request.rulebook.contest_spec(
        width=info.width, depth=info.depth, n_mlps=len(request.indices), n_samples=info.n_samples
    )
    mc_per_sample = mc_flops_per_sample(info.width, info.depth, dtype_aware_billing=request.rulebook.dtype_aware_billing)
    started = time.time()
    per_mlp: list[dict] = []
    predictions: dict[int, np.ndarray] = {}
    cancelled = False
    estimator = _start_estimator(request, spec)
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
    report = build_report(request, per_mlp, key=key or cache_key(request), started=started,
                          finished=time.time(), cancelled=cancelled)
    return RunOutcome(report, predictions, cancelled=cancelled)


def run(
    request: RunRequest,
    *,
    use_cache: bool = True,
    record: bool = True,
    on_progress: ProgressFn | None = None,
    should_cancel: Callable[[], bool] | None = None,
) -> RunOutcome:
    """A run as the app and CLI do it: served from the store when identical, else scored and recorded."""
    from whestboard import runstore

    key = cache_key(request)
    if use_cache:
        cached = runstore.find_cached(key)
        if cached is not None:
            report = runstore.get_run(cached)
            if report is not None:
                if on_progress is not None:
                    for done, entry in enumerate(report["results"]["per_mlp"], start=1):
                        on_progress(done, len(request.indices), entry)
                return RunOutcome(report, runstore.get_run_predictions(cached), cached=True)
    outcome = execute(request, on_progress=on_progress, should_cancel=should_cancel, key=key)
    if record and outcome.report["complete"]:
        runstore.record_run(outcome.report, predictions=outcome.predictions)
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
