"""Figures and CSV tables of the MLP explorer: statistics in, ``go.Figure`` / DataFrame out.

Pure functions, so each can be checked against numpy in a unit test. Every
figure has a ``*_table`` twin holding exactly the numbers it plots (the CSV
download), and arrays go to plotly as numpy so they travel base64-encoded,
which is what keeps a 1024 x 16 page light.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from whestboard.data import (
    ALWAYS_ON_RELATIVE_CLIP,
    DEAD_MEAN_THRESHOLD,
    NORM_PERCENTILES,
    HeatmapBins,
    WeightStats,
)

#: Plain-language explanations shown on hover, one per quantity the explorer names.
GLOSSARY: dict[str, str] = {
    "E[h]": (
        "E[h]: a neuron's mean activation over random inputs x ~ N(0, I). This is what an estimator "
        "must predict; the value shown is the dataset's Monte Carlo reference."
    ),
    "avg_variance": (
        "avg_variance: the variance of the final-layer activations over inputs, averaged over neurons. "
        "Monte Carlo with N samples has expected final-layer MSE avg_variance / N."
    ),
    "dead": (
        f"Dead neuron: reference mean at most {DEAD_MEAN_THRESHOLD:g}, i.e. it never fired on the "
        "reference samples. Its mean is exactly 0, so it is free to predict."
    ),
    "always-on": (
        f"Always-on neuron: the ReLU barely clips it. The clipped part E[max(-z, 0)] (z its "
        f"pre-activation) is under {ALWAYS_ON_RELATIVE_CLIP:.1%} of E[h]; for a Gaussian z that is "
        "negative on fewer than ~1% of inputs. It acts linearly: E[h] = sum_i W_ij E[h_prev,i]."
    ),
    "noise floor": (
        "Noise floor: avg_variance / N_ref, the MSE the reference's own sampling noise adds to any "
        "estimator's measured error. Differences below it cannot be resolved with this data."
    ),
    "mean field": (
        "Mean field: whestbench's mean-propagation baseline. It treats the neurons of a layer as "
        "independent Gaussians and pushes their means and variances through each layer."
    ),
    "clipped": (
        "Clipped mean E[max(-z, 0)] = E[h] - E[z]: how much the ReLU removes on average. Exact on the "
        "reference samples (E[z] = sum_i W_ij E[h_prev,i] is linear). 0 means always on."
    ),
    "incoming norm": (
        "Incoming-weight norm ||W[:, j]||: the length of the weights feeding neuron j. With He "
        "init (entries N(0, 2/width)) it concentrates near sqrt(2)."
    ),
    "spectral norm": (
        "Spectral norm: the largest factor by which layer l can stretch a vector. Estimated by "
        "Lanczos (a lower bound, typically within 0.5%); a random He matrix sits near 2*sqrt(2) = 2.83."
    ),
    "final_mean": "Statistics of the final-layer reference means E[h_L,i] over the MLP's neurons.",
    "dead_fraction": "Fraction of all neurons (every layer) that are dead in the reference.",
    "final_dead_fraction": "Fraction of final-layer neurons that are dead in the reference.",
}

RIBBON_LABELS = ("min", "p5", "p25", "median", "p75", "p95", "max")
BAND_COLOURS = ("rgba(31,119,180,0.12)", "rgba(31,119,180,0.22)", "rgba(31,119,180,0.38)")
MEAN_COLOURSCALE = "Viridis"
_MARGIN = dict(l=60, r=20, t=40, b=50)


def _layers(depth: int) -> np.ndarray:
    """Layer numbers as the challenge counts them: h_1 .. h_L."""
    return np.arange(1, depth + 1)


def _figure(*traces) -> go.Figure:
    """A figure on the app's default template (never named here: see components/figures/style.py)."""
    return go.Figure(data=list(traces))


def _base_layout(fig: go.Figure, title: str, height: int = 360) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=height,
                      margin=_MARGIN,
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1))
    return fig


# ---------------------------------------------------------------------------
# ribbon over depth
# ---------------------------------------------------------------------------


