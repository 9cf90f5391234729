"""The convergence figure and its readout: pure builders, ``ConvergenceView`` in, Plotly/HTML out.

x = FLOPs per MLP (log), y = MSE against the reference (log). Drawn, back to
front: the region below the reference's noise floor (nothing there can be
resolved), the measured Monte Carlo band across MLPs (10-90%, 25-75%, median,
mean), the analytic mean sigma^2 / N (solid where measured, dashed where
extrapolated), markers at the budget B and at 10% of B, the white-box
baselines with 10-90% error bars across MLPs, and every recorded run at the
compute it actually spent; runs outside the frame are pinned to its edge as
triangles pointing where they are.
"""

from __future__ import annotations

import math
import re

import dash_bootstrap_components as dbc
import numpy as np
import plotly.graph_objects as go
from dash import html

from components.figures.frame import EDGE_SYMBOLS, Frame, edge_sides, log_coords, pinned
from components.figures.labels import (
    FONT_SIZE,
    NOMINAL_HEIGHT,
    NOMINAL_WIDTH,
    corner_label_box,
    place_labels,
    same_numbers,
    vertical_label_box,
)
from components.figures.style import FAILED_COLOR
from components.figures.text import plain
from components.format import sci
from whestboard.band import ConvergenceView, RunPoint
from whestboard.rules import sampling_mse
from whestboard.scoring import carries_claims

BAND_OUTER = "rgba(31, 119, 180, 0.13)"
BAND_INNER = "rgba(31, 119, 180, 0.28)"
BAND_LINE = "rgb(31, 119, 180)"
ANALYTIC = "rgb(20, 20, 20)"
RUN_GREY = "rgba(110, 110, 110, 0.75)"
HIGHLIGHT = "rgb(214, 39, 40)"
BASELINE_COLORS = {"mean": "rgb(255, 127, 14)", "cov": "rgb(44, 160, 44)"}
METRIC_LABELS = {"final": "final-layer MSE", "all": "all-layer MSE"}
RUN_HOVER = (
    "<b>%{customdata[2]}</b>%{customdata[3]}<br>"
    "%{customdata[4]} MLPs of %{customdata[11]} · %{customdata[8]} failed<br>"
    "MSE %{customdata[5]:.4g} · score %{customdata[6]:.4g}<br>"
    "multiplier %{customdata[7]:.3g} · C %{customdata[10]:.4g} FLOPs (F %{customdata[9]:.4g})"
    "%{customdata[12]}<extra></extra>"
)


# ---------------------------------------------------------------------------
# frame
# ---------------------------------------------------------------------------


def _positive(values) -> list[float]:
    return [float(v) for v in values if v is not None and np.isfinite(v) and v > 0]


def analytic(view: ConvergenceView, metric: str, flops) -> np.ndarray:
    """Mean sigma^2 / N with N = FLOPs / per-sample cost, at each x (the band's ``sampling_mse``)."""
    return np.array([sampling_mse(f, view.sigma2[metric], view.flops_per_sample) if np.isfinite(f) else np.nan
                     for f in np.asarray(flops, dtype=np.float64)])


def default_frame(view: ConvergenceView, metric: str = "final") -> Frame:
    """Wide enough for the band, the budget markers, the baselines and the noise floor; runs may fall outside."""
    table = view.band.get(metric)
    far = view.budget * (view.band_max_multiple or 4.0)
    xs = [view.charging_floor / 10, far]
    ys = _positive([view.noise_floor.get(metric)])
    if table is not None and not table.empty:
        xs += [float(table["flops"].min()), float(table["flops"].max())]
        ys += _positive(table[["p10", "p90", "expected"]].to_numpy().ravel())
    elif view.sigma2.get(metric):
        xs.append(16 * view.flops_per_sample)
        ys += _positive(analytic(view, metric, [16 * view.flops_per_sample, far]))
    for b in view.baselines:
        xs.append(b.flops)
        ys += _positive([b.mse[metric].get(k) for k in ("mean", "p10", "p90")])
    xs = _positive(xs)
    if not ys:
        ys = [1e-8, 1.0]
    return Frame(
        x=(math.log10(min(xs)) - 0.4, math.log10(max(xs)) + 0.3),
        y=(math.log10(min(ys)) - 0.5, math.log10(max(ys)) + 0.5),
    )


#: The farthest a zoom may reach, in decades either way (a frame past it is not one plotly drew).
ZOOM_DECADES = 60.0


