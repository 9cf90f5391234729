"""Figures and panels of the estimator lab: a run report in, ``go.Figure`` / components out.

Pure functions of the report (``whestboard.scoring._runs`` shape), so each can be checked
against the report's own numbers in a unit test. Every MSE drawn or printed here
sits beside the reference noise floor (avg_variance / N_ref): an error below it
is reference noise, not estimator error.
"""

from __future__ import annotations

import math

import dash_bootstrap_components as dbc
import numpy as np
import plotly.graph_objects as go
from dash import html

from components.figures.style import FAILED_COLOR
from components.figures.text import plain_all
from components.format import integer, sci
from whestboard.rules import failure_kind, failures_sentence
from whestboard.scoring import charged_compute, operation_flops, sampling_verdict

NOISE_HELP = (
    "Noise floor = avg_variance / N_ref: the error the reference's own Monte Carlo noise adds to any "
    "measured MSE. Corrected MSE = observed - floor. Below the floor (corrected < floor) two estimators "
    "cannot be told apart with this reference."
)
MC_SAME_HELP = (
    "Monte Carlo at the same FLOPs: sigma^2 / N with N = FLOPs spent / FLOPs per MC sample "
    "(whestbench.budget.mc_flops_per_sample). sigma^2 is the final-layer variance, the only one the "
    "reference stores, so the line is the same at every layer."
)
LAYOUT = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50}, "height": 340}
RUN_COLOR, MC_COLOR, FLOOR_COLOR, BUDGET_COLOR = "#0d6efd", "#fd7e14", "#6c757d", "#dc3545"


def _log_range(values: list[float], *, pad: float = 0.3) -> list[float] | None:
    positive = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not positive:
        return None
    return [math.log10(min(positive)) - pad, math.log10(max(positive)) + pad]


# ---------------------------------------------------------------------------
# compute
# ---------------------------------------------------------------------------


def budget_gauge(report: dict) -> go.Figure:
    """Effective compute of each MLP against B, with the 10% charging floor, on a log axis.

    A linear gauge would show a mean-propagation run (1e-5 of B) as nothing; the
    log axis keeps both the spend and the two thresholds readable.
    """
    rb = report["rulebook"]
    budget, floor = rb["flop_budget"], rb["charging_floor"]
    per_mlp = report["results"]["per_mlp"]
    labels = [f"MLP {e['mlp_index']}" for e in per_mlp]
    compute = [max(float(e["effective_compute"]), 0.0) for e in per_mlp]
    colors = [BUDGET_COLOR if e["failed"] else RUN_COLOR for e in per_mlp]
    fig = go.Figure(
        go.Bar(
            x=[c if c > 0 else None for c in compute], y=labels, orientation="h", marker_color=colors,
            customdata=[[c / budget, e["score_multiplier"]] for c, e in zip(compute, per_mlp, strict=True)],
            hovertemplate="%{y}: C = %{x:.3s} FLOPs (%{customdata[0]:.2%} of B), multiplier %{customdata[1]:.3g}"
                          "<extra></extra>",
            name="effective compute C",
        )
    )
    for x, text, color in ((floor, "10% of B (charging floor)", FLOOR_COLOR), (budget, "B", BUDGET_COLOR)):
        # Shapes take data coordinates, but annotations on a log axis take log10 of them.
        fig.add_shape(type="line", x0=x, x1=x, y0=0, y1=1, yref="paper", line={"dash": "dash", "color": color})
        fig.add_annotation(x=math.log10(x), y=1, yref="paper", yanchor="bottom", text=text, showarrow=False,
                           font={"color": color, "size": 11})
    x_range = _log_range(compute + [floor, budget])
    fig.update_xaxes(type="log", title="effective compute C = F + lambda R (FLOPs)", range=x_range)
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(**LAYOUT, title="Compute against the budget", showlegend=False)
    fig.update_layout(height=max(260, 110 + 26 * len(per_mlp)), margin={"t": 60})
    return fig


def operation_totals(report: dict) -> dict[str, int]:
    """FLOPs per flopscope operation, summed over the run's MLPs, largest first."""

    return operation_flops(report["results"]["breakdowns"]["estimator"])