def ribbon_figure(ribbon: np.ndarray) -> go.Figure:
    """Nested bands of the neuron means per layer: min-max, 5-95%, 25-75%, and the median."""
    layers = _layers(ribbon.shape[0])
    fig = _figure()
    bands = (("min–max", 0, 6), ("5–95%", 1, 5), ("25–75%", 2, 4))
    for (name, lo, hi), colour in zip(bands, BAND_COLOURS, strict=True):
        fig.add_trace(go.Scatter(x=layers, y=ribbon[:, lo], name=f"{name} low", mode="lines",
                                 line=dict(width=0), showlegend=False, hoverinfo="skip",
                                 legendgroup=name))
        fig.add_trace(go.Scatter(x=layers, y=ribbon[:, hi], name=name, mode="lines", fill="tonexty",
                                 fillcolor=colour, line=dict(width=0), legendgroup=name,
                                 customdata=ribbon[:, lo],
                                 hovertemplate=f"{name}: %{{customdata:.4g}} – %{{y:.4g}}<extra></extra>"))
    fig.add_trace(go.Scatter(x=layers, y=ribbon[:, 3], name="median", mode="lines+markers",
                             line=dict(color="rgb(31,119,180)", width=2),
                             hovertemplate="median E[h]: %{y:.4g}<extra></extra>"))
    fig.update_layout(hovermode="x unified")
    fig.update_xaxes(title="layer", dtick=1 if len(layers) <= 16 else None)
    fig.update_yaxes(title="neuron mean E[h]")
    return _base_layout(fig, "Neuron means per layer")


def ribbon_table(ribbon: np.ndarray) -> pd.DataFrame:
    table = pd.DataFrame(ribbon, columns=list(RIBBON_LABELS))
    table.insert(0, "layer", _layers(ribbon.shape[0]))
    return table


# ---------------------------------------------------------------------------
# layers x neurons heatmap
# ---------------------------------------------------------------------------


def heatmap_figure(bins: HeatmapBins) -> go.Figure:
    """Binned ground-truth means; a click selects the bin's median neuron."""
    depth = bins.values.shape[0]
    first = np.broadcast_to(bins.starts, bins.values.shape)
    last = np.broadcast_to(bins.stops - 1, bins.values.shape)
    customdata = np.stack([bins.representative, bins.low, bins.high, first, last], axis=-1).astype(np.float32)
    unit = "rank" if bins.ordered else "neuron"
    span = "%{customdata[3]}" if bins.bin_size == 1 else "%{customdata[3]}–%{customdata[4]}"
    hover = (
        f"layer %{{y}}<br>{unit}s {span}<br>"
        + ("mean E[h]: %{z:.4g}" if bins.bin_size == 1 else
           "bin mean E[h]: %{z:.4g}<br>range %{customdata[1]:.4g} – %{customdata[2]:.4g}")
        + "<br>click: neuron %{customdata[0]}<extra></extra>"
    )
    fig = _figure(go.Heatmap(
        z=bins.values, x=np.arange(bins.columns), y=_layers(depth), customdata=customdata,
        colorscale=MEAN_COLOURSCALE, colorbar=dict(title=dict(text="E[h]"), thickness=12),
        hovertemplate=hover, zmin=0.0,
    ))
    if bins.ordered:
        x_title = "rank within layer (neurons sorted by mean)"
    else:
        x_title = "neuron" if bins.bin_size == 1 else f"neuron bin ({bins.bin_size} neurons each)"
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title="layer", autorange="reversed", dtick=1 if depth <= 16 else None)
    return _base_layout(fig, "Ground-truth means, layers x neurons", height=max(320, 120 + 18 * depth))


def heatmap_table(means: np.ndarray, dead: np.ndarray, always_on: np.ndarray,
                  mean_field_means: np.ndarray) -> pd.DataFrame:
    """Full resolution, one row per neuron: what the binned heatmap summarises."""
    depth, width = means.shape
    ranks = np.argsort(np.argsort(means, axis=1, kind="stable"), axis=1)
    return pd.DataFrame({
        "layer": np.repeat(_layers(depth), width),
        "neuron": np.tile(np.arange(width), depth),
        "truth_mean": means.reshape(-1),
        "rank_in_layer": ranks.reshape(-1),
        "dead": dead.reshape(-1),
        "always_on": always_on.reshape(-1),
        "mean_field_mean": mean_field_means.reshape(-1),
    })


# ---------------------------------------------------------------------------
# dead / always-on fractions
# ---------------------------------------------------------------------------


def fractions_figure(dead_fraction: np.ndarray, always_on_fraction: np.ndarray) -> go.Figure:
    """Stacked shares per layer: dead, in-between (the hard, kinked ones), always-on."""
    layers = _layers(len(dead_fraction))
    kinked = 1.0 - dead_fraction - always_on_fraction
    fig = _figure()
    for name, values, colour in (("dead", dead_fraction, "#7f7f7f"),
                                 ("kinked (sometimes clipped)", kinked, "#9ecae1"),
                                 ("always-on", always_on_fraction, "#e6550d")):
        fig.add_trace(go.Bar(x=layers, y=values, name=name, marker_color=colour,
                             hovertemplate=f"layer %{{x}}<br>{name}: %{{y:.2%}}<extra></extra>"))
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title="layer", dtick=1 if len(layers) <= 16 else None)
    fig.update_yaxes(title="share of neurons", tickformat=".0%", range=[0, 1])
    return _base_layout(fig, "Dead and always-on neurons per layer")