def _zoom_range(value: object, default: tuple[float, float]) -> tuple[float, float]:
    """One axis of a stored zoom: two finite log10 bounds, low below high, else the default's."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return default
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
               and abs(v) <= ZOOM_DECADES for v in value):
        return default
    low, high = float(value[0]), float(value[1])
    return (low, high) if low < high else default


def frame_for(view: ConvergenceView, metric: str, stored: object) -> Frame:
    """The stored (zoomed) frame for this metric, completed from the default where it says nothing.

    ``stored`` comes from the browser (a store the page's own script writes, which anyone can post): each
    axis is used only when it is two finite log10 bounds in order, else it is the default's."""
    default = default_frame(view, metric)
    if not isinstance(stored, dict) or stored.get("metric") != metric:
        return default
    return Frame(x=_zoom_range(stored.get("x"), default.x), y=_zoom_range(stored.get("y"), default.y))


# ---------------------------------------------------------------------------
# traces
# ---------------------------------------------------------------------------


def _clean(values) -> np.ndarray:
    """Log axes cannot show a non-positive value (a corrected MSE below zero): leave a gap."""
    arr = np.asarray(values, dtype=np.float64)
    return np.where(arr > 0, arr, np.nan)


def _band_traces(view: ConvergenceView, metric: str) -> list[go.Scatter]:
    table = view.band[metric]
    x = table["flops"].to_numpy(np.float64)
    traces = []
    for lo, hi, fill, name in (("p10", "p90", BAND_OUTER, "10–90% of MLPs"), ("p25", "p75", BAND_INNER, "25–75% of MLPs")):
        traces.append(go.Scatter(x=x, y=_clean(table[hi]), mode="lines", line=dict(width=0), hoverinfo="skip",
                                 showlegend=False, legendgroup=lo, name=f"{name} (upper)"))
        traces.append(go.Scatter(x=x, y=_clean(table[lo]), mode="lines", line=dict(width=0), fill="tonexty",
                                 fillcolor=fill, hoverinfo="skip", legendgroup=lo, name=name))
    custom = [["band", int(r.n), float(r.p10), float(r.p25), float(r.p75), float(r.p90), float(r.mean),
               float(r.expected), float(r.p50)] for r in table.itertuples()]
    traces.append(go.Scatter(
        x=x, y=_clean(table["p50"]), mode="lines+markers", line=dict(color=BAND_LINE, width=2),
        marker=dict(size=4), name=f"median of {view.band_n_mlps} MLPs (Monte Carlo, measured)", customdata=custom,
        hovertemplate=("<b>Monte Carlo, N = %{customdata[1]:,} samples</b><br>FLOPs %{x:.4g}<br>median %{y:.3g}"
                       " · mean %{customdata[6]:.3g}<br>25–75%: %{customdata[3]:.3g} – %{customdata[4]:.3g}<br>"
                       "10–90%: %{customdata[2]:.3g} – %{customdata[5]:.3g}<br>σ²/N %{customdata[7]:.3g}"
                       "<extra></extra>"),
    ))
    traces.append(go.Scatter(x=x, y=_clean(table["mean"]), mode="markers", name="mean of MLPs (measured)",
                             marker=dict(symbol="x-thin-open", size=7, color=BAND_LINE, line=dict(width=1.5)),
                             hoverinfo="skip"))
    return traces


def _analytic_traces(view: ConvergenceView, metric: str, frame: Frame) -> list[go.Scatter]:
    """sigma^2/N: solid over the measured range, dashed beyond it (a straight line on log-log)."""
    if not view.sigma2.get(metric):
        return []
    lo, hi = 10 ** (frame.x[0] - 1), 10 ** (frame.x[1] + 1)
    label = f"mean σ²/N ({'avg_variance' if metric == 'final' else 'layer-averaged variance'} of the MLPs)"
    table = view.band.get(metric)
    hover = "σ²/N at %{x:.3g} FLOPs: %{y:.3g}<extra></extra>"
    if table is None or table.empty:
        xs = np.array([lo, hi])
        return [go.Scatter(x=xs, y=analytic(view, metric, xs), mode="lines", name=label + ", no band drawn",
                           line=dict(color=ANALYTIC, dash="dash", width=1.5), hovertemplate=hover)]
    m_lo, m_hi = float(table["flops"].min()), float(table["flops"].max())
    measured = np.array([m_lo, m_hi])
    gap = np.array([lo, m_lo, np.nan, m_hi, hi])
    return [
        go.Scatter(x=measured, y=analytic(view, metric, measured), mode="lines", name=label + ", measured range",
                   line=dict(color=ANALYTIC, width=2), hovertemplate=hover, legendgroup="analytic"),
        go.Scatter(x=gap, y=analytic(view, metric, gap), mode="lines", name="mean σ²/N, extrapolated",
                   line=dict(color=ANALYTIC, width=1.5, dash="dash"), hovertemplate=hover, connectgaps=False,
                   legendgroup="analytic"),
    ]


def _baseline_traces(view: ConvergenceView, metric: str) -> list[go.Scatter]:
    """One trace per baseline; a baseline with a failed MLP is drawn as failed (a cross, its own legend entry
    naming what failed, the failure written beside it): its mean holds the grader's fallback."""
    traces = []
    for b in view.baselines:
        stats = b.mse[metric]
        mean = stats["mean"]
        failed = bool(b.n_failed)
        traces.append(go.Scatter(
            x=[b.flops], y=[mean], mode="markers",  # labelled by baseline_labels, which keeps labels apart
            name=(f"{b.label}: failed ({b.failures}), not a result" if failed
                  else f"{b.label} (mean, 10–90% of MLPs)"),
            meta={"baseline": b.kind, "failed": failed, "failures": b.failures},
            marker=dict(symbol="x-thin-open", size=16, color=FAILED_COLOR, line=dict(color=FAILED_COLOR, width=3))
            if failed else dict(symbol="diamond", size=12, color=BASELINE_COLORS.get(b.kind, "purple"),
                                line=dict(color="white", width=1)),
            error_y=dict(type="data", symmetric=False, array=[max(stats["p90"] - mean, 0)],
                         arrayminus=[max(mean - stats["p10"], 0)], thickness=1.5, width=6),
            customdata=[["baseline", b.kind]],
            hovertemplate=(f"<b>{b.label}</b> ({b.source})<br>{b.n_mlps} MLPs · {b.failures or '0 failed'}<br>"
                           f"mean MSE {mean:.4g} (10–90%: {stats['p10']:.3g} – {stats['p90']:.3g})<br>"
                           f"score {b.adjusted_score:.4g} · multiplier {b.mean_multiplier:.3g}<br>"
                           f"C {b.flops:.4g} FLOPs (F {b.flops_used:.4g})<extra></extra>"),
        ))
    return traces


def baseline_labels(view: ConvergenceView, metric: str, frame: Frame, fixed: list[dict]) -> list[dict]:
    """One label per baseline as an annotation with a leader line, none overlapping another, a baseline's
    marker or the figure's ``fixed`` labels (``_markers``'s); baselines with the same numbers (the same
    estimator under two names: identical F and MSE across the MLPs) share one label that says so, with a
    leader line to each of them."""
    shown = [b for b in view.baselines if b.flops > 0 and (b.mse[metric].get("mean") or 0) > 0]
    if not shown:
        return []
    groups = same_numbers([(b.n_mlps, *(b.mse[metric][k] for k in sorted(b.mse[metric]))) for b in shown])
    heads = [min(group, key=lambda i: shown[i].flops) for group in groups]
    texts = [_group_text([shown[i] for i in group]) for group in groups]
    points = [(shown[h].flops, shown[h].mse[metric]["mean"], text) for h, text in zip(heads, texts, strict=True)]
    layout = place_labels(points, frame, obstacles=_fixed_boxes(fixed, frame))
    notes = []
    for group, head, text, (shift, offset, box) in zip(groups, heads, texts, layout, strict=True):
        b = shown[head]
        kinds = "+".join(shown[i].kind for i in group)
        notes.append(dict(x=math.log10(b.flops), y=math.log10(b.mse[metric]["mean"]), xref="x", yref="y",
                          text=text, showarrow=True, arrowhead=0, arrowwidth=1, arrowcolor="rgb(90,90,90)",
                          ax=shift, ay=offset, font=dict(size=FONT_SIZE), bgcolor="rgba(255,255,255,0.8)",
                          borderpad=1, name=f"label-baseline-{kinds}"))
        tail = _data_point(((box.left + box.right) / 2, (box.top + box.bottom) / 2), frame)
        for i in group:
            if i != head:  # a leader line from the shared label to each other baseline with its numbers
                other = shown[i]
                notes.append(dict(x=math.log10(other.flops), y=math.log10(other.mse[metric]["mean"]), xref="x",
                                  yref="y", axref="x", ayref="y", ax=tail[0], ay=tail[1], text="", showarrow=True,
                                  arrowhead=0, arrowwidth=1, arrowcolor="rgb(90,90,90)", standoff=6,
                                  name=f"leader-baseline-{other.kind}"))
    return notes


_SAME_AS = re.compile(r" \(= [^)]*\)$")


def _group_text(baselines: list) -> str:
    """A baseline's label; for several with the same MSE statistics, their names once, and how F compares."""
    if len(baselines) == 1:
        b = baselines[0]
        return f"{b.label}: FAILED, {b.failures}" if b.n_failed else b.label
    flops = [b.flops_used for b in baselines]
    spread = (max(flops) - min(flops)) / max(flops) if max(flops) > 0 else 0.0
    same = "identical F and MSE" if spread == 0 else f"identical MSE, F within {100 * spread:.2g}%"
    names = [_SAME_AS.sub("", b.label) for b in baselines]  # "K = 1 (= mean propagation)": the group says it
    return " = ".join(names) + f" ({same})"


def _fixed_boxes(fixed: list[dict], frame: Frame) -> list:
    """The boxes of the figure's own marker labels: the budget lines' (upright, hung from the top) and the
    noise floor's (on the right edge)."""
    boxes = []
    for note in fixed:
        if note.get("textangle") == -90:
            boxes.append(vertical_label_box(10 ** note["x"], frame, note["text"]))
        elif note.get("xref") == "paper":
            boxes.append(corner_label_box(10 ** note["y"], frame, note["text"]))
    return boxes


def _data_point(pixel: tuple[float, float], frame: Frame) -> tuple[float, float]:
    """Log10 axis coordinates of a point of the nominal plot area (``labels.to_pixels`` inverted)."""
    x = frame.x[0] + pixel[0] / NOMINAL_WIDTH * (frame.x[1] - frame.x[0])
    y = frame.y[1] - pixel[1] / NOMINAL_HEIGHT * (frame.y[1] - frame.y[0])
    return x, y


def _run_custom(run: RunPoint, metric: str, note: str = "") -> list:
    if run.failures:
        note = f"<br><b>{run.failures}</b>: the mean holds the grader's fallback, not a result{note}"
    return ["run", run.run_id, plain(run.label), f" · {plain(run.team)}" if run.team else "", run.n_mlps, run.mse[metric],
            run.adjusted_score if run.adjusted_score is not None else float("nan"), run.mean_multiplier,
            run.n_failed, run.flops_used, run.flops, run.dataset_key, note]


def run_traces(view: ConvergenceView, metric: str, highlight: str | None, frame: Frame) -> list[dict]:
    """The recorded runs as plain trace dicts, ``frame`` being what the user sees (runs outside are pinned).

    Plain dicts, shaped as ``go.Scatter(...).to_plotly_json()`` would be: they change with every
    recorded run, and skipping plotly's validation keeps their rebuild in milliseconds.
    """
    groups: dict[str, list] = {"inside": [], "failed": [], "highlighted": [], "edge": [], "edge-failed": []}
    shown = [run for run in view.runs if run.mse.get(metric) and run.mse[metric] > 0 and run.flops > 0]
    lx, ly = log_coords([r.flops for r in shown], [r.mse[metric] for r in shown], frame)
    sides = edge_sides(lx, ly, frame)
    px, py = pinned(lx, ly, frame)
    for i, run in enumerate(shown):
        hot = run.matches(highlight)
        if not sides[i]:
            group = "highlighted" if hot else ("failed" if run.n_failed else "inside")
            groups[group].append((run, run.flops, run.mse[metric], None, hot))
        else:
            note = f"<br><i>outside the frame ({sides[i]}): zoom out to see it</i>"
            group = "edge-failed" if run.n_failed and not hot else "edge"
            groups[group].append((run, float(px[i]), float(py[i]), (sides[i], note), hot))
    traces = []
    if groups["inside"]:
        traces.append(_points(groups["inside"], metric, f"recorded runs ({len(view.runs)})",
                              dict(size=7, color=RUN_GREY, line=dict(color="white", width=0.5))))
    if groups["failed"]:
        failed = _points(groups["failed"], metric, f"runs with failed MLPs ({len(groups['failed'])}): not results",
                         dict(size=12, symbol="x-thin-open", color=FAILED_COLOR, line=dict(color=FAILED_COLOR, width=2.5)))
        failed.update(mode="markers+text", text=_failure_labels(groups["failed"], frame), textposition="bottom center",
                      textfont={"size": 10, "color": FAILED_COLOR}, meta={"failed_runs": True})
        traces.append(failed)
    if groups["highlighted"]:
        symbols = ["x" if i[0].n_failed else "circle" for i in groups["highlighted"]]  # a failed run stays a cross
        traces.append(_points(groups["highlighted"], metric, f"highlighted: {plain(highlight)}",
                              dict(size=11, symbol=symbols, color=HIGHLIGHT, line=dict(color="black", width=1))))
    if groups["edge-failed"]:
        edge = groups["edge-failed"]
        failed = _points(edge, metric, f"runs with failed MLPs outside the frame ({len(edge)}, pinned to its edge)",
                         dict(size=11, symbol=[EDGE_SYMBOLS[item[3][0]] for item in edge], color=FAILED_COLOR,
                              line=dict(color="black", width=0.5)))
        failed.update(mode="markers+text", text=_failure_labels(edge, frame), meta={"failed_runs": True},
                      textposition=[("bottom center" if item[3][0] == "top" else "top center")
                                    for item in edge], textfont={"size": 10, "color": FAILED_COLOR})
        traces.append(failed)
    if groups["edge"]:
        symbols = [EDGE_SYMBOLS[item[3][0]] for item in groups["edge"]]
        colors = [HIGHLIGHT if item[4] else RUN_GREY for item in groups["edge"]]
        traces.append(_points(groups["edge"], metric, "runs outside the frame (pinned to its edge)",
                              dict(size=11, symbol=symbols, color=colors, line=dict(color="black", width=0.5))))
    return traces


def _failure_labels(items: list, frame: Frame) -> list[str]:
    """What failed, written beside each failed run; runs drawn on top of each other (closer than a few percent
    of the frame) share one label that counts them, so labels never overprint."""
    width, height = frame.x[1] - frame.x[0], frame.y[1] - frame.y[0]
    order = sorted(range(len(items)), key=lambda k: (items[k][1], items[k][2]))
    labels, anchor, count = [""] * len(items), None, 0
    for k in order:
        x, y = math.log10(items[k][1]), math.log10(items[k][2])
        if anchor is not None and abs(x - anchor[1]) < 0.08 * width and abs(y - anchor[2]) < 0.06 * height:
            count += 1
            labels[anchor[0]] = f"{items[anchor[0]][0].failures} (+{count} more failed run{'s' * (count > 1)} here)"
            continue
        anchor, count = (k, x, y), 0
        labels[k] = items[k][0].failures or ""
    return labels


def _points(items: list, metric: str, name: str, marker: dict) -> dict:
    return {
        "type": "scatter", "x": [i[1] for i in items], "y": [i[2] for i in items], "mode": "markers",
        "name": name, "marker": marker, "hovertemplate": RUN_HOVER,
        "customdata": [_run_custom(i[0], metric, i[3][1] if i[3] else "") for i in items],
    }


# ---------------------------------------------------------------------------
# markers and layout
# ---------------------------------------------------------------------------


def _markers(view: ConvergenceView, metric: str, frame: Frame) -> tuple[list[dict], list[dict]]:
    shapes, notes = [], []
    for name, x, dash, text in (
        ("budget", view.budget, "dash", f"B = {sci(view.budget)}"),
        ("charging-floor", view.charging_floor, "dot", "10% of B: charging floor"),
    ):
        shapes.append(dict(type="line", name=name, xref="x", yref="paper", x0=x, x1=x, y0=0, y1=1,
                           line=dict(color="rgb(120, 40, 140)", width=1.5, dash=dash), layer="above"))
        notes.append(dict(x=math.log10(x), y=1, xref="x", yref="paper", text=text, showarrow=False, textangle=-90,
                          xanchor="right", yanchor="top", font=dict(size=11, color="rgb(120, 40, 140)"),
                          bgcolor="rgba(255,255,255,0.7)", name=f"label-{name}"))
    floor = view.noise_floor.get(metric)
    if floor:
        shapes.append(dict(type="rect", name="below-noise-floor", xref="paper", yref="y", x0=0, x1=1,
                           y0=10 ** (frame.y[0] - 6), y1=floor, fillcolor="rgba(0,0,0,0.06)", line=dict(width=0),
                           layer="below"))
        shapes.append(dict(type="line", name="noise-floor", xref="paper", yref="y", x0=0, x1=1, y0=floor, y1=floor,
                           line=dict(color="rgb(90, 90, 90)", width=1.2, dash="dashdot"), layer="above"))
        notes.append(dict(x=1, y=math.log10(floor), xref="paper", yref="y", showarrow=False, xanchor="right",
                          yanchor="bottom", font=dict(size=11, color="rgb(70,70,70)"),
                          text=f"reference noise floor σ²/N_ref = {sci(floor)} (N_ref = {view.reference_samples:,})",
                          name="label-noise-floor"))
    return shapes, notes


def _title(view: ConvergenceView) -> str:
    band = (f"band of {view.band_n_mlps} MLPs up to {view.band_max_multiple:g}x B" if view.has_band
            else "no band measured yet")
    dataset = "" if view.dataset_key == view.round_tag else f" · dataset {view.dataset_key}"
    return f"{view.round_tag or 'custom shape'} · {view.width} x {view.depth}{dataset} · {band}"


def _frames(view: ConvergenceView, metric: str, frame: Frame | None,
            visible: Frame | None) -> tuple[Frame, Frame, Frame]:
    """(axes frame, visible frame, the union of both: how far lines and markers must reach)."""
    frame = frame or default_frame(view, metric)
    visible = visible or frame
    return frame, visible, frame.union(visible)


def static_figure(view: ConvergenceView, metric: str = "final", *, frame: Frame | None = None,
                  visible: Frame | None = None) -> go.Figure:
    """Everything but the recorded runs: band, sigma^2/N, baselines, markers and axes.

    It changes only with the band, the baselines or the frame, so the page caches it and adds the
    run dots (``run_traces``) on every render; ``convergence_figure`` is the two together.
    """
    frame, _, wide = _frames(view, metric, frame, visible)
    traces = []
    if view.band.get(metric) is not None and not view.band[metric].empty:
        traces += _band_traces(view, metric)
    traces += _analytic_traces(view, metric, wide) + _baseline_traces(view, metric)
    shapes, notes = _markers(view, metric, wide)
    notes = notes + baseline_labels(view, metric, frame, notes)
    # One construction, not add_trace per trace plus update_layout: plotly validates each step anew.
    return go.Figure(data=traces, layout=dict(
        shapes=shapes,
        annotations=notes,
        xaxis=dict(type="log", range=list(frame.x), title=dict(text="FLOPs per MLP (effective compute C)"),
                   exponentformat="power", showgrid=True, gridcolor="rgba(0,0,0,0.07)"),
        yaxis=dict(type="log", range=list(frame.y), title=dict(text=f"{METRIC_LABELS[metric]} vs the reference"),
                   exponentformat="power", showgrid=True, gridcolor="rgba(0,0,0,0.07)"),
        height=620,
        margin=dict(l=70, r=20, t=40, b=60),
        legend=dict(orientation="h", yanchor="top", y=-0.12, x=0, font=dict(size=11)),
        hovermode="closest",
        clickmode="event",
        uirevision=f"{view.dataset_key}:{metric}",
        meta={"budget": view.budget, "charging_floor": view.charging_floor, "metric": metric,
              "dataset": view.dataset_key, "round": view.round_tag},
        title=dict(text=_title(view), x=0.01, font=dict(size=15)),
    ))


def with_runs(static: dict, runs: list[dict]) -> dict:
    """A serialized static figure (``static_figure(...).to_plotly_json()``) with the run traces added."""
    return {**static, "data": [*static["data"], *runs]}


def convergence_figure(view: ConvergenceView, metric: str = "final", *, highlight: str | None = None,
                       frame: Frame | None = None, visible: Frame | None = None) -> go.Figure:
    """The whole picture for one dataset and one metric.

    ``frame`` sets the axes (the default frame when None; a double-click
    returns to it); ``visible`` is what the user currently sees after zooming
    (``frame`` when None): runs outside it are pinned to its edges.
    """
    fig = static_figure(view, metric, frame=frame, visible=visible)
    _, visible, _ = _frames(view, metric, frame, visible)
    fig.add_traces(run_traces(view, metric, highlight, visible))
    return fig


# ---------------------------------------------------------------------------
# readout
# ---------------------------------------------------------------------------


def better_or_worse(ratio: float) -> str:
    """3.2 -> "3.2x better", 0.5 -> "2x worse" (than sampling at equal FLOPs)."""
    return f"{ratio:.3g}x better" if ratio >= 1 else f"{1 / ratio:.3g}x worse"


def _ratio_text(cmp, what: str) -> list:
    if cmp is None:
        return [html.P("No sampling comparison is available for this point.", className="mb-0")]
    head = f"{better_or_worse(cmp.times_better)} than sampling at equal FLOPs"
    lines = [
        html.H5(head, className="mb-2", id="convergence-ratio"),
        html.P([f"{what} measured {sci(cmp.measured_mse)} against the reference. Monte Carlo with the same "
                f"{sci(cmp.flops)} FLOPs draws N = {cmp.samples:,.1f} samples and reaches σ²/N = "
                f"{sci(cmp.sampling_mse)} on average."], className="mb-1"),
    ]
    if cmp.at_noise_floor:
        lines.append(html.P(f"The measured MSE is within 2x of the reference noise floor ({sci(cmp.noise_floor)}): "
                            "the true error cannot be resolved with this reference, so the ratio is a lower bound.",
                            className="mb-0 text-warning-emphasis"))
    elif cmp.times_better_corrected is not None:
        lines.append(html.P(f"With the reference's own noise ({sci(cmp.noise_floor)}) subtracted from the measured "
                            f"MSE: {better_or_worse(cmp.times_better_corrected)}.", className="mb-0 text-muted"))
    return lines


def _failed_text(failures: str, what: str) -> list:
    """What a failed point's readout says instead of a comparison with sampling: none rests on it."""
    return [html.H5(f"Failed: {failures}", className="mb-2 text-danger", id="convergence-ratio"),
            html.P(f"A failed MLP is scored as the all-zero prediction with multiplier 1.0, so this {what}'s mean MSE "
                   "is not the estimator's error, and no comparison with sampling is drawn from it. A time-rule "
                   "failure on a busy machine may pass on a quiet one: score it again there.", className="mb-0")]


def readout_panel_placeholder() -> list:
    return [html.P("Click a run, a baseline or the band's median to compare it with Monte Carlo at the same FLOPs.",
                   className="text-muted mb-0", id="convergence-readout-hint")]


def readout_panel(view: ConvergenceView, metric: str, point: list | None) -> list:
    """What the clicked point is and how it compares with sampling that spends the same FLOPs."""
    if not point:
        return readout_panel_placeholder()
    kind = point[0]
    if kind == "run":
        run = view.run(point[1])
        if run is None or run.mse.get(metric) is None:
            return [html.P("That run is no longer stored.", className="mb-0")]
        cmp = view.compare(run.flops, run.mse[metric], metric, sigma2=run.sigma2.get(metric),
                           noise_floor=run.noise_floor.get(metric))
        title = f"{run.label}" + (f" · {run.team}" if run.team else "")
        meta = (f"{run.n_mlps} MLPs of {run.dataset_key} · score {sci(run.adjusted_score)} · multiplier "
                f"{run.mean_multiplier:.3g} · {run.n_failed} failed · σ² of {run.sigma2_basis}")
        return [html.Div(title, className="fw-semibold"), html.Div(meta, className="small text-muted mb-2"),
                *(_failed_text(run.failures, "run") if run.failures else _ratio_text(cmp, "This run"))]
    if kind == "baseline":
        b = view.baseline(point[1])
        if b is None:
            return [html.P("That baseline is not available.", className="mb-0")]
        cmp = view.compare(b.flops, b.mse[metric]["mean"], metric)
        meta = f"{b.n_mlps} MLPs · mean of the MLPs · {b.n_failed} failed · from the {b.source}"
        return [html.Div(b.label, className="fw-semibold"), html.Div(meta, className="small text-muted mb-2"),
                *(_failed_text(b.failures, "baseline") if b.failures else _ratio_text(cmp, "The baseline"))]
    if kind == "band":
        n, median, mean, expected = int(point[1]), float(point[8]), float(point[6]), float(point[7])
        flops = n * view.flops_per_sample
        return [html.Div(f"Monte Carlo itself: N = {n:,} samples, {sci(flops)} FLOPs", className="fw-semibold"),
                html.P(f"Across the band's {view.band_n_mlps} MLPs (noise-corrected): median {sci(median)}, "
                       f"mean {sci(mean)}; σ²/N = {sci(expected)} (mean / σ²/N = {mean / expected:.3g}).",
                       className="mb-1"),
                html.P("At equal FLOPs sampling is 1x by definition: the band is what the other points are "
                       "measured against.", className="mb-0 text-muted")]
    return [html.P("Nothing to compare for this point.", className="mb-0")]


def empty_figure(message: str) -> go.Figure:
    """A blank frame carrying a message, for when nothing can be drawn."""
    fig = go.Figure()
    fig.update_layout(height=620, xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)])
    return fig


