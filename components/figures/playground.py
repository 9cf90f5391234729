"""Figures of the playground: one generated MLP, its truth and every estimator on it.

Pure builders (a ``Playground`` in, ``go.Figure`` out). The means heatmap, ribbon, node-link graph and
weight panels are the MLP page's own (``components.figures.explorer``); the ones here compare
estimators: per-layer MSE against the truth's own noise floor, the |error| heatmap binned like the MLP
page, and predicted against true for one layer. Arrays go to plotly as numpy, so they travel
base64-encoded and a 1024 x 16 page stays small.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from components.figures import explorer
from components.figures.text import plain
from whestboard.data import heatmap_bins, ribbon_quantiles, weight_stats
from whestboard.scoring import Playground, Scored

#: One colour per estimator, in the order the playground scores them; uploads take the rest.
COLOURS = ("#1f77b4", "#d62728", "#9467bd", "#2ca02c", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
FLOOR_COLOUR = "#7f7f7f"
ERROR_COLOURSCALE = "Magma"


def _layers(depth: int) -> np.ndarray:
    return np.arange(1, depth + 1)


def _framed(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=height,
                      margin=dict(l=60, r=20, t=40, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1))
    return fig


def colour_of(position: int) -> str:
    return COLOURS[position % len(COLOURS)]


def _positive(values) -> np.ndarray:
    """MSEs for a log axis: an exact zero (a dead layer predicted exactly) is drawn at the axis floor."""
    array = np.asarray(values, dtype=np.float64)
    return np.where(array > 0, array, np.nan)


def per_layer_mse_figure(result: Playground) -> go.Figure:
    """MSE of every estimator at every layer (log), with the truth's own noise floor per layer.

    Below the dashed line an estimator cannot be told from a perfect one against this truth: its
    observed MSE is, in expectation, its true MSE plus that floor.
    """
    layers = _layers(result.shape.depth)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=layers, y=result.truth.layer_noise_floors, name=f"truth's noise floor (N = {result.truth.n_samples:,})",
        mode="lines", line=dict(color=FLOOR_COLOUR, dash="dash", width=2),
        hovertemplate="layer %{x}: noise floor %{y:.3e}<extra></extra>"))
    for position, scored in enumerate(result.results):
        twin = next((plain(earlier.label) for earlier in result.results[:position]
                     if earlier.entry["per_layer_mse"] == scored.entry["per_layer_mse"]), None)
        label = plain(scored.label) + (" (failed: zero fallback)" if scored.failed else "") + (
            f" (= {twin}, drawn dashed)" if twin else "")
        fig.add_trace(go.Scatter(
            x=layers, y=_positive(scored.entry["per_layer_mse"]), name=label, mode="lines+markers",
            line=dict(color=colour_of(position), width=2, dash="dot" if scored.failed else "dash" if twin else "solid"),
            hovertemplate=f"{plain(scored.label)}<br>layer %{{x}}: MSE %{{y:.3e}}<extra></extra>"))
    fig.update_xaxes(title="layer", dtick=1 if len(layers) <= 16 else None)
    fig.update_yaxes(title="MSE against the truth", type="log", exponentformat="power")
    fig.update_layout(hovermode="x unified")
    _framed(fig, "Per-layer MSE of each estimator", height=420)
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0),
                      margin=dict(b=110))
    return fig


def error_heatmap_figure(result: Playground, scored: Scored) -> go.Figure:
    """|prediction - truth| over layers x neurons, binned to at most 256 columns like the MLP page."""
    errors = np.abs(scored.predictions.astype(np.float64) - result.truth.means.astype(np.float64))
    bins = heatmap_bins(errors)
    depth = errors.shape[0]
    customdata = np.stack([np.broadcast_to(bins.starts, bins.values.shape),
                           np.broadcast_to(bins.stops - 1, bins.values.shape), bins.high], axis=-1)
    span = "%{customdata[0]}" if bins.bin_size == 1 else "%{customdata[0]}–%{customdata[1]}"
    what = "|error|" if bins.bin_size == 1 else "mean |error| (largest %{customdata[2]:.3e})"
    fig = go.Figure(go.Heatmap(
        z=bins.values, x=np.arange(bins.columns), y=_layers(depth), customdata=customdata.astype(np.float32),
        colorscale=ERROR_COLOURSCALE, zmin=0.0, colorbar=dict(title=dict(text="|error|"), thickness=12),
        hovertemplate=f"layer %{{y}}<br>neurons {span}<br>{what}: %{{z:.3e}}<extra></extra>"))
    fig.update_xaxes(title="neuron" if bins.bin_size == 1 else f"neuron bin ({bins.bin_size} neurons each)")
    fig.update_yaxes(title="layer", autorange="reversed", dtick=1 if depth <= 16 else None)
    return _framed(fig, f"|error| of {plain(scored.label)}, layers x neurons", height=max(300, 120 + 18 * depth))


def predicted_vs_true_figure(result: Playground, scored: Scored, layer: int) -> go.Figure:
    """Every neuron of one layer: true mean against the estimator's, on the diagonal when right."""
    truth = result.truth.means[layer].astype(np.float64)
    predicted = scored.predictions[layer].astype(np.float64)
    top = float(max(truth.max(initial=0.0), predicted.max(initial=0.0))) or 1.0
    fig = go.Figure([
        go.Scatter(x=[0.0, top], y=[0.0, top], mode="lines", name="exact", hoverinfo="skip",
                   line=dict(color=FLOOR_COLOUR, dash="dash", width=1)),
        go.Scatter(x=truth, y=predicted, mode="markers", name=plain(scored.label), customdata=np.arange(truth.size),
                   marker=dict(size=6 if truth.size <= 256 else 4, opacity=0.75),
                   hovertemplate="neuron %{customdata}<br>true %{x:.4g}<br>predicted %{y:.4g}<extra></extra>"),
    ])
    fig.update_xaxes(title=f"true E[h] (layer {layer + 1})")
    fig.update_yaxes(title="predicted", scaleanchor="x", scaleratio=1)
    fig.update_layout(showlegend=False)
    return _framed(fig, f"{plain(scored.label)}: predicted vs true, layer {layer + 1}", height=380)


def truth_figures(result: Playground) -> dict[str, go.Figure]:
    """The MLP page's views of this MLP: means heatmap and ribbon, weights, and the graph when small."""
    means = result.truth.means
    figures = {
        "means": explorer.heatmap_figure(heatmap_bins(means)),
        "ribbon": explorer.ribbon_figure(ribbon_quantiles(means)),
        "weights": explorer.weight_stats_figure(weight_stats(result.generated.weights)),
    }
    if result.shape.width <= explorer.NETWORK_MAX_WIDTH:
        figures["network"] = explorer.network_figure(means, result.generated.weights)
    return figures
