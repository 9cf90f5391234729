"""The paper's main figure: cumulant propagation's MSE / Var against FLOPs, beside sampling's 1 / m.

A pure builder: ``PaperShape`` (``whestboard.band``) in, ``go.Figure`` out. x = FLOPs of ``predict`` as
flopscope meters them (log), y = final-layer MSE / mean final-layer variance (log). Drawn, back to front:
the region below the Monte Carlo reference's noise floor (1 / N_ref in these units), sampling's line
MSE / Var = 1 / m (m forward passes for the same FLOPs), and one point per cumulant spec (mean over the
shape's MLPs, bars 10-90% across them) with its own noise floor as a grey dash at the same FLOPs. Points
outside the frame (an unstable estimate far above 1) are pinned to its edge as triangles, the frame's rule.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from components.figures.frame import EDGE_SYMBOLS, Frame, edge_sides, log_coords, pinned
from whestboard.band import PaperShape, sampling_line

SAMPLING = "rgb(214, 39, 40)"
FLOOR_FILL = "rgba(120, 120, 120, 0.13)"
FLOOR_MARK = "rgba(90, 90, 90, 0.85)"
#: Colour by variant family, symbol by order K (the paper's SIMPLE light blue, BASE dark, AUGMENT green).
VARIANT_COLORS = {"diagonal": "rgb(255, 127, 14)", "simple": "rgb(31, 119, 180)", "base": "rgb(23, 42, 94)",
                  "augment": "rgb(44, 160, 44)"}
ORDER_SYMBOLS = {1: "circle", 2: "square", 3: "diamond"}
#: Above this MSE / Var an estimate is worse than knowing nothing by orders of magnitude: pinned to the top.
Y_CEILING = 1e2
HOVER = ("<b>%{customdata[0]}</b><br>%{customdata[1]}<br>FLOPs %{x:.4g} (m = %{customdata[2]:.3g} forward passes)"
         "<br>MSE / Var %{customdata[3]:.3g} (10–90%: %{customdata[4]:.3g} – %{customdata[5]:.3g}, "
         "%{customdata[6]} MLPs)<br>noise floor %{customdata[7]:.3g} · sampling at these FLOPs %{customdata[8]:.3g}"
         "<br>%{customdata[9]}<extra></extra>")


def _order_variant(spec: str) -> tuple[int, str]:
    parts = spec.split(":")
    order = int(parts[1])
    return order, parts[2] if len(parts) > 2 else {1: "diagonal", 2: "simple"}.get(order, "base")


def paper_frame(shape: PaperShape) -> Frame:
    """Every point's FLOPs and one forward pass; y from below the floor up to the worst point (capped)."""
    xs = [float(shape.flops_per_sample)] + [p.flops for p in shape.points if p.flops > 0]
    ys = [p.noise_floor for p in shape.points] + [min(p.mse_over_var, Y_CEILING) for p in shape.points
                                                  if p.mse_over_var > 0] + [1.0]
    return Frame(x=(math.log10(min(xs)) - 0.3, math.log10(max(xs)) + 0.5),
                 y=(math.log10(min(ys)) - 0.5, math.log10(max(ys)) + 0.3))


def _point_custom(shape: PaperShape, point) -> list:
    m = point.flops / shape.flops_per_sample
    sampling = 1.0 / m
    verdict = ("below the reference's noise floor: not resolved" if point.mse_over_var <= point.noise_floor
               else f"{sampling / point.mse_over_var:.3g}× better than sampling at equal FLOPs"
               if point.mse_over_var < sampling else f"{point.mse_over_var / sampling:.3g}× worse than sampling "
               "at equal FLOPs")
    return [point.spec, point.label, m, point.mse_over_var, point.low, point.high, point.n_mlps,
            point.noise_floor, sampling, verdict]


def paper_figure(shape: PaperShape | None, *, height: int = 560) -> go.Figure:
    """The figure of one shape; an empty frame with a sentence when nothing was measured."""
    fig = go.Figure()
    if shape is None or not shape.points:
        fig.update_layout(height=height, xaxis=dict(visible=False), yaxis=dict(visible=False),
                          annotations=[dict(text="Nothing measured yet: run python -m whestboard paper",
                                            showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)])
        return fig
    frame = paper_frame(shape)
    lo_x, hi_x = 10 ** (frame.x[0] - 0.5), 10 ** (frame.x[1] + 0.5)
    floor = float(np.mean([p.noise_floor for p in shape.points]))
    fig.add_trace(go.Scatter(x=[lo_x, hi_x], y=[floor, floor], mode="lines", line=dict(width=0), fill="tozeroy",
                             fillcolor=FLOOR_FILL, hoverinfo="skip",
                             name=f"below the reference's noise floor (1/N_ref, N_ref = {shape.n_ref:,})"))
    xs, ys = sampling_line(shape, (lo_x, hi_x))
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color=SAMPLING, width=1.5),
                             name="sampling: MSE / Var = 1/m", hovertemplate="sampling, m = %{customdata:.3g}: "
                             "MSE / Var %{y:.3g}<extra></extra>", customdata=shape.flops_per_sample / xs))
    lx, ly = log_coords([p.flops for p in shape.points], [p.mse_over_var for p in shape.points], frame)
    sides = edge_sides(lx, ly, frame)
    px, py = pinned(lx, ly, frame)
    for point, side, x_pin, y_pin in zip(shape.points, sides, px, py, strict=True):
        order, variant = _order_variant(point.spec)
        color = VARIANT_COLORS.get(variant, "rgb(110, 110, 110)")
        inside = side == ""
        marker = dict(size=12 if inside else 13, color=color, symbol=ORDER_SYMBOLS.get(order, "circle") if inside
                      else EDGE_SYMBOLS[side], line=dict(width=1, color="white"))
        error = (dict(type="data", symmetric=False, array=[max(point.high - point.mse_over_var, 0.0)],
                      arrayminus=[max(point.mse_over_var - point.low, 0.0)], color=color, thickness=1.2, width=4)
                 if inside else None)
        fig.add_trace(go.Scatter(x=[point.flops if inside else x_pin], y=[point.mse_over_var if inside else y_pin],
                                 mode="markers", marker=marker, error_y=error,
                                 name=point.label if inside else f"{point.label}: off the frame, {point.mse_over_var:.3g}",
                                 legendgroup=point.spec, customdata=[_point_custom(shape, point)],
                                 hovertemplate=HOVER))
    fig.add_trace(go.Scatter(x=[p.flops for p in shape.points], y=[p.noise_floor for p in shape.points],
                             mode="markers", marker=dict(symbol="line-ew-open", size=16, color=FLOOR_MARK,
                                                         line=dict(width=2, color=FLOOR_MARK)),
                             name="each point's noise floor (σ²/N_ref ÷ σ²)",
                             hovertemplate="noise floor of the reference: %{y:.3g}<extra></extra>"))
    budget = f", under B = {shape.budget:.3g}" if shape.budget else ", whole third-cumulant history"
    fig.update_layout(
        height=height, margin=dict(l=70, r=20, t=60, b=70),
        title=dict(text=f"Cumulant propagation against sampling: {shape.title}{budget}", font=dict(size=14)),
        xaxis=dict(type="log", range=list(frame.x), title="FLOPs of predict (flopscope)", exponentformat="power"),
        yaxis=dict(type="log", range=list(frame.y), title="final-layer MSE / Var", exponentformat="power"),
        legend=dict(orientation="v", x=1.01, y=1, xanchor="left", font=dict(size=11)),
    )
    return fig