def status_alerts(view: ConvergenceView) -> list:
    return [dbc.Alert(note, color="info", className="py-2 small mb-2") for note in view.notes]


# ---------------------------------------------------------------------------
# budget curves: one estimator at a ladder of budgets, over the band
# ---------------------------------------------------------------------------

CURVE_COLORS = ("rgb(214, 39, 40)", "rgb(148, 103, 189)", "rgb(140, 86, 75)", "rgb(227, 119, 194)",
                "rgb(23, 190, 207)", "rgb(188, 189, 34)")
CURVE_X = {"flops": "FLOPs per MLP (F, as metered)", "ratio": "FLOPs / B (share of each point's budget)"}
CURVE_Y = {"mse": "final-layer MSE vs the reference", "score": "score: MSE x max(0.1, C/B)",
           "var": "MSE / avg_variance (ARC's view)"}
FIXED_NOTE = "fixed cost: does not use more budget"
BELOW_FLOOR_NOTE = "below the reference noise floor: not resolved"


def _curve_xy(point: dict, x_axis: str, y_axis: str) -> tuple[float, float, float, float]:
    """(x, y, y_low, y_high) of one curve point in the chosen axes."""
    flops = float(point["flops_used"]["mean"] or 0.0)
    x = flops / point["budget"] if x_axis == "ratio" else flops
    stat = {"mse": point["final_layer_mse"], "score": point["score"], "var": point["mse_over_variance"]}[y_axis]
    return x, float(stat["mean"] or math.nan), float(stat["low"] or math.nan), float(stat["high"] or math.nan)