def flop_breakdown(report: dict, *, top: int = 8) -> go.Figure:
    """Where the FLOPs went: flopscope's count per operation (the largest ``top``, the rest summed). An
    uploaded estimator's counts come from its sandbox, which names the operations: drawn as text."""
    ranked = [(op, n) for op, n in operation_totals(report).items() if n > 0]
    totals = dict(ranked[:top])
    if len(ranked) > top:
        totals[f"{len(ranked) - top} other operations"] = sum(n for _, n in ranked[top:])
    total = sum(totals.values()) or 1
    ops = list(totals)[::-1]
    fig = go.Figure(
        go.Bar(
            x=[totals[o] for o in ops], y=plain_all(ops), orientation="h", marker_color=RUN_COLOR,
            text=[f"{totals[o] / total:.2%}" for o in ops], textposition="auto",
            hovertemplate="%{y}: %{x:,} FLOPs<extra></extra>",
        )
    )
    fig.update_xaxes(title="FLOPs (all MLPs of the run)")
    fig.update_layout(**LAYOUT, title="FLOPs by operation (flopscope)")
    fig.update_layout(height=max(260, 80 + 26 * len(ops)))
    if not ops:
        fig.add_annotation(text="no FLOPs were metered (every MLP failed before any operation)",
                           showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


# ---------------------------------------------------------------------------
# error
# ---------------------------------------------------------------------------


def mc_at_same_flops(report: dict) -> float | None:
    """Mean over MLPs of sigma^2 / N(F): what sampling would reach with this run's FLOPs."""
    values = [e["mc_mse_at_same_flops"] for e in report["results"]["per_mlp"] if e.get("mc_mse_at_same_flops")]
    return float(np.mean(values)) if values else None


def per_layer_mse(report: dict) -> go.Figure:
    """Per-layer MSE of every MLP (thin) and their mean (bold), log scale, beside floor and MC."""
    results = report["results"]
    depth = len(results["per_layer_mse"])
    layers = list(range(1, depth + 1))
    fig = go.Figure()
    for entry in results["per_mlp"]:
        fig.add_trace(go.Scatter(
            x=layers, y=entry["per_layer_mse"], mode="lines", line={"width": 1, "color": "rgba(13,110,253,0.25)"},
            name=f"MLP {entry['mlp_index']}", showlegend=False,
            hovertemplate=f"MLP {entry['mlp_index']} layer %{{x}}: MSE %{{y:.3e}}<extra></extra>",
        ))
    fig.add_trace(go.Scatter(x=layers, y=results["per_layer_mse"], mode="lines+markers", name="mean over MLPs",
                             line={"width": 3, "color": RUN_COLOR},
                             hovertemplate="layer %{x}: mean MSE %{y:.3e}<extra></extra>"))
    floor = report["noise"]["noise_floor"]
    values = list(results["per_layer_mse"]) + [floor]
    if floor and floor > 0:
        fig.add_trace(go.Scatter(x=layers, y=[floor] * depth, mode="lines", name="reference noise floor",
                                 line={"dash": "dash", "color": FLOOR_COLOR},
                                 hovertemplate="noise floor %{y:.3e}<extra></extra>"))
    mc = mc_at_same_flops(report)
    if mc:
        values.append(mc)
        fig.add_trace(go.Scatter(x=layers, y=[mc] * depth, mode="lines", name="Monte Carlo, same FLOPs",
                                 line={"dash": "dot", "color": MC_COLOR},
                                 hovertemplate="Monte Carlo at the same FLOPs: %{y:.3e}<extra></extra>"))
    for entry in results["per_mlp"]:
        values += entry["per_layer_mse"]
    fig.update_xaxes(title="layer", dtick=1 if depth <= 20 else None)
    fig.update_yaxes(type="log", title="MSE against the reference", range=_log_range(values))
    fig.update_layout(**LAYOUT, title="Per-layer MSE", legend={"orientation": "h", "y": -0.25})
    fig.update_layout(height=380)
    return fig


def versus_sampling(report: dict) -> go.Figure:
    """Final-layer MSE and score beside MC@B, Monte Carlo at the same FLOPs and the noise floor."""
    results, mc, noise = report["results"], report["mc_reference"], report["noise"]
    bars = [
        ("final-layer MSE", results["final_layer_mse"], RUN_COLOR),
        ("score (MSE x multiplier)", results["adjusted_final_layer_score"], RUN_COLOR),
        ("MC@B (all of B on sampling)", mc.get("mc_at_budget"), MC_COLOR),
        ("Monte Carlo, same FLOPs", mc_at_same_flops(report), MC_COLOR),
        ("reference noise floor", noise["noise_floor"], FLOOR_COLOR),
    ]
    bars = [(name, v, c) for name, v, c in bars if v is not None and v > 0 and math.isfinite(v)]
    fig = go.Figure(go.Bar(
        x=[b[1] for b in bars], y=[b[0] for b in bars], orientation="h", marker_color=[b[2] for b in bars],
        text=[sci(b[1]) for b in bars], textposition="auto", hovertemplate="%{y}: %{x:.3e}<extra></extra>",
    ))
    fig.update_xaxes(type="log", title="mean over the run's MLPs", range=_log_range([b[1] for b in bars]))
    fig.update_yaxes(autorange="reversed")
    failures = failures_sentence([failure_kind(e) for e in results["per_mlp"]])
    fig.update_layout(**LAYOUT, title="Against sampling" + (f" · {failures} (their MSE is the grader's fallback)"
                                                            if failures else ""))
    if failures:  # a run with failed MLPs is drawn as failed: its run bars are the failure colour
        fig.update_traces(marker_color=[FAILED_COLOR if c == RUN_COLOR else c for _, _, c in bars])
    return fig


def signed_error_heatmap(comparison: dict) -> go.Figure:
    """Predicted minus true mean, MLP x neuron, at one layer; red over-, blue under-estimates."""
    error = np.asarray(comparison["predicted"], dtype=np.float64) - np.asarray(comparison["truth"], dtype=np.float64)
    bound = float(np.max(np.abs(error))) if error.size else 1.0
    fig = go.Figure(go.Heatmap(
        z=error, y=[f"MLP {i}" for i in comparison["indices"]], colorscale="RdBu_r", zmid=0,
        zmin=-bound, zmax=bound, colorbar={"title": "pred - true"},
        hovertemplate="%{y}, neuron %{x}: error %{z:.3e}<extra></extra>",
    ))
    fig.update_xaxes(title="neuron")
    fig.update_layout(**LAYOUT, title=f"Signed error at layer {comparison['layer'] + 1}")
    fig.update_layout(height=max(240, 80 + 28 * len(comparison["indices"])))
    return fig


def predicted_vs_true(comparison: dict) -> go.Figure:
    """Every neuron of the layer: predicted against reference mean, with the y = x line."""
    fig = go.Figure()
    low, high = 0.0, 0.0
    for i, index in enumerate(comparison["indices"]):
        truth, pred = comparison["truth"][i], comparison["predicted"][i]
        low = min(low, float(np.min(truth)), float(np.min(pred)))
        high = max(high, float(np.max(truth)), float(np.max(pred)))
        fig.add_trace(go.Scattergl(x=truth, y=pred, mode="markers", marker={"size": 4, "opacity": 0.6},
                                   name=f"MLP {index}",
                                   hovertemplate=f"MLP {index}: true %{{x:.4g}}, predicted %{{y:.4g}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="y = x",
                             line={"dash": "dash", "color": FLOOR_COLOR}, hoverinfo="skip"))
    fig.update_xaxes(title="reference mean E[h]")
    fig.update_yaxes(title="predicted mean")
    fig.update_layout(**LAYOUT, title=f"Predicted vs true at layer {comparison['layer'] + 1}",
                      showlegend=len(comparison["indices"]) <= 12)
    fig.update_layout(height=380)
    return fig


# ---------------------------------------------------------------------------
# panels
# ---------------------------------------------------------------------------


def floor_badge(entry: dict) -> html.Span | None:
    if not entry.get("below_noise_floor"):
        return None
    return dbc.Badge("below noise floor", color="warning", text_color="dark", className="ms-1 below-floor",
                     title=NOISE_HELP)


def live_rows(per_mlp: list[dict]) -> list[dict]:
    """The few fields the live table shows while a run is in progress (small enough to stream)."""
    return [
        {
            "mlp_index": e["mlp_index"],
            "mlp_name": e["mlp_name"],
            "flops_used": e["flops_used"],
            "final_layer_mse": e["final_layer_mse"],
            "noise_floor": e["noise_floor"],
            "below_noise_floor": e["below_noise_floor"],
            "failure_reason": e["failure_reason"],
        }
        for e in per_mlp
    ]


def live_table(rows: list[dict]) -> dbc.Table | None:
    if not rows:
        return None
    body = [
        html.Tr([
            html.Td(r["mlp_index"]), html.Td(r["mlp_name"]), html.Td(integer(r["flops_used"])),
            html.Td([sci(r["final_layer_mse"]), floor_badge(r)]), html.Td(sci(r["noise_floor"])),
            html.Td(r["failure_reason"] or "ok", className="text-danger" if r["failure_reason"] else "text-success"),
        ])
        for r in rows
    ]
    head = html.Thead(html.Tr([html.Th(h) for h in ("MLP", "name", "FLOPs", "final MSE", "noise floor", "status")]))
    return dbc.Table([head, html.Tbody(body)], size="sm", className="mb-0", id="lab-live-table")


def per_mlp_table(report: dict) -> dbc.Table:
    """Every grader field a participant reads, one row per MLP, each MSE beside its floor."""
    header = ["MLP", "name", "FLOPs", "C / B", "multiplier", "final MSE", "noise floor", "corrected",
              "all-layer MSE", "score", "MC same FLOPs", "wall s", "residual s", "status"]
    budget = report["rulebook"]["flop_budget"]
    rows = []
    for e in report["results"]["per_mlp"]:
        status = e["failure_reason"] or "ok"
        rows.append(html.Tr(
            [
                html.Td(e["mlp_index"]), html.Td(e["mlp_name"]), html.Td(integer(e["flops_used"])),
                html.Td(f"{e['effective_compute'] / budget:.3g}"), html.Td(f"{e['score_multiplier']:.3g}"),
                html.Td([sci(e["final_layer_mse"]), floor_badge(e)]), html.Td(sci(e["noise_floor"])),
                html.Td(sci(e["final_layer_mse_corrected"])), html.Td(sci(e["all_layers_mse"])),
                html.Td(sci(e["adjusted_final_layer_score"])), html.Td(sci(e["mc_mse_at_same_flops"])),
                html.Td(f"{e['wall_time_s']:.3f}"), html.Td(f"{e['residual_wall_time_s']:.3f}"),
                html.Td(status, className="text-danger" if e["failed"] else "text-success"),
            ],
            className="table-danger" if e["failed"] else None,
        ))
    return dbc.Table([html.Thead(html.Tr([html.Th(h) for h in header])), html.Tbody(rows)],
                     size="sm", hover=True, responsive=True, id="lab-mlp-table")


def _card(title: str, value: str, detail, *, card_id: str, help_text: str | None = None) -> dbc.Col:
    return dbc.Col(dbc.Card(dbc.CardBody([
        html.Div(title, className="text-muted small", title=help_text),
        html.Div(value, className="fs-4 fw-semibold"),
        html.Div(detail, className="small"),
    ]), id=card_id, className="h-100"), md=3, className="mb-2")


def summary_cards(report: dict, *, cached: bool = False, prefix: str = "lab") -> dbc.Row:
    """What a run's result leads with: mean final-layer MSE, the score, MC@B with "x better than sampling", and
    the charged compute C. The lab and the upload page both draw it from the run's report (``prefix`` names
    the cards' ids), so the two can never show different numbers for one run."""
    results, noise, mc, rb = report["results"], report["noise"], report["mc_reference"], report["rulebook"]
    below = dbc.Badge("below noise floor", color="warning", text_color="dark", className="ms-1 below-floor",
                      title=NOISE_HELP) if noise["below_noise_floor"] else None
    return dbc.Row([
        _card("Final-layer MSE (mean)", sci(results["final_layer_mse"]),
              [f"noise floor {sci(noise['noise_floor'])}, corrected {sci(noise['final_layer_mse_corrected'])}",
               below], card_id=f"{prefix}-card-mse", help_text=NOISE_HELP),
        _card("Score = MSE x max(0.1, C/B)", sci(results["adjusted_final_layer_score"]),
              f"mean multiplier {results['mean_score_multiplier']:.3g}; "
              f"{results['n_failed_mlps']} of {len(results['per_mlp'])} failed", card_id=f"{prefix}-card-score"),
        _card("MC@B", sci(mc.get("mc_at_budget")),
              [html.Strong(sampling_verdict(mc.get("score_vs_mc"))),
               html.Div(f"final MSE {sampling_verdict(mc.get('final_mse_vs_mc'))}", className="text-muted")],
              card_id=f"{prefix}-card-mc", help_text="MC@B: the score of spending the whole budget on Monte Carlo, "
                                                     "for these MLPs' own mean avg_variance"),
        _card(COMPUTE_TITLE, sci(results["mean_effective_compute"]),
              [_compute_parts(charged_compute(report)),
               html.Div(f"{results['mean_compute_utilization']:.3%} of B = {sci(rb['flop_budget'])}"
                        + (" (custom budget)" if rb["custom_budget"] else "")
                        + (" · served from the run store" if cached else ""))],
              card_id=f"{prefix}-card-compute", help_text=COMPUTE_HELP),
    ], className="g-2", id=f"{prefix}-summary")


COMPUTE_TITLE = "Charged compute C per MLP (mean)"
COMPUTE_HELP = ("C is what the score's multiplier max(0.1, C/B) charges: the metered FLOPs F (the per-MLP table's "
                "FLOPs) plus, where a round prices residual wall time, lambda x R for the time spent outside "
                "flopscope (C = F + lambda R).")


def _compute_parts(parts: dict) -> str:
    """C in words: F alone, or F plus the residual time's charge."""
    if not parts["priced"]:
        cap = parts["residual_cap_s"]
        return ("C = F, the metered FLOPs (residual time is gated" + (f" at {cap:g} s" if cap else "")
                + ", not priced)")
    return (f"C = F + λR: F = {sci(parts['flops'])} metered FLOPs + {sci(parts['residual_charge'])} for "
            f"{parts['residual_s']:.3g} s of residual time (λ = {sci(parts['lambda'])}/s)")


def failures_alert(report: dict) -> dbc.Alert | None:
    failed = [e for e in report["results"]["per_mlp"] if e["failed"]]
    if not failed:
        return None
    items = [html.Li([html.Strong(f"MLP {e['mlp_index']} ({e['mlp_name']}): "), e["failure_reason"]]) for e in failed]
    return dbc.Alert([
        html.H6(f"{len(failed)} MLP(s) failed and were scored as the grader scores a failure", className="alert-heading"),
        html.P(failed[0]["fallback"].capitalize() + ".", className="mb-1"),
        html.Ul(items, className="mb-0"),
    ], color="danger", id="lab-failures")


def contention_alert(report: dict) -> dbc.Alert | None:
    """Say so when the run's timed fields include waiting: FLOPs are exact, wall and residual time are not."""
    machine = report.get("machine") or {}
    if not machine.get("contended") and not machine.get("waiting_mattered"):
        return None
    load = machine.get("load_avg_1m")
    busy = f" (load average {load:.1f} on {machine.get('cpu_count')} cores)" if load is not None else ""
    parts = [
        html.H6("Timed on a busy machine", className="alert-heading"),
        html.P(f"{machine['cpu_wait_s']:.2f} s of the {machine['scoring_wall_s']:.2f} s spent scoring were not spent "
               f"computing: the machine was busy{busy}, or the estimator slept or waited. Wall-clock and residual "
               "times include that wait, so effective compute and the multiplier can be higher here than on a quiet "
               "grading machine. FLOP counts and MSEs are exact.", className="mb-1"),
    ]
    if machine.get("waiting_mattered"):
        listed = ", ".join(str(i) for i in machine["waiting_mattered"])
        parts.append(html.P(f"MLP(s) {listed} failed on a time rule they would have met without the wait: "
                            "waiting (for a core, or the estimator's own sleep) made the difference there.", className="mb-1",
                            id="lab-waiting-mattered"))
    if machine.get("timed_failures"):
        listed = ", ".join(str(i) for i in machine["timed_failures"])
        parts.append(html.P(f"MLP(s) {listed} failed on a time rule and might pass when timed alone: run again "
                            "when the machine is quieter, or score locally with the CLI.", className="mb-0"))
    return dbc.Alert(parts, color="warning", id="lab-contention")


def results_header(report: dict) -> html.Div:
    rb, est = report["rulebook"], report["estimator"]
    parts = [
        html.H4([f"{est['label']} on {report['dataset']['key']}",
                 html.Small(f"  · {len(report['mlp_indices'])} MLPs · round {rb['round_tag']} rules · "
                            f"flopscope {report['versions']['flopscope_version']}, whestbench "
                            f"{report['versions']['whestbench_version']}", className="text-muted")]),
    ]
    if rb.get("billing_note"):
        parts.append(dbc.Alert(rb["billing_note"], color="info", className="py-2 small", id="lab-billing-note"))
    return html.Div(parts)
