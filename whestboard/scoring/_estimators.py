"""The estimators the lab and ``score`` can run, and how a spec string names one.

A spec is what a participant types: ``mean``, ``cov``, ``combined`` (whestbench's
reference baselines), ``cumulant:K`` / ``cumulant:K:VARIANT`` (ARC's cumulant propagation to
order K, ``whestboard.scoring._cumulant``), ``mc:N`` / ``mc:0.5B`` (plain Monte Carlo sampling with N
samples, or with a fraction of the budget), or a participant's file
(``PATH.py``, ``PATH.tar.gz``, ``upload:<sha256>``), which ``whestboard.scoring._uploads``
turns into a sandboxed worker: participant code never runs in this process.

``resolve_estimator`` turns a spec into an ``EstimatorHandle``: a label, a kind,
the sha256 of the code that will run (so a cached result is never served for
edited code) and a factory that builds a fresh estimator per run. Anything with
``predict(mlp, budget)`` can sit behind a handle, which is how an out-of-process
runner (e.g. the upload sandbox) plugs into the same scoring path.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import re
import threading
from functools import lru_cache

import flopscope as flops
import flopscope.numpy as fnp
from whestbench.sdk import BaseEstimator

from whestboard.rules import library_versions, metered_mc_flops_per_sample
from whestboard.scoring import _cumulant, _cumulant_augment
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import RunError, quoted
from whestboard.scoring._sandboxed import is_file_spec, sandboxed_handle

#: The cumulant propagations offered by name: ``cumulant:K`` (the order's default variant) and each other
#: distinct estimate, ``cumulant:K:VARIANT`` (names that compute the same estimate as another are accepted
#: as specs but not listed twice).
CUMULANT_KINDS = tuple(_cumulant.label(k, v) for k, v in _cumulant.IMPLEMENTED if (k, v) not in _cumulant.SAME_AS)
BUILTIN_KINDS = ("mean", "cov", "combined", *CUMULANT_KINDS)
ALIASES = {"covariance": "cov", "mean-propagation": "mean", "cov-propagation": "cov"}
SPEC_HELP = ("mean | cov | combined (whestbench's baselines; also covariance, mean-propagation, cov-propagation) | "
             "cumulant:1 | cumulant:2 | cumulant:3 (cumulant propagation to order K: mean propagation, covariance "
             "propagation, the paper's BASE) | "
             + " | ".join(k for k in CUMULANT_KINDS if k.count(":") == 2)
             + " (the paper's other variants; cumulant:K:VARIANT in general) | "
             "mc:N (Monte Carlo, N samples) | mc:0.5B (a fraction of the budget) | PATH.py (the file alone, as "
             "`whest package --estimator FILE` ships it) | DIR (a folder with estimator.py, as `whest package "
             "--estimator DIR` ships it) | PATH.tar.gz or PATH.tgz (the archive `whest package` writes) | "
             "upload:SHA256 (an upload already stored)")


# ---------------------------------------------------------------------------
# Monte Carlo
# ---------------------------------------------------------------------------


def mc_chunk_sizes(n_samples: int, width: int) -> list[int]:
    """Row counts per forward pass: whestbench's chunking, never a chunk of one row.

    A one-row ``sum(axis=0)`` is billed differently from a longer one, which
    would break the exact ``n * mc_flops_per_sample`` accounting.
    """
    chunk = max(1024, min(16384, 2**20 // width))
    sizes = [chunk] * (n_samples // chunk)
    if n_samples % chunk:
        sizes.append(n_samples % chunk)
    if len(sizes) > 1 and sizes[-1] == 1:
        sizes[-2] -= 1
        sizes[-1] = 2
    return sizes


def mc_finalize(layer_sums: list, n_samples: int):
    """Per-layer means from float64 sums, returned as the grader expects: float32 (depth, width)."""
    return fnp.asarray(fnp.stack(layer_sums) / n_samples, dtype=fnp.float32)


@lru_cache(maxsize=64)
def mc_finalize_flops(width: int, depth: int) -> int:
    """What flopscope charges for ``mc_finalize`` at this shape, measured, not derived.

    Measured in a fresh thread: flopscope keeps the active budget per thread and
    refuses nested contexts, and this may be asked from inside a metered predict.
    """
    found: dict[str, int] = {}

    def measure() -> None:
        with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
            mc_finalize([fnp.zeros(width, dtype=fnp.float64) for _ in range(depth)], 2)
        found["flops"] = int(ctx.flops_used)

    thread = threading.Thread(target=measure, name="mc-finalize-cost")
    thread.start()
    thread.join()
    return found["flops"]


class MonteCarloEstimator(BaseEstimator):
    """Black-box sampling: N standard-normal inputs through the MLP, per-layer means.

    Each sample is billed exactly ``mc_flops_per_sample(w, d)`` — the per-sample
    operations are those of ``whestbench.simulation.sample_layer_statistics``
    without the sum of squares — plus a fixed ``mc_finalize_flops(w, d)`` to turn
    sums into means. Inputs are drawn from ``default_rng(mlp.seed)``, as the
    contract asks of randomised estimators, so a run reproduces.
    """

    def __init__(self, *, n_samples: int | None = None, budget_fraction: float | None = None) -> None:
        if (n_samples is None) == (budget_fraction is None):
            raise ValueError("give exactly one of n_samples or budget_fraction")
        if n_samples is not None and n_samples < 2:
            raise ValueError(f"Monte Carlo needs at least 2 samples, got {n_samples}")
        if budget_fraction is not None and not 0 < budget_fraction <= 1:
            raise ValueError(f"budget fraction must be in (0, 1], got {budget_fraction}")
        self.n_samples = n_samples
        self.budget_fraction = budget_fraction

    def samples_for(self, width: int, depth: int, budget: int) -> int:
        """N for this MLP: fixed, or the most samples the budget fraction pays for in full."""
        if self.n_samples is not None:
            return self.n_samples
        spendable = self.budget_fraction * budget - mc_finalize_flops(width, depth)
        n = math.floor(spendable / metered_mc_flops_per_sample(width, depth))
        if n < 2:
            raise ValueError(
                f"{self.budget_fraction:g} of the budget ({budget:.3g} FLOPs) buys {max(n, 0)} Monte Carlo "
                f"samples at {metered_mc_flops_per_sample(width, depth):,} FLOPs each; need at least 2"
            )
        return n

    def predict(self, mlp, budget: int):
        n = self.samples_for(mlp.width, mlp.depth, budget)
        rng = fnp.random.default_rng(mlp.seed)
        layer_sums = [fnp.zeros(mlp.width, dtype=fnp.float64) for _ in range(mlp.depth)]
        for rows in mc_chunk_sizes(n, mlp.width):
            x = fnp.array(rng.standard_normal((rows, mlp.width), dtype=fnp.float32))
            for layer, weights in enumerate(mlp.weights):
                x = fnp.maximum(fnp.matmul(x, weights), 0.0)
                layer_sums[layer] = layer_sums[layer] + fnp.sum(fnp.asarray(x, dtype=fnp.float64), axis=0)
        return mc_finalize(layer_sums, n)


# ---------------------------------------------------------------------------
# spec -> handle
# ---------------------------------------------------------------------------


def _sha256(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()


@functools.cache  # the source hash reads whestbench's estimators module from disk
def _builtin_handle(kind: str) -> EstimatorHandle:
    from whestbench import estimators as reference

    classes = {
        "mean": reference.MeanPropagationEstimator,
        "cov": reference.CovariancePropagationEstimator,
        "combined": reference.CombinedEstimator,
    }
    cls = classes[kind]
    code = _sha256(inspect.getsource(reference), library_versions()["whestbench_version"])
    return EstimatorHandle(
        label=kind,
        kind=kind,
        code_sha256=code,
        factory=cls,
        description=f"whestbench {cls.__name__}",
        class_name=cls.__name__,
    )


_NUMBER = r"[0-9][0-9_]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
#: The most Monte Carlo samples a spec may ask for: the public references were baked with 1e9, and
#: no budget a run accepts (at most 1000 x B, ``whestboard.scoring._inputs.MAX_BUDGET_MULTIPLE``) pays for more
#: than about 6.5e7 samples in any round (B buys 64,000-65,500 of them).
MAX_MC_SAMPLES = 10**9
#: The longest sample-count text read: a count is a number, never a kilobyte.
MAX_MC_CHARS = 64
MC_HELP = ("write a whole number of samples from 2 to 1e9 (e.g. 10000 or 1e5), "
           "or a fraction of the budget up to 1 (e.g. 0.5B)")


def parse_mc_spec(text: str) -> dict:
    """``mc:N`` -> {"n_samples": N}; ``mc:0.5B`` -> {"budget_fraction": 0.5}; RunError naming the field.

    The number is bounded before it is converted (length, then size), so "mc:1e400"
    or "mc:1e30" is a sentence, not an OverflowError or a run that never ends.
    """
    body = text.split(":", 1)[1].strip() if ":" in text else ""
    field = f"Monte Carlo samples {quoted(body)}"
    if len(body) > MAX_MC_CHARS:
        raise RunError(f"{field} is too long to be a sample count: {MC_HELP}")
    if re.fullmatch(_NUMBER + r"\s*[bB]", body):
        fraction = float(body[:-1].replace("_", ""))
        if not 0 < fraction <= 1:
            raise RunError(f"{field} asks for {fraction:g} of the budget; a fraction must be above 0 and at most 1: "
                           f"{MC_HELP}")
        return {"budget_fraction": fraction}
    if re.fullmatch(_NUMBER, body):
        value = float(body.replace("_", ""))
        if value > MAX_MC_SAMPLES:
            size = "more than 1e300" if math.isinf(value) else f"{value:.3g}"
            raise RunError(f"{field} is {size} samples, more than the 1e9 behind the public "
                           f"references (and more than any accepted budget pays for): {MC_HELP}")
        if value != int(value):
            raise RunError(f"{field} is not a whole number of samples: {MC_HELP}")
        if value < 2:
            raise RunError(f"{field}: Monte Carlo needs at least 2 samples: {MC_HELP}")
        return {"n_samples": int(value)}
    if body.startswith("-"):
        raise RunError(f"{field} is negative: {MC_HELP}")
    raise RunError(f"cannot read {field}: {MC_HELP}")


def _mc_handle(text: str) -> EstimatorHandle:
    params = parse_mc_spec(text)
    MonteCarloEstimator(**params)  # validates now, so a bad spec fails before any run starts
    if "n_samples" in params:
        label, what = f"mc:{params['n_samples']}", f"{params['n_samples']:,} samples"
    else:
        label, what = f"mc:{params['budget_fraction']:g}B", f"{params['budget_fraction']:g} of the budget"
    code = _sha256(inspect.getsource(MonteCarloEstimator), inspect.getsource(mc_finalize),
                   inspect.getsource(mc_chunk_sizes), label)
    return EstimatorHandle(
        label=label,
        kind="mc",
        code_sha256=code,
        factory=lambda: MonteCarloEstimator(**params),
        description=f"Monte Carlo sampling, {what}, seeded from mlp.seed",
        class_name=MonteCarloEstimator.__name__,
    )


CUMULANT_HELP = ("write cumulant:K or cumulant:K:VARIANT with K = 1, 2 or 3 and VARIANT simple, base or augment "
                 "(also augment-factored at K = 3 and diagonal at K = 1)")


@functools.cache
def _cumulant_handle(order: int, variant: str) -> EstimatorHandle:
    canonical = _cumulant.label(order, variant)
    code = _sha256(inspect.getsource(_cumulant), inspect.getsource(_cumulant_augment),
                   library_versions()["flopscope_version"], canonical)
    return EstimatorHandle(
        label=canonical,
        kind=canonical,
        code_sha256=code,
        factory=lambda: _cumulant.CumulantPropagationEstimator(order, variant),
        description=_cumulant.describe(order, variant),
        class_name=_cumulant.CumulantPropagationEstimator.__name__,
    )


def parse_cumulant_spec(text: str) -> tuple[int, str]:
    """``cumulant:3`` -> (3, "base"); ``cumulant:3:simple`` -> (3, "simple"); RunError saying what to write."""
    parts = [p.strip().lower() for p in text.split(":")]
    if len(parts) not in (2, 3) or not re.fullmatch(r"[0-9]{1,2}", parts[1]):
        raise RunError(f"cannot read the cumulant spec {quoted(text)}: {CUMULANT_HELP}")
    order = int(parts[1])
    variant = parts[2] if len(parts) == 3 else _cumulant.default_variant(order)
    try:
        _cumulant.check_order(order, variant)
    except _cumulant.CumulantRefused as exc:
        raise RunError(f"{quoted(text)}: {exc}") from None
    return order, variant


def describe_cumulant(spec: str) -> str:
    """What a ``cumulant:K[:VARIANT]`` spec computes, in words."""
    return _cumulant.describe(*parse_cumulant_spec(spec))


def resolve_estimator(spec: str) -> EstimatorHandle:
    """The handle for a spec string; otherwise a RunError (a ValueError) naming the accepted forms."""
    if spec is not None and not isinstance(spec, str):
        raise RunError(f"unknown estimator {quoted(spec)}; use {SPEC_HELP}")
    text = (spec or "").strip()
    key = ALIASES.get(text.lower(), text.lower())
    if key in BUILTIN_KINDS and key not in CUMULANT_KINDS:
        return _builtin_handle(key)
    if key.startswith("mc:") or key == "mc":
        return _mc_handle(text)
    if key.startswith("cumulant:") or key == "cumulant":
        return _cumulant_handle(*parse_cumulant_spec(text))
    if is_file_spec(text):  # participant code never runs in this process: see whestboard.sandbox
        return sandboxed_handle(text)
    raise RunError(f"unknown estimator {quoted(spec)}; use {SPEC_HELP}")


def builtin_choices() -> list[dict]:
    """What the lab offers in its estimator menu (files come through uploads)."""
    return [
        {"value": "mean", "label": "Mean propagation (whestbench)"},
        {"value": "cov", "label": "Covariance propagation (whestbench)"},
        {"value": "combined", "label": "Combined: covariance if the budget allows (whestbench)"},
        *({"value": kind, "label": _cumulant.short_label(*parse_cumulant_spec(kind))} for kind in CUMULANT_KINDS),
        {"value": "mc", "label": "Monte Carlo sampling"},
    ]