def _sampling_y(point: dict, y_axis: str) -> float:
    """Monte Carlo at the point's own FLOPs: sigma^2/N (raw and score: the multiplier is 1 at all of B), 1/m."""
    flops = float(point["flops_used"]["mean"] or 0.0)
    per_sample, var = point.get("mc_flops_per_sample"), point.get("mean_avg_variance")
    if flops <= 0 or not per_sample or not var:
        return math.nan
    m = flops / per_sample
    if y_axis == "var":
        return 1.0 / m
    if y_axis == "score":
        return var / m * max(0.1, flops / point["budget"])
    return var / m


FAILED_MARKER = {"symbol": "x-thin-open", "size": 13, "line": {"width": 2.5}}


def curve_traces(label: str, points: list[dict], *, x_axis: str = "flops", y_axis: str = "mse",
                 color: str = CURVE_COLORS[0], crossing: dict | None = None, fixed: bool = False) -> list[dict]:
    """One curve as plain trace dicts: points with 95% intervals over MLPs, sampling at the same FLOPs, the crossing.

    Points below the reference noise floor are open markers and say so; a fixed-cost estimator (identical
    FLOPs at every budget) is a vertical line, and its name says it does not use more budget. A point with a
    failed MLP (``scoring.carries_claims`` false) is never part of the line: it is drawn apart, as a cross
    in a trace of its own ("LABEL: failed points") labelled with what failed, at the grader's fallback.
    """
    rows = [(p, *_curve_xy(p, x_axis, y_axis)) for p in points]
    rows = [r for r in rows if r[1] > 0 and r[2] > 0]
    valid = [r for r in rows if carries_claims(r[0])]
    failed = [r for r in rows if not carries_claims(r[0])]
    shown = plain(label)  # a name someone chose, written into the figure as text
    name = f"{shown} ({FIXED_NOTE})" if fixed else shown
    traces = []
    if valid:
        custom = [[shown, p["budget"], p["n_mlps"], p["n_failed_mlps"], p["final_layer_mse"]["mean"],
                   p["score"]["mean"], p["flops_used"]["mean"], p["effective_compute"]["mean"],
                   BELOW_FLOOR_NOTE if p["below_noise_floor"] else "", p.get("run_id") or ""] for p, *_ in valid]
        traces.append({
            "type": "scatter", "x": [r[1] for r in valid], "y": [r[2] for r in valid], "mode": "lines+markers",
            "name": name, "legendgroup": label, "meta": {"curve": label, "fixed_cost": fixed},
            "line": {"color": color, "width": 2, "dash": "solid"},
            "marker": {"size": 9, "color": color, "line": {"color": "black", "width": 1},
                       "symbol": ["circle-open" if p["below_noise_floor"] else "circle" for p, *_ in valid]},
            "error_y": {"type": "data", "symmetric": False, "thickness": 1.2, "width": 4, "color": color,
                        "array": [max(r[4] - r[2], 0) for r in valid],
                        "arrayminus": [max(r[2] - r[3], 0) for r in valid]},
            "customdata": custom,
            "hovertemplate": ("<b>%{customdata[0]}</b> at B = %{customdata[1]:.4g}<br>%{customdata[2]} MLPs · "
                              "%{customdata[3]} failed<br>MSE %{customdata[4]:.4g} · score %{customdata[5]:.4g}<br>"
                              "F %{customdata[6]:.4g} · C %{customdata[7]:.4g} FLOPs<br>y %{y:.4g} (95% interval "
                              "over MLPs drawn)<br><i>%{customdata[8]}</i><extra></extra>"),
        })
        sampling = [(r[1], _sampling_y(r[0], y_axis)) for r in valid]
        traces.append({"type": "scatter", "x": [s[0] for s in sampling], "y": [s[1] for s in sampling],
                       "mode": "lines", "name": f"sampling at {shown}'s FLOPs", "legendgroup": label,
                       "showlegend": False, "line": {"color": color, "width": 1, "dash": "dot"}, "hoverinfo": "skip"})
    if failed:
        sentences = [p.get("failures") or f"{p['n_failed_mlps']} of {p['n_mlps']} MLPs failed" for p, *_ in failed]
        traces.append({
            "type": "scatter", "x": [r[1] for r in failed], "y": [r[2] for r in failed], "mode": "markers+text",
            "name": f"{shown}: failed points (the grader's fallback, not a result)", "legendgroup": label,
            "meta": {"failed_curve": label, "budgets": [p["budget"] for p, *_ in failed]},
            "marker": {**FAILED_MARKER, "color": color}, "text": sentences,
            "textposition": [("top center", "bottom center")[k % 2] for k in range(len(failed))],  # neighbours apart
            "textfont": {"size": 10, "color": color}, "cliponaxis": False,
            "customdata": [[shown, p["budget"], s, p["final_layer_mse"]["mean"]] for (p, *_), s in zip(failed, sentences, strict=True)],
            "hovertemplate": ("<b>%{customdata[0]}</b> at B = %{customdata[1]:.4g}: FAILED<br>%{customdata[2]}<br>"
                              "mean MSE %{customdata[3]:.4g} is the grader's fallback (the all-zero prediction), "
                              "not the estimator's error<extra></extra>"),
        })
    if fixed and valid:
        traces.append({"type": "scatter", "x": [valid[0][1]], "y": [max(r[2] for r in valid)], "mode": "text",
                       "text": [FIXED_NOTE], "textposition": "top center", "showlegend": False,
                       "textfont": {"color": color, "size": 11}, "hoverinfo": "skip", "name": "fixed-cost note"})
    if crossing and y_axis in ("mse", "var"):
        x = crossing["flops"] / crossing["budget"] if x_axis == "ratio" else crossing["flops"]
        y = crossing["mse_over_variance"] if y_axis == "var" else crossing["mse"]
        side = "better" if crossing["better_after"] else "worse"
        traces.append({"type": "scatter", "x": [x], "y": [y], "mode": "markers+text", "name": f"{shown} crosses sampling",
                       "legendgroup": label, "text": [f"crosses sampling at {sci(crossing['flops'])} FLOPs"],
                       "textposition": "bottom right", "textfont": {"size": 11, "color": color},
                       "marker": {"symbol": "star", "size": 16, "color": color, "line": {"color": "black", "width": 1}},
                       "meta": {"crossing": crossing},
                       "hovertemplate": (f"<b>{shown} crosses sampling</b><br>{sci(crossing['flops'])} FLOPs, MSE "
                                         f"{sci(crossing['mse'])}<br>{side} than sampling past it<extra></extra>")})
    return traces


