"""Figures for an uploaded estimator's run: per-layer MSE against the baselines (data in, figure out)."""

from __future__ import annotations

import math

import plotly.graph_objects as go

from components.figures.text import plain

COLORS = {"upload": "#d62728", "mean": "#1f77b4", "cov": "#2ca02c"}
LABELS = {"mean": "mean propagation", "cov": "covariance propagation"}


def _positive(values: list[float | None]) -> list[float | None]:
    return [v if v is not None and math.isfinite(v) and v > 0 else None for v in values]


def per_layer_figure(series: dict[str, list[float | None]], *, upload_label: str,
                     noise_floor: float | None = None) -> go.Figure:
    """Mean MSE per layer (log y) of the upload and each baseline, on the same MLPs.

    ``series`` maps ``"upload"`` / ``"mean"`` / ``"cov"`` to per-layer MSEs.
    The reference's noise floor is a final-layer quantity (avg_variance / N_ref)
    and is drawn at the last layer only: below it two estimators cannot be told apart.
    """
    fig = go.Figure()
    for key, values in series.items():
        if not values:
            continue
        layers = list(range(1, len(values) + 1))
        name = plain(upload_label) if key == "upload" else LABELS.get(key, key)
        fig.add_trace(go.Scatter(
            x=layers, y=_positive(values), mode="lines+markers", name=name,
            line={"color": COLORS.get(key), "width": 3 if key == "upload" else 2,
                  "dash": "solid" if key == "upload" else "dot"},
            hovertemplate=f"{name}<br>layer %{{x}}<br>MSE %{{y:.3e}}<extra></extra>",
        ))
    depth = max((len(v) for v in series.values() if v), default=0)
    if noise_floor and noise_floor > 0 and depth:
        fig.add_trace(go.Scatter(
            x=[depth], y=[noise_floor], mode="markers", name="noise floor (final layer)",
            marker={"symbol": "line-ew-open", "size": 28, "color": "#7f7f7f", "line": {"width": 2}},
            hovertemplate="reference noise floor %{y:.2e}<extra></extra>",
        ))
    fig.update_layout(
        height=360, margin={"l": 60, "r": 20, "t": 30, "b": 50},
        xaxis={"title": "layer", "dtick": 1}, yaxis={"title": "mean MSE over the MLPs", "type": "log"},
        legend={"orientation": "h", "y": -0.25},
    )
    return fig
