"""Scoring an estimator exactly as the grader does: what is asked, estimator handles, runs, reports, the store.

Owns: reading what a user asks a run for (MLP selections, budgets), the rulebook a run is scored under
(a round's settings restored together), estimator specs (built-ins, cumulant propagation to order K,
Monte Carlo, files run in the sandbox), runs (one ``whestbench.scoring.evaluate_estimator`` call per MLP, aggregated as the grader
aggregates), the ``whest run --json``-shaped report, the run store and its cache, and the upload job
(contract check, sandboxed run, baselines on the same MLPs), and the playground's every-estimator
scoring of one generated MLP, and budget curves (one estimator at a ladder of budgets, each point a run). May import: ``whestboard.sandbox``,
``whestboard.data``, ``whestboard.jobs``, ``whestboard.rules``, ``whestboard.store``, ``whestboard.config``.
"""

from whestboard.scoring._cumulant import (
    CumulantPropagationEstimator,
    CumulantRefused,
    order3_flops,
    third_order_window,
)
from whestboard.scoring._curve import (
    BUDGETS_HELP,
    MAX_CURVE_POINTS,
    Curve,
    CurvePoint,
    curve_cost,
    curve_requests,
    curve_spec_choices,
    fixed_cost,
    mean_interval,
    parse_budget_ladder,
    point_summary,
    run_curve,
    sampling_crossing,
    stored_budgets,
    stored_points,
    stored_reports,
)
from whestboard.scoring._estimators import (
    ALIASES,
    BUILTIN_KINDS,
    CUMULANT_KINDS,
    SPEC_HELP,
    builtin_choices,
    resolve_estimator,
)
from whestboard.scoring._handle import EstimatorHandle
from whestboard.scoring._inputs import (
    MAX_BUDGET_MULTIPLE,
    RunError,
    parse_budget,
    parse_mlp_selection,
    quoted,
    select_mlps,
)
from whestboard.scoring._playground import (
    DEFAULT_MC_SAMPLES,
    Playground,
    Scored,
    cached_playground,
    estimator_specs,
    play,
    rulebook_for_shape,
)
from whestboard.scoring._report import failure_report, whest_shaped
from whestboard.scoring._rulebook import Rulebook, rulebook_for
from whestboard.scoring._run_records import (
    find_cached,
    get_run,
    get_run_predictions,
    list_runs,
    record_run,
    runs_revision,
)
from whestboard.scoring._runs import (
    RunOutcome,
    RunRequest,
    cache_key,
    execute,
    layer_comparison,
    operation_flops,
    run_and_record,
)
from whestboard.scoring._sandboxed import is_file_spec, sandboxed_handle, shipped_spec, stored_spec
from whestboard.scoring._uploads import (
    job_cost,
    job_spec,
    json_report,
    rescore_spec,
    run_package,
    run_upload_job,
    upload_comparison,
    verdict_row,
)

__all__ = [
    "BUDGETS_HELP",
    "Curve",
    "curve_cost",
    "curve_requests",
    "curve_spec_choices",
    "CurvePoint",
    "fixed_cost",
    "MAX_CURVE_POINTS",
    "mean_interval",
    "parse_budget_ladder",
    "point_summary",
    "run_curve",
    "sampling_crossing",
    "stored_budgets",
    "stored_points",
    "stored_reports",
    "ALIASES",
    "builtin_choices",
    "BUILTIN_KINDS",
    "order3_flops",
    "third_order_window",
    "cache_key",
    "cached_playground",
    "CUMULANT_KINDS",
    "CumulantPropagationEstimator",
    "CumulantRefused",
    "DEFAULT_MC_SAMPLES",
    "estimator_specs",
    "EstimatorHandle",
    "execute",
    "failure_report",
    "find_cached",
    "get_run",
    "get_run_predictions",
    "is_file_spec",
    "job_cost",
    "job_spec",
    "json_report",
    "layer_comparison",
    "list_runs",
    "MAX_BUDGET_MULTIPLE",
    "operation_flops",
    "parse_budget",
    "parse_mlp_selection",
    "play",
    "Playground",
    "quoted",
    "record_run",
    "rescore_spec",
    "run_package",
    "resolve_estimator",
    "Rulebook",
    "rulebook_for",
    "rulebook_for_shape",
    "run_and_record",
    "run_upload_job",
    "RunError",
    "RunOutcome",
    "RunRequest",
    "runs_revision",
    "sandboxed_handle",
    "Scored",
    "select_mlps",
    "shipped_spec",
    "SPEC_HELP",
    "stored_spec",
    "upload_comparison",
    "verdict_row",
    "whest_shaped",
]