def _band_in_curve_axes(view: ConvergenceView, x_axis: str, y_axis: str) -> list[dict]:
    """The Monte Carlo band (10–90% and median of the band's MLPs) in the curve's axes, at the round's B."""
    table = view.band.get("final")
    if table is None or table.empty or y_axis == "score":
        return []
    x = table["flops"].to_numpy(np.float64) / (view.budget if x_axis == "ratio" else 1.0)
    scale = 1.0 / view.sigma2["final"] if y_axis == "var" and view.sigma2.get("final") else 1.0
    to = lambda col: list(_clean(table[col].to_numpy(np.float64) * scale))  # noqa: E731 - one column
    return [
        {"type": "scatter", "x": list(x), "y": to("p90"), "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip",
         "showlegend": False, "name": "band 90%"},
        {"type": "scatter", "x": list(x), "y": to("p10"), "mode": "lines", "line": {"width": 0}, "fill": "tonexty",
         "fillcolor": BAND_OUTER, "hoverinfo": "skip", "name": f"Monte Carlo band, 10–90% of {view.band_n_mlps} MLPs"},
        {"type": "scatter", "x": list(x), "y": to("p50"), "mode": "lines", "line": {"color": BAND_LINE, "width": 1.5},
         "name": "Monte Carlo band, median" + (" / mean σ²" if y_axis == "var" else ""), "hoverinfo": "skip"},
    ]


