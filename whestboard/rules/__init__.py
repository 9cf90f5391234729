"""The challenge's rules, as whestbench and flopscope define them: rounds, billing, versions.

Owns: the three rounds (``whestbench.budget.ROUNDS``: budget, wall cap, residual rule), each MLP's margin to
each cap from the telemetry a grader or a run recorded (``margins``), the grader's
environment per round (which modules participant code may import), the library
versions a result was metered under, and (``internals``) each private name of theirs that Whestboard
calls, behind a function. This is the one adapter to whestbench's and flopscope's internals:
every figure of a round comes from them here, never re-derived. May import: ``whestbench``,
``flopscope``, ``whestboard.config``.
"""

from whestboard.rules._billing import (
    aggregate_budget_breakdowns,
    metered_dtype_aware_billing,
    metered_mc_flops_per_sample,
)
from whestboard.rules._environment import GraderEnvironment, environment_for
from whestboard.rules._failures import (
    FAILURE_FLAGS,
    FALLBACK,
    INPUT_ERROR,
    INTERNAL_ERROR,
    TIMED_VERDICTS,
    UNRECORDED,
    USAGE_ERROR,
    VERDICT_NAMES,
    VERDICTS,
    cli_error,
    error_hint,
    explained_error,
    failure_kind,
    failures_sentence,
    is_failed,
    judge,
    load_caused,
    verdict_of,
    waiting_mattered,
    whest_error,
)
from whestboard.rules._internals import (
    budget_module,
    budget_payload,
    erf,
    sampling_budget_breakdown,
    sampling_chunk_size,
)
from whestboard.rules._margins import (
    CLOSE_SHARE,
    EDGE_SHARE,
    SETUP_LIMIT_S,
    TELEMETRY_NAMES,
    CapMargin,
    CapMargins,
    Caps,
    MLPTelemetry,
    TimeSplit,
    cap_margins,
    flat_entry,
    margins_from_dict,
    telemetry_of,
)
from whestboard.rules._rounds import ALL_ROUNDS, Round, get_round, round_for_shape, sampling_mse
from whestboard.rules._versions import blas_environment, blas_setup, describe_blas, library_versions

__all__ = [
    "aggregate_budget_breakdowns",
    "ALL_ROUNDS",
    "blas_environment",
    "blas_setup",
    "cap_margins",
    "CapMargin",
    "CapMargins",
    "Caps",
    "CLOSE_SHARE",
    "EDGE_SHARE",
    "flat_entry",
    "margins_from_dict",
    "MLPTelemetry",
    "SETUP_LIMIT_S",
    "TELEMETRY_NAMES",
    "telemetry_of",
    "TimeSplit",
    "budget_module",
    "budget_payload",
    "cli_error",
    "describe_blas",
    "environment_for",
    "erf",
    "error_hint",
    "explained_error",
    "FAILURE_FLAGS",
    "failure_kind",
    "failures_sentence",
    "FALLBACK",
    "get_round",
    "GraderEnvironment",
    "INPUT_ERROR",
    "INTERNAL_ERROR",
    "is_failed",
    "judge",
    "library_versions",
    "load_caused",
    "metered_dtype_aware_billing",
    "metered_mc_flops_per_sample",
    "Round",
    "round_for_shape",
    "sampling_budget_breakdown",
    "sampling_chunk_size",
    "sampling_mse",
    "TIMED_VERDICTS",
    "UNRECORDED",
    "USAGE_ERROR",
    "verdict_of",
    "VERDICT_NAMES",
    "VERDICTS",
    "waiting_mattered",
    "whest_error",
]