def fractions_table(dead_fraction: np.ndarray, always_on_fraction: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({
        "layer": _layers(len(dead_fraction)),
        "dead_fraction": dead_fraction,
        "always_on_fraction": always_on_fraction,
        "kinked_fraction": 1.0 - dead_fraction - always_on_fraction,
    })


# ---------------------------------------------------------------------------
# final-layer histogram
# ---------------------------------------------------------------------------


def histogram_figure(counts: np.ndarray, edges: np.ndarray, n_dead: int) -> go.Figure:
    """Distribution of the final-layer means, binned server-side."""
    centres = 0.5 * (edges[:-1] + edges[1:])
    fig = _figure(go.Bar(
        x=centres, y=counts, width=np.diff(edges), customdata=np.stack([edges[:-1], edges[1:]], axis=-1),
        marker_color="rgb(31,119,180)", name="neurons",
        hovertemplate="E[h] in [%{customdata[0]:.4g}, %{customdata[1]:.4g})<br>%{y} neurons<extra></extra>",
    ))
    fig.update_xaxes(title="final-layer mean E[h_L]")
    fig.update_yaxes(title="neurons")
    fig.add_annotation(text=f"{n_dead} dead (E[h] ≤ {DEAD_MEAN_THRESHOLD:g})", xref="paper", yref="paper",
                       x=0.99, y=0.98, showarrow=False, font=dict(size=11, color="#555"))
    return _base_layout(fig, "Final-layer means")


def histogram_table(counts: np.ndarray, edges: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"bin_low": edges[:-1], "bin_high": edges[1:], "neurons": counts})


# ---------------------------------------------------------------------------
# weight statistics
# ---------------------------------------------------------------------------

SPECTRAL_HE_LIMIT = 2.0 * np.sqrt(2.0)


#: (x domain, y domain) of the four weight panels, laid out by hand: make_subplots
#: costs more than the rest of the figure together.
_PANELS = (((0.0, 0.44), (0.58, 1.0)), ((0.56, 1.0), (0.58, 1.0)),
           ((0.0, 0.44), (0.0, 0.42)), ((0.56, 1.0), (0.0, 0.42)))
_PANEL_TITLES = ("entry std", "entry mean", "incoming-weight norm ||W[:, j]||", "spectral norm (Lanczos estimate)")


def _panel_axes() -> dict:
    layout: dict = {"annotations": []}
    for k, ((x0, x1), (y0, y1)) in enumerate(_PANELS, start=1):
        suffix = "" if k == 1 else str(k)
        layout[f"xaxis{suffix}"] = dict(domain=[x0, x1], anchor=f"y{suffix}", title="layer" if k > 2 else None)
        layout[f"yaxis{suffix}"] = dict(domain=[y0, y1], anchor=f"x{suffix}")
        layout["annotations"].append(dict(text=_PANEL_TITLES[k - 1], x=(x0 + x1) / 2, y=y1, xref="paper",
                                          yref="paper", xanchor="center", yanchor="bottom", showarrow=False,
                                          font=dict(size=13)))
    return layout


def weight_stats_figure(ws: WeightStats) -> go.Figure:
    """Four panels over depth: entry std, entry mean, incoming-norm spread, spectral norm."""
    layers = _layers(len(ws.entry_std))
    ends = [layers[0], layers[-1]]
    q = ws.incoming_norm_quantiles
    fig = _figure(
        go.Scatter(x=layers, y=ws.entry_std, mode="lines+markers", name="entry std",
                   hovertemplate="layer %{x}: std %{y:.5g}<extra></extra>"),
        go.Scatter(x=ends, y=[ws.he_std] * 2, mode="lines", name="He init sqrt(2/width)",
                   line=dict(dash="dash", color="#888"), hovertemplate="sqrt(2/width) = %{y:.5g}<extra></extra>"),
        go.Scatter(x=layers, y=ws.entry_mean, mode="lines+markers", name="entry mean", xaxis="x2", yaxis="y2",
                   hovertemplate="layer %{x}: mean %{y:.3g}<extra></extra>"),
        go.Box(x=layers, lowerfence=q[:, 0], q1=q[:, 1], median=q[:, 2], q3=q[:, 3], upperfence=q[:, 4],
               name="incoming norm", marker_color="rgb(44,160,44)", xaxis="x3", yaxis="y3"),
        go.Scatter(x=layers, y=ws.spectral_norm, mode="lines+markers", name="spectral norm", xaxis="x4",
                   yaxis="y4", hovertemplate="layer %{x}: ||W||_2 ≈ %{y:.4g}<extra></extra>"),
        go.Scatter(x=ends, y=[SPECTRAL_HE_LIMIT] * 2, mode="lines", name="2*sqrt(2) (random He limit)",
                   xaxis="x4", yaxis="y4", line=dict(dash="dot", color="#888"),
                   hovertemplate="2*sqrt(2) = %{y:.4g}<extra></extra>"),
    )
    fig.update_layout(showlegend=False, **_panel_axes())
    return _base_layout(fig, "Weight statistics per layer", height=520)