def _curve_reference(view: ConvergenceView, x_axis: str, y_axis: str, xs: list[float]) -> list[dict]:
    """Sampling's own line over the frame: sigma^2/N (or 1/m) at the round's B, with the noise floor."""
    lo, hi = (min(xs) / 10, max(xs) * 10) if xs else (1e-4, 10.0)
    line_x = np.geomspace(lo, hi, 24)
    flops = line_x * (view.budget if x_axis == "ratio" else 1.0)
    m = flops / view.flops_per_sample
    traces = []
    if y_axis == "var":
        traces.append({"type": "scatter", "x": list(line_x), "y": list(1.0 / m), "mode": "lines",
                       "name": "sampling: MSE/Var = 1/m", "line": {"color": ANALYTIC, "dash": "dash", "width": 1.5},
                       "hovertemplate": "1/m at %{x:.3g}: %{y:.3g}<extra></extra>"})
    elif view.sigma2.get("final"):
        sigma2 = view.sigma2["final"]
        y = sigma2 / m * (np.maximum(0.1, flops / view.budget) if y_axis == "score" else 1.0)
        name = "sampling: mean σ²/N" + (" x max(0.1, F/B) at the round's B" if y_axis == "score" else "")
        traces.append({"type": "scatter", "x": list(line_x), "y": list(y), "mode": "lines", "name": name,
                       "line": {"color": ANALYTIC, "dash": "dash", "width": 1.5},
                       "hovertemplate": "sampling at %{x:.3g}: %{y:.3g}<extra></extra>"})
    return traces


