"""A run's report in the shape ``whest run --json`` prints, so the two can be diffed field by field.

``results``, ``run_meta`` and ``run_config`` are the grader's; everything Whestboard adds (noise floor,
MC@B, rulebook, run id, whether it came from the store, what shipped, which import rule applied) sits
under a separate ``whestboard`` key. A run that fails before scoring is ``{"ok": false, "error": ...}``,
as ``whest run --json`` prints it.
"""

from __future__ import annotations

from whestboard.rules import CapMargins, Caps, cap_margins, library_versions, telemetry_of

SCHEMA_VERSION = "1.1"
EXTRA_FIELDS = ("run_id", "dataset", "mlp_indices", "estimator", "rulebook", "noise", "mc_reference", "versions",
                "environment", "estimator_output", "cache_key", "complete")


def whest_shaped(report: dict, *, cached: bool = False) -> dict:
    """The report as ``whest run --json`` lays it out, plus a ``whestboard`` section."""
    extras = {k: report.get(k) for k in EXTRA_FIELDS}  # a stored report may predate a field (environment)
    extras["cached"] = cached
    return {
        "schema_version": SCHEMA_VERSION,
        "mode": "agent",
        "results": report["results"],
        "run_meta": report["run_meta"],
        "run_config": report["run_config"],
        "whestbench_version": report["versions"]["whestbench_version"],
        "whestboard": extras,
    }


def failure_report(error: dict, extras: dict | None = None) -> dict:
    """``whest run --json``'s failure shape (``ok``, ``error``, ``whestbench_version``) plus a ``whestboard`` key."""
    return {"ok": False, "error": error, "whestbench_version": library_versions()["whestbench_version"],
            "whestboard": dict(extras or {})}


def run_margins(report: dict) -> CapMargins:
    """Every MLP's margin to each cap of the rulebook the run was scored under (``rules.cap_margins``), and
    its one setup() run (a report made before setup was timed has none)."""
    mlps = [telemetry_of(entry) for entry in (report.get("results") or {}).get("per_mlp") or []]
    return cap_margins(mlps, Caps.of(report["rulebook"]), setups=[("setup()", report.get("setup_wall_s"))])


def sampling_verdict(ratio: float | None) -> str:
    """MC@B against a score (or MSE), ``mc_reference``'s ``score_vs_mc``, in words: "N x better than sampling",
    or worse; "—" without one. The lab's and the upload's cards and ``score``'s text say it with this."""
    if not ratio:
        return "—"
    return f"{ratio:.3g}x better than sampling" if ratio >= 1 else f"{1 / ratio:.3g}x worse than sampling"


def charged_compute(report: dict) -> dict:
    """Where a run's charged compute C per MLP comes from: the metered FLOPs F (what the per-MLP table lists)
    and, in a round that prices residual wall time, lambda x R on top (C = F + lambda R). Means over the
    run's MLPs: ``flops`` (F), ``compute`` (C, the grader's ``mean_effective_compute``), ``residual_charge``
    (C - F), ``residual_s`` ((C - F) / lambda; None where residual time is not priced), ``priced`` and the
    round's ``lambda`` and residual cap."""
    per_mlp = report["results"].get("per_mlp") or []
    rulebook = report.get("rulebook") or {}
    flops = sum(float(e.get("flops_used") or 0) for e in per_mlp) / len(per_mlp) if per_mlp else 0.0
    compute = float(report["results"].get("mean_effective_compute") or 0.0)
    lam = float(rulebook.get("lambda_flops_per_second") or 0.0)
    priced = lam > 0
    return {"flops": flops, "compute": compute, "residual_charge": max(compute - flops, 0.0) if priced else 0.0,
            "residual_s": max(compute - flops, 0.0) / lam if priced else None, "priced": priced, "lambda": lam,
            "residual_cap_s": rulebook.get("residual_wall_time_limit_s")}