def weights_table(ws: WeightStats) -> pd.DataFrame:
    labels = {0.0: "min", 25.0: "q1", 50.0: "median", 75.0: "q3", 100.0: "max"}
    table = pd.DataFrame({
        "layer": _layers(len(ws.entry_std)),
        "entry_mean": ws.entry_mean,
        "entry_std": ws.entry_std,
        "he_std": ws.he_std,
        "spectral_norm_estimate": ws.spectral_norm,
    })
    for k, p in enumerate(NORM_PERCENTILES):
        table[f"incoming_norm_{labels[p]}"] = ws.incoming_norm_quantiles[:, k]
    return table


# ---------------------------------------------------------------------------
# node-link view (small networks)
# ---------------------------------------------------------------------------

NETWORK_MAX_WIDTH = 16
_EDGE_CLASSES = ((0.0, 1 / 3, 0.8, 0.12), (1 / 3, 2 / 3, 1.4, 0.3), (2 / 3, 1.01, 2.2, 0.6))


def network_edges(weights: np.ndarray) -> pd.DataFrame:
    """Every connection: source layer (0 = input), source neuron, target neuron, weight."""
    depth, width, _ = weights.shape
    layer, source, target = np.meshgrid(np.arange(depth), np.arange(width), np.arange(width), indexing="ij")
    return pd.DataFrame({"source_layer": layer.reshape(-1), "source": source.reshape(-1),
                         "target": target.reshape(-1), "weight": weights.reshape(-1).astype(np.float64)})


def network_figure(means: np.ndarray, weights: np.ndarray) -> go.Figure:
    """Neurons as dots coloured by E[h], edges coloured by sign and drawn thicker when larger.

    Edges are grouped into three magnitude classes per sign (six traces of
    line segments), which is what keeps a 16 x 16 x L drawing cheap.
    """
    depth, width = means.shape
    edges = network_edges(weights)
    scale = float(np.abs(edges["weight"]).max()) or 1.0
    relative = np.abs(edges["weight"].to_numpy()) / scale
    fig = _figure()
    for sign, colour in ((1, "214,39,40"), (-1, "31,119,180")):
        for lo, hi, line_width, alpha in _EDGE_CLASSES:
            chosen = edges[(np.sign(edges["weight"]) == sign) & (relative >= lo) & (relative < hi)]
            if chosen.empty:
                continue
            n = len(chosen)
            xs = np.empty(3 * n)
            ys = np.empty(3 * n)
            xs[0::3], xs[1::3], xs[2::3] = chosen["source_layer"], chosen["source_layer"] + 1, np.nan
            ys[0::3], ys[1::3], ys[2::3] = chosen["source"], chosen["target"], np.nan
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", hoverinfo="skip", showlegend=False,
                                     line=dict(width=line_width, color=f"rgba({colour},{alpha})")))
    fig.add_trace(go.Scatter(x=np.zeros(width), y=np.arange(width), mode="markers", name="input x",
                             marker=dict(size=12, color="#d9d9d9", line=dict(color="#555", width=1)),
                             hovertemplate="input %{y}: E[x] = 0<extra></extra>"))
    layer_grid, neuron_grid = np.meshgrid(_layers(depth), np.arange(width), indexing="ij")
    fig.add_trace(go.Scatter(
        x=layer_grid.reshape(-1), y=neuron_grid.reshape(-1), mode="markers", name="neurons",
        customdata=np.stack([layer_grid.reshape(-1), neuron_grid.reshape(-1)], axis=-1),
        marker=dict(size=14, color=means.reshape(-1).astype(np.float64), colorscale=MEAN_COLOURSCALE, cmin=0.0,
                    colorbar=dict(title=dict(text="E[h]"), thickness=12), line=dict(color="#333", width=1)),
        hovertemplate="layer %{x}, neuron %{y}<br>E[h] = %{marker.color:.4g}<br>click for details<extra></extra>",
    ))
    fig.update_xaxes(title="layer (0 = input)", dtick=1, showgrid=False, zeroline=False)
    fig.update_yaxes(title="neuron", autorange="reversed", dtick=1, showgrid=False, zeroline=False)
    fig.update_layout(showlegend=False)
    return _base_layout(fig, "Network (red: positive weights, blue: negative; thicker = larger)",
                        height=max(360, 60 + 26 * width))


# ---------------------------------------------------------------------------


def csv_text(table: pd.DataFrame) -> str:
    """CSV with every float written to 9 significant digits (round-trips float32 exactly)."""
    return table.to_csv(index=False, float_format="%.9g")
