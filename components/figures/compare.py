"""Figures of the compare page: a ``whestboard.compare`` verdict or anatomy (plain dicts) in, ``go.Figure`` out.

* ``pair_scatter``: one dot per shared MLP at (B, A), log-log, the y = x line, coloured by the MLP's
  avg_variance: below the line A did better on that MLP. Dots at zero (or below the frame) are pinned
  to its edge by ``components.figures.frame``, the one rule for that.
* ``interval_figure``: the geometric-mean ratio A / B of scores and of final-layer MSEs with their 95%
  intervals, on a log axis around 1.
* ``noise_figure``: the standard error of the mean MSE difference taken apart (reference noise beside
  MLP-to-MLP spread).
* ``per_layer_figure``, ``shares_figure``, ``truth_bins_figure``, ``heatmap_figure``: the error anatomy.
"""

from __future__ import annotations

import math
import textwrap

import numpy as np
import plotly.graph_objects as go

from components.figures.frame import EDGE_SYMBOLS, Frame, edge_sides, log_coords, pinned
from components.figures.style import FAILED_COLOR
from whestboard.compare import CLASS_LABELS, CLASSES, ErrorHeatmap

A_COLOR, B_COLOR, DIFF_COLOR, LINE_COLOR = "#0d6efd", "#fd7e14", "#6f42c1", "#6c757d"
LAYOUT = {"margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "height": 360}
METRICS = {"score": ("score", "adjusted score"), "mse": ("mse", "final-layer MSE")}
CLASS_COLORS = {"dead": "#adb5bd", "kinked": "#9ecae1", "always_on": "#3182bd"}


def _frame(values: np.ndarray) -> Frame | None:
    positive = values[np.isfinite(values) & (values > 0)]
    if positive.size == 0:
        return None
    lo, hi = math.log10(positive.min()), math.log10(positive.max())
    pad = max(0.15, 0.05 * (hi - lo))
    return Frame(x=(lo - pad, hi + pad), y=(lo - pad, hi + pad))


def pair_scatter(verdict: dict, metric: str = "score") -> go.Figure:
    """A against B per shared MLP, log-log, y = x, colour = log10 avg_variance."""
    key, title = METRICS[metric]
    per = verdict["per_mlp"]
    a = np.array([np.nan if v is None else v for v in per[f"{key}_a"]], dtype=np.float64)
    b = np.array([np.nan if v is None else v for v in per[f"{key}_b"]], dtype=np.float64)
    variance = np.array([np.nan if v is None else v for v in per["avg_variance"]], dtype=np.float64)
    fig = go.Figure()
    frame = _frame(np.concatenate([a, b]))
    if frame is None:
        fig.add_annotation(text=f"no positive {title} to draw on a log axis", showarrow=False,
                           xref="paper", yref="paper", x=0.5, y=0.5)
        fig.update_layout(**LAYOUT)
        return fig
    lx, ly = log_coords(b, a, frame)
    side = edge_sides(lx, ly, frame)
    inside = side == ""
    ends = [10 ** frame.x[0], 10 ** frame.x[1]]
    fig.add_trace(go.Scatter(x=ends, y=ends, mode="lines", line={"dash": "dash", "color": LINE_COLOR},
                             name="y = x (A = B)", hoverinfo="skip"))
    with np.errstate(divide="ignore", invalid="ignore"):
        colour = np.round(np.log10(variance), 3)
    names = per["mlp_name"]
    custom = np.array([[per["mlp_index"][m], names[m], a[m], b[m], variance[m]] for m in range(len(a))], dtype=object)
    hover = ("MLP %{customdata[0]} %{customdata[1]}<br>A %{customdata[2]:.4g}<br>B %{customdata[3]:.4g}"
             "<br>avg_variance %{customdata[4]:.3g}<extra></extra>")
    failed = np.array(per.get("failed_a") or [False] * len(a), dtype=bool) | np.array(
        per.get("failed_b") or [False] * len(a), dtype=bool)
    ran = inside & ~failed
    fig.add_trace(go.Scatter(
        x=10 ** lx[ran], y=10 ** ly[ran], mode="markers", name="MLPs", customdata=custom[ran],
        hovertemplate=hover,
        marker={"size": 7, "color": colour[ran], "colorscale": "Viridis", "showscale": True,
                "colorbar": {"title": {"text": "log10 avg_variance"}, "thickness": 12}},
    ))
    if (inside & failed).any():  # a failed MLP's value is the grader's fallback: drawn apart, never as a result
        fig.add_trace(go.Scatter(
            x=10 ** lx[inside & failed], y=10 ** ly[inside & failed], mode="markers",
            name=f"{int((inside & failed).sum())} MLP(s) failed on A or B (the grader's fallback)",
            customdata=custom[inside & failed], hovertemplate=hover.replace("<extra>", "<br>failed<extra>"),
            marker={"symbol": "x-thin-open", "size": 11, "color": FAILED_COLOR,
                    "line": {"width": 2.5, "color": FAILED_COLOR}}, meta={"failed_mlps": True}))
    for edge, symbol in EDGE_SYMBOLS.items():
        chosen = side == edge
        if chosen.any():
            px, py = pinned(lx[chosen], ly[chosen], frame)
            fig.add_trace(go.Scatter(x=px, y=py, mode="markers", name=f"{int(chosen.sum())} outside ({edge})",
                                     marker={"symbol": symbol, "size": 9, "color": LINE_COLOR},
                                     customdata=custom[chosen], hovertemplate=hover))
    axis = {"type": "log"}
    fig.update_xaxes(title=f"B: {title}", range=list(frame.x), **axis)
    fig.update_yaxes(title=f"A: {title}", range=list(frame.y), scaleanchor="x", **axis)
    fig.update_layout(**LAYOUT, title=f"{title} per MLP: below the line A did better", legend={"orientation": "h",
                      "y": -0.2})
    return fig


def interval_figure(verdict: dict) -> go.Figure:
    """Geometric-mean ratio A / B with its 95% interval, for scores and final-layer MSEs (log axis, 1 = tie)."""
    labels, ratios, lows, highs = [], [], [], []
    for key, label in (("score", "score"), ("final_layer_mse", "final-layer MSE")):
        stat = verdict[key]
        if stat["ratio"] is None:
            continue
        labels.append(label)
        ratios.append(stat["ratio"])
        lows.append(stat["ratio_low"] if stat["ratio_low"] is not None else stat["ratio"])
        highs.append(stat["ratio_high"] if stat["ratio_high"] is not None else stat["ratio"])
    fig = go.Figure(go.Scatter(
        x=ratios, y=labels, mode="markers", marker={"size": 11, "color": A_COLOR},
        error_x={"type": "data", "symmetric": False, "array": [h - r for h, r in zip(highs, ratios, strict=True)],
                 "arrayminus": [r - lo for r, lo in zip(ratios, lows, strict=True)]},
        hovertemplate="%{y}: A / B = %{x:.4g}<extra></extra>", name="A / B",
    ))
    fig.add_shape(type="line", x0=1, x1=1, y0=0, y1=1, yref="paper", line={"dash": "dash", "color": LINE_COLOR})
    fig.update_xaxes(type="log", title="A / B, geometric mean over shared MLPs (< 1: A lower, better)")
    fig.update_layout(**LAYOUT, title="How much better, with 95% intervals")
    fig.update_layout(height=240)
    return fig


def noise_figure(verdict: dict) -> go.Figure:
    """The standard error of the mean MSE difference: from the reference's noise, from MLP-to-MLP spread."""
    noise = verdict["noise"]
    fig = go.Figure()
    if not noise.get("available"):
        # No bars to draw: the reason, wrapped to the panel, on a blank canvas (no axes to misread).
        reason = "<br>".join(textwrap.wrap(noise.get("reason", ""), 70))
        fig.add_annotation(text=reason, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)
        fig.update_layout(**LAYOUT, title=f"What limits the interval: {noise.get('headline') or 'not known'}")
        fig.update_layout(height=220)
        fig.update_xaxes(visible=False)
        fig.update_yaxes(visible=False)
        return fig
    parts = [("reference noise", noise["reference"]), ("MLP-to-MLP spread", noise["spread"]),
             ("total", noise["total"])]
    fig.add_trace(go.Bar(x=[v for _, v in parts], y=[n for n, _ in parts], orientation="h",
                         marker_color=[B_COLOR, A_COLOR, LINE_COLOR], hovertemplate="%{y}: %{x:.3g}<extra></extra>"))
    fig.update_xaxes(title="standard error of the mean paired MSE difference (total^2 = noise^2 + spread^2)")
    fig.update_layout(**LAYOUT, title=f"What limits the interval: {noise['limited_by']}", showlegend=False)
    fig.update_layout(height=240)
    return fig


# ---------------------------------------------------------------------------
# anatomy
# ---------------------------------------------------------------------------


def per_layer_figure(anatomy: dict) -> go.Figure:
    """Per-layer MSE of A (and B), log scale, layers 1-based as the challenge shows them."""
    fig = go.Figure()
    for key, name, color in (("per_layer_mse_a", "A", A_COLOR), ("per_layer_mse_b", "B", B_COLOR)):
        values = anatomy.get(key)
        if values:
            fig.add_trace(go.Scatter(x=list(range(1, len(values) + 1)), y=values, mode="lines+markers", name=name,
                                     line={"color": color}, hovertemplate=f"{name} layer %{{x}}: %{{y:.4g}}<extra></extra>"))
    fig.update_xaxes(title="layer", dtick=1)
    fig.update_yaxes(type="log", title="MSE (mean over MLPs)")
    fig.update_layout(**LAYOUT, title="Per-layer MSE")
    return fig


def shares_figure(anatomy: dict) -> go.Figure:
    """Final-layer squared error by neuron type: A's, B's and A - B's parts, each as a share of its total."""
    rows = [("A", "shares_a"), ("B", "shares_b"), ("A - B", "shares_difference")]
    fig = go.Figure()
    for name in CLASSES:
        ys, xs, texts = [], [], []
        for label, key in rows:
            shares = anatomy.get(key)
            if not shares:
                continue
            ys.append(label)
            xs.append(shares["shares"][name])
            texts.append(f"{shares['parts'][name]:.3g} of {shares['total']:.3g}")
        fig.add_trace(go.Bar(x=xs, y=ys, orientation="h", name=CLASS_LABELS[name], marker_color=CLASS_COLORS[name],
                             customdata=texts, hovertemplate="%{y} " + CLASS_LABELS[name]
                             + ": %{x:.1%} (%{customdata})<extra></extra>"))
    fig.update_xaxes(title="share of the final-layer squared error (sums to 1)", tickformat=".0%")
    fig.update_layout(**LAYOUT, barmode="relative", title="Where the final-layer error sits, by neuron type")
    fig.update_layout(height=260)
    return fig


def truth_bins_figure(anatomy: dict) -> go.Figure:
    """Mean final-layer squared error against |true mean| (first bin: dead neurons)."""
    bins = anatomy["by_truth"]
    edges = bins["edges"]
    centres = ["dead"] + [f"{math.sqrt(lo * hi):.2g}" for lo, hi in zip(edges[1:-1], edges[2:], strict=True)]
    fig = go.Figure()
    for key, name, color in (("mean_a", "A", A_COLOR), ("mean_b", "B", B_COLOR)):
        values = bins.get(key)
        if values:
            fig.add_trace(go.Bar(x=centres, y=values, name=name, marker_color=color, customdata=bins["counts"],
                                 hovertemplate=f"{name} |true mean| ~ %{{x}}: %{{y:.3g}} (%{{customdata}} neurons)"
                                               "<extra></extra>"))
    fig.update_xaxes(title="|true mean| of the final-layer neuron (bin centre)", type="category")
    fig.update_yaxes(type="log", title="mean squared error")
    fig.update_layout(**LAYOUT, barmode="group", title="Error against activation size")
    return fig


def heatmap_figure(heat: ErrorHeatmap) -> go.Figure:
    """One MLP's error, layers x neurons (binned): A's squared error, or A's minus B's (diverging, 0 = tie)."""
    values = np.asarray(heat.values, dtype=np.float64)
    diverging = heat.quantity != "squared error"
    bound = float(np.nanmax(np.abs(values))) if values.size else 1.0
    labels = [f"{int(s)}" if e - s == 1 else f"{int(s)}-{int(e) - 1}" for s, e in zip(heat.starts, heat.stops, strict=True)]
    fig = go.Figure(go.Heatmap(
        z=values.tolist(), x=labels, y=list(range(1, values.shape[0] + 1)),
        colorscale="RdBu_r" if diverging else "Viridis", zmid=0 if diverging else None,
        zmin=-bound if diverging else None, zmax=bound if diverging else None,
        colorbar={"title": {"text": heat.quantity}, "thickness": 12},
        hovertemplate="layer %{y}, neurons %{x}: %{z:.3g}<extra></extra>",
    ))
    fig.update_xaxes(title="neuron", type="category", showticklabels=len(labels) <= 64)
    fig.update_yaxes(title="layer", dtick=1, autorange="reversed")
    fig.update_layout(**LAYOUT, title=f"MLP {heat.mlp_index}: {heat.quantity} per neuron")
    return fig


def curve_difference_figure(rows: list[dict], metric: str = "score", ladder: list[float] | None = None) -> go.Figure:
    """A minus B at each budget, paired over their shared MLPs: the mean difference and its 95% interval.

    The x axis is the budget (log) over the ``ladder``'s budgets (and any row's), drawn or not; y is linear, through zero (below
    zero A is lower, i.e. better). A budget where the interval excludes zero is filled; one it does not is open;
    a budget one side lacks is named, and so is one where every shared MLP failed on a side (nothing to pair).
    """
    shown = [r for r in rows if not r.get("missing") and r["n"] and math.isfinite(r["mean_difference"])]
    word = METRICS.get(metric, METRICS["score"])[1]
    budgets = list(ladder or []) + [r["budget"] for r in rows if r.get("budget")]
    x_range = [math.log10(min(budgets)) - 0.3, math.log10(max(budgets)) + 0.3] if budgets else None
    fig = go.Figure(layout={**LAYOUT, "title": {"text": f"A − B per budget ({word}, paired over shared MLPs)",
                                                "font": {"size": 14}},
                            "xaxis": {"type": "log", "title": {"text": "budget B per MLP (FLOPs)"},
                                      "exponentformat": "power", "range": x_range},
                            "yaxis": {"title": {"text": f"mean paired difference of {word}"}, "zeroline": True,
                                      "exponentformat": "power"},
                            "meta": {"metric": metric, "budgets": [r["budget"] for r in shown]}})
    fig.add_hline(y=0, line={"color": LINE_COLOR, "dash": "dash", "width": 1})
    if shown:
        fig.add_trace(go.Scatter(
            x=[r["budget"] for r in shown], y=[r["mean_difference"] for r in shown], mode="lines+markers",
            name="A − B (95% bootstrap interval)", line={"color": DIFF_COLOR},
            marker={"size": 10, "color": DIFF_COLOR,
                    "symbol": ["circle" if r["resolved"] else "circle-open" for r in shown]},
            error_y={"type": "data", "symmetric": False,  # no interval where too few MLPs allow none
                     "array": [r["ci_high"] - r["mean_difference"] if r.get("verdict_possible", True) else 0
                               for r in shown],
                     "arrayminus": [r["mean_difference"] - r["ci_low"] if r.get("verdict_possible", True) else 0
                                    for r in shown]},
            customdata=[[r["n"], r["verdict"], r["p_value"], r["wins"], r["losses"]] for r in shown],
            hovertemplate=("B = %{x:.4g}<br>A − B %{y:.4g}<br>%{customdata[0]} shared MLPs · %{customdata[1]}<br>"
                           "p = %{customdata[2]:.3g} · A lower on %{customdata[3]}, B lower on %{customdata[4]}"
                           "<extra></extra>")))
    for r in rows:
        if r.get("missing"):
            text = f"no {r['missing']} point"
        elif not r["n"] and r.get("left_out"):
            text = "every shared MLP failed"
        else:
            continue
        fig.add_annotation(x=math.log10(r["budget"]), y=0, text=text, showarrow=False, yshift=14,
                           font={"size": 11, "color": LINE_COLOR})
    if not shown:  # a ladder with nothing stored yet is chosen budgets without a pair, not no budgets
        fig.add_annotation(x=0.5, y=0.95, xref="paper", yref="paper", showarrow=False, name="no-difference",
                           text="no budget has a pair to draw yet" if budgets else "no budgets chosen",
                           font={"size": 12, "color": LINE_COLOR})
    return fig