def _curve_floor(view: ConvergenceView, y_axis: str) -> tuple[list[dict], list[dict]]:
    floor = view.noise_floor.get("final")
    if not floor:
        return [], []
    if y_axis == "var":
        floor, text = 1.0 / view.reference_samples, f"reference noise floor 1/N_ref = {sci(1.0 / view.reference_samples)}"
    elif y_axis == "score":
        floor, text = 0.1 * floor, f"reference noise floor x 0.1 (the lowest multiplier) = {sci(0.1 * floor)}"
    else:
        text = f"reference noise floor σ²/N_ref = {sci(floor)} (N_ref = {view.reference_samples:,})"
    shapes = [dict(type="rect", name="below-noise-floor", xref="paper", yref="y", x0=0, x1=1, y0=floor * 1e-6,
                   y1=floor, fillcolor="rgba(0,0,0,0.06)", line=dict(width=0), layer="below"),
              dict(type="line", name="noise-floor", xref="paper", yref="y", x0=0, x1=1, y0=floor, y1=floor,
                   line=dict(color="rgb(90, 90, 90)", width=1.2, dash="dashdot"), layer="above")]
    notes = [dict(x=1, y=math.log10(floor), xref="paper", yref="y", showarrow=False, xanchor="right",
                  yanchor="bottom", font=dict(size=11, color="rgb(70,70,70)"), text=text, name="label-noise-floor")]
    return shapes, notes


NO_CURVE_NOTE = "choose an estimator and sweep the budget to draw its curve"
NO_POINTS_NOTE = "no point of {labels} is stored yet: sweep the budget to score them"


def curve_figure(view: ConvergenceView, curves: list[dict], *, x_axis: str = "flops", y_axis: str = "mse") -> go.Figure:
    """Budget curves over the band. ``curves``: ``scoring.curve_data`` dicts (``label``, ``points``, ``crossing``,
    ``fixed_cost``), the one shape the lab, the convergence page and compare draw.

    x = FLOPs or FLOPs/B, y = raw MSE, score or MSE/avg_variance; sampling's line (sigma^2/N or 1/m), the
    reference's noise floor and the budget markers stay drawn: the band is the reference. With nothing to
    draw the frame is the one sampling spans from a tenth of the charging floor to ten times B (the floor
    inside it), and the placeholder sits at its top, clear of the floor line and the markers.
    """
    x_axis = x_axis if x_axis in CURVE_X else "flops"
    y_axis = y_axis if y_axis in CURVE_Y else "mse"
    traces: list[dict] = _band_in_curve_axes(view, x_axis, y_axis)
    drawn: list[dict] = []
    for i, curve in enumerate(curves):
        drawn += curve_traces(curve["label"], curve["points"], x_axis=x_axis, y_axis=y_axis,
                              color=CURVE_COLORS[i % len(CURVE_COLORS)], crossing=curve.get("crossing"),
                              fixed=bool(curve.get("fixed_cost")))
    unit = view.budget if x_axis == "ratio" else 1.0
    xs = [x for t in drawn for x in t["x"] if x and x > 0]
    empty = not xs
    xs = xs or [view.charging_floor / unit, view.budget / unit]
    reference = _curve_reference(view, x_axis, y_axis, xs)
    traces += reference + drawn
    shapes, notes = _curve_floor(view, y_axis)
    for name, x, dash, text in (("budget", view.budget, "dash", "round's B"),
                                ("charging-floor", view.charging_floor, "dot", "10% of B")):
        xv = x / unit
        shapes.append(dict(type="line", name=name, xref="x", yref="paper", x0=xv, x1=xv, y0=0, y1=1,
                           line=dict(color="rgb(120, 40, 140)", width=1.2, dash=dash), layer="above"))
        notes.append(dict(x=math.log10(xv), y=1, xref="x", yref="paper", text=text, showarrow=False, textangle=-90,
                          xanchor="right", yanchor="top", font=dict(size=11, color="rgb(120, 40, 140)"),
                          name=f"label-{name}"))
    if empty:
        text = (NO_POINTS_NOTE.format(labels=" or ".join(c["label"] for c in curves)) if curves else NO_CURVE_NOTE)
        notes.append(dict(x=0.5, y=0.97, xref="paper", yref="paper", showarrow=False, name="no-curve", text=text,
                          yanchor="top", bgcolor="rgba(255,255,255,0.85)", font=dict(size=12, color="rgb(70,70,70)")))
    x_range = [math.log10(min(xs) / 10), math.log10(max(xs) * 10)] if empty else None
    return go.Figure(data=traces, layout=dict(
        shapes=shapes, annotations=notes, height=560, hovermode="closest",
        xaxis=dict(type="log", title=dict(text=CURVE_X[x_axis]), exponentformat="power", range=x_range),
        yaxis=dict(type="log", title=dict(text=CURVE_Y[y_axis]), exponentformat="power",
                   range=_curve_y_range(drawn or reference, shapes, headroom=1.0 if empty else 0.5)),
        margin=dict(l=70, r=20, t=40, b=60), legend=dict(orientation="h", yanchor="top", y=-0.14, x=0),
        meta={"x": x_axis, "y": y_axis, "curves": [c["label"] for c in curves], "budget": view.budget,
              "empty": empty},
        title=dict(text=f"Budget curves · {_title(view)}", x=0.01, font=dict(size=14)),
    ))


def _curve_y_range(drawn: list[dict], shapes: list[dict], *, headroom: float = 0.5) -> list[float] | None:
    """Log range over the curves (their intervals included) and the noise floor: the shaded region below the
    floor must not stretch the axis down to where nothing is. ``headroom`` decades are left above the top
    (room for labels, or for the placeholder of an empty figure)."""
    ys = [y for t in drawn for y in (t.get("y") or []) if isinstance(y, (int, float)) and math.isfinite(y) and y > 0]
    for t in drawn:
        err = t.get("error_y") or {}
        ys += [y + e for y, e in zip(t.get("y") or [], err.get("array") or [], strict=False) if y + e > 0]
    ys += [s["y1"] for s in shapes if s.get("name") == "noise-floor"]
    if not ys:
        return None
    return [math.log10(min(ys)) - 0.5, math.log10(max(ys)) + headroom]


def curve_notes(curves: list[dict]) -> list:
    """What may be said of each curve, from ``scoring.curve_data``: its fixed cost, its failed points (drawn
    as failed, named), and a crossing only where points that carry claims resolve one."""
    notes = []
    for curve in curves:
        label = curve["label"]
        if curve.get("fixed_cost"):
            notes.append(html.Li(f"{label}: {FIXED_NOTE} (identical FLOPs on every MLP at every budget).",
                                 className="curve-fixed"))
        for budget, failures in (curve.get("failures") or {}).items():
            notes.append(html.Li(f"{label} at B = {sci(budget)}: {failures or 'MLPs failed'}. Drawn as a failed "
                                 "point (a cross): its MSE is the grader's fallback, and no claim rests on it.",
                                 className="curve-failed"))
        c = curve.get("crossing")
        if c:
            notes.append(html.Li(f"{label} crosses sampling at {sci(c['flops'])} FLOPs (MSE {sci(c['mse'])}, "
                                 f"B ≈ {sci(c['budget'])}): {'better' if c['better_after'] else 'worse'} than "
                                 "sampling past it.", className="curve-crossing"))
        elif curve["points"] and curve.get("claims_from", len(curve["points"])) < 2:
            notes.append(html.Li(f"{label}: fewer than two points without a failed MLP, so no crossing with "
                                 "sampling can be read from this ladder.", className="curve-crossing"))
        elif curve["points"]:
            notes.append(html.Li(f"{label} does not cross sampling on this ladder.", className="curve-crossing"))
    return notes


def curve_table(curves: list[dict], *, prefix: str = "curve") -> html.Div:
    """Every point of every curve, numbers beside the picture: means with 95% intervals, failures, floor."""
    header = html.Thead(html.Tr([html.Th(h) for h in ("estimator", "B", "F (mean)", "C (mean)", "final MSE [95%]",
                                                      "score [95%]", "MSE/Var", "failed", "")]))
    rows = []
    for curve in curves:
        for p in curve["points"]:
            mse, score = p["final_layer_mse"], p["score"]
            note = (p.get("failures") or "MLPs failed") if not carries_claims(p) else (
                BELOW_FLOOR_NOTE if p["below_noise_floor"] else "")
            rows.append(html.Tr([
                html.Td(curve["label"]), html.Td(sci(p["budget"])), html.Td(sci(p["flops_used"]["mean"])),
                html.Td(sci(p["effective_compute"]["mean"])),
                html.Td(f"{sci(mse['mean'])} [{sci(mse['low'])}, {sci(mse['high'])}]"),
                html.Td(f"{sci(score['mean'])} [{sci(score['low'])}, {sci(score['high'])}]"),
                html.Td(sci(p["mse_over_variance"]["mean"])), html.Td(p["n_failed_mlps"]), html.Td(note),
            ], className="table-danger" if not carries_claims(p) else None))
    return html.Div([html.Ul(curve_notes(curves), className="small mb-2", id=f"{prefix}-notes"),
                     dbc.Table([header, html.Tbody(rows)], size="sm", striped=True, className="small",
                               id=f"{prefix}-points") if rows else None])
