"""Figures of the leaderboard page: plain data in, ``go.Figure`` out, no I/O.

* ``scatter_figure``: every submission of a round at (mean FLOPs per MLP, MSE or
  score) over the Monte Carlo reference, budget and 10% markers, failures
  styled apart, out-of-frame dots pinned to the edge with a count, and one
  team highlighted. WebGL (Scattergl) so 10,000 dots pan and zoom smoothly.
* ``timeline_figure``: every submission by time against "x better than
  sampling" (MC@B / score), with the 1x parity line and rounds as shaded spans.
* ``density_scatter_figure`` and ``density_timeline_figure``: the same for a field of more
  than ``DOT_LIMIT`` graded submissions, which no browser should receive dot by dot: the
  density of the field in bins counted on the server (a heatmap, stated in the title), and
  as dots only what an organizer reads from it: every team's best, the frontier (no other
  submission spends fewer FLOPs for a lower value), a bounded sample of the outliers beyond
  each edge (each edge's count names all of them); on the timeline, each round's record line
  and every team's best per round. A zoom fetches the dots of its window (``window_trace``)
  when at most ``DOT_LIMIT`` lie there.

All put the highlighted team in the LAST trace (the timeline its best-so-far step
line just before it, the scatter the zoomed window's dots), so the page can re-highlight
and zoom with a small ``Patch`` instead of resending every dot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from components.figures.frame import EDGE_SYMBOLS, Frame, edge_sides, log_coords, pinned
from components.figures.text import plain
from whestboard.rules import sampling_mse

GREY = "rgba(90, 98, 110, 0.55)"
FAILED = "rgba(214, 96, 28, 0.85)"
HIGHLIGHT = "#d62728"
BAND = "rgba(31, 119, 180, 0.16)"
BAND_LINE = "rgba(31, 119, 180, 0.9)"
ROUND_COLOURS = ("rgba(31,119,180,0.10)", "rgba(44,160,44,0.10)", "rgba(148,103,189,0.10)", "rgba(255,127,14,0.10)")
ROUND_MARKERS = ("#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e")

Y_METRICS = {
    "score": ("adjusted_score", "adjusted score s = MSE x max(0.1, C/B)"),
    "mse": ("final_layer_mse", "final-layer MSE"),
}
X_METRICS = {
    "flops": ("mean_flops_used", "mean FLOPs per MLP (F)"),
    "compute": ("mean_effective_compute", "mean charged compute per MLP (C = F + lambda R)"),
}

#: Failed submissions are labelled with what failed while at most this many are drawn (then in their hover only).
FAILED_LABELS = 12
HOVER = (
    "<b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]}<br>"
    "score %{customdata[3]:.4g} · MSE %{customdata[4]:.4g}<br>"
    "multiplier %{customdata[5]:.3g} · failed MLPs %{customdata[6]}<br>"
    "FLOPs %{customdata[7]:.4g} · C %{customdata[8]:.4g}<extra></extra>"
)


@dataclass(frozen=True)
class McReference:
    """What the Monte Carlo curve behind the dots is drawn from."""

    budget: float
    mc_flops_per_sample: float
    mean_avg_variance: float | None  # None: no served dataset for the round, draw no curve
    noise_floor: float | None
    dataset_key: str | None
    band: pd.DataFrame | None = None  # columns flops, and any of p10 p25 p50 p75 p90 mean (final-layer MSE)
    #: MC@B_m (whestbench's ``mc_at_bm`` of ``mean_avg_variance``): the equal-score lines are multiples of it
    mc_at_b: float | None = None


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def hover_columns(points: pd.DataFrame) -> np.ndarray:
    """customdata rows: team, id, time, score, MSE, multiplier, failed MLPs, F, C."""
    times = pd.to_datetime(points["submitted_at"], utc=True).dt.strftime("%Y-%m-%d %H:%M UTC")
    failed = points["n_failed_mlps"].astype("Int64").astype(object).where(points["n_failed_mlps"].notna(), "—")
    cols = [
        points["team"].map(plain), points["submission_id"].map(plain), times,
        points["adjusted_score"], points["final_layer_mse"], points["mean_multiplier"], failed,
        points["mean_flops_used"], points["mean_effective_compute"],
    ]
    return np.array([list(row) for row in zip(*cols, strict=True)], dtype=object) if len(points) else np.empty((0, 9))


def _round_sig(values: np.ndarray, digits: int = 5) -> np.ndarray:
    """Fewer digits in the JSON; plenty for a log-scale dot and its hover."""
    out = np.asarray(values, dtype=np.float64).copy()
    finite = np.isfinite(out) & (out != 0)
    mags = np.floor(np.log10(np.abs(out[finite])))
    scale = 10.0 ** (digits - 1 - mags)
    out[finite] = np.round(out[finite] * scale) / scale
    return out


def mc_curve(ref: McReference, xs: np.ndarray, y_metric: str) -> np.ndarray:
    """Expected Monte Carlo value when spending ``xs`` FLOPs: sigma^2 / N (x multiplier for the score)."""
    mse = np.array([sampling_mse(x, ref.mean_avg_variance, ref.mc_flops_per_sample) for x in np.asarray(xs, float)])
    if y_metric == "score":
        return mse * np.maximum(0.1, xs / ref.budget)
    return mse


def default_frame(x: np.ndarray, y: np.ndarray, ref: McReference, y_metric: str) -> Frame:
    """Around the bulk of the dots (1st-99th percentile) and the budget, with room to spare.

    Robust percentiles keep one wild submission (a crash at MSE 1e3, a 0-FLOP
    fallback) from squashing the field; such dots become edge markers instead.
    """
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    lx, ly = np.log10(x[ok]), np.log10(y[ok])
    b = np.log10(ref.budget)
    if lx.size:
        x_lo, x_hi = np.percentile(lx, [1, 99])
        y_lo, y_hi = np.percentile(ly, [1, 99])
    else:
        x_lo, x_hi, y_lo, y_hi = b - 4, b, -8, -2
    x_lo, x_hi = min(x_lo, b - 3), max(x_hi, b)
    if y_metric == "mse" and ref.noise_floor and ref.noise_floor > 0:
        floor = np.log10(ref.noise_floor)
        if not lx.size or floor >= y_lo - 3:  # show the floor when it is within 3 decades of the field
            y_lo = min(y_lo, floor - 0.2)
    pad_x, pad_y = 0.25 * max(x_hi - x_lo, 1.0), 0.15 * max(y_hi - y_lo, 1.0)
    return Frame((x_lo - pad_x, x_hi + pad_x), (y_lo - pad_y, y_hi + pad_y))


# ---------------------------------------------------------------------------
# scatter
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Prepared:
    """A round's graded dots in the chosen axes, and the frame they are shown in."""

    graded: pd.DataFrame
    x_col: str
    y_col: str
    frame: Frame


def prepare(points: pd.DataFrame, ref: McReference, y_metric: str, x_metric: str) -> Prepared:
    graded, x_col, y_col = _graded(points, y_metric, x_metric)
    frame = default_frame(graded[x_col].to_numpy(np.float64), graded[y_col].to_numpy(np.float64), ref, y_metric)
    return Prepared(graded, x_col, y_col, frame)


def prepare_in(points: pd.DataFrame, y_metric: str, x_metric: str, frame: Frame) -> Prepared:
    """``prepare`` in a frame already chosen (the drawn figure's): a few rows, not the field it came from."""
    return Prepared(*_graded(points, y_metric, x_metric), frame)


def _graded(points: pd.DataFrame, y_metric: str, x_metric: str) -> tuple[pd.DataFrame, str, str]:
    """The graded rows with the chosen axes' columns (compute falls back to FLOPs where it is unknown)."""
    y_col, _ = Y_METRICS[y_metric]
    x_col, _ = X_METRICS[x_metric]
    graded = points[points["status"] == "graded"].copy()
    if x_metric == "compute":
        graded[x_col] = graded[x_col].fillna(graded["mean_flops_used"])
    return graded, x_col, y_col


def scatter_figure(
    points: pd.DataFrame,
    ref: McReference,
    *,
    round_tag: str,
    y_metric: str = "score",
    x_metric: str = "flops",
    team: str | None = None,
    failures: dict[str, str] | None = None,
) -> go.Figure:
    """Every graded submission of a round over the Monte Carlo reference.

    A submission with failed MLPs is drawn as failed: a cross in a trace of its own, named by what failed
    (``failures``: submission id -> "1 of 8 MLPs failed: residual time", ``leaderboard.failure_sentences``),
    written beside the dot while few enough are, and in its hover.
    """
    prep = prepare(points, ref, y_metric, x_metric)
    graded, frame = prep.graded, prep.frame
    x = graded[prep.x_col].to_numpy(np.float64)
    y = graded[prep.y_col].to_numpy(np.float64)
    fig = go.Figure()
    _add_reference(fig, ref, frame, y_metric, x_metric)
    lx, ly = log_coords(x, y, frame)
    side = edge_sides(lx, ly, frame)
    custom = hover_columns(graded)
    failed = graded["n_failed_mlps"].fillna(0).to_numpy() > 0
    inside = side == ""
    fig.add_trace(go.Scattergl(
        x=_round_sig(x[inside & ~failed]), y=_round_sig(y[inside & ~failed]), mode="markers", name="submissions",
        marker=dict(color=GREY, size=6), customdata=custom[inside & ~failed], hovertemplate=HOVER,
    ))
    shown = inside & failed
    said = [(failures or {}).get(sid) or f"{n} failed MLPs" for sid, n in
            zip(graded["submission_id"][shown], graded["n_failed_mlps"][shown], strict=True)]
    fig.add_trace(go.Scattergl(
        x=_round_sig(x[shown]), y=_round_sig(y[shown]), name="with failed MLPs",
        mode="markers+text" if shown.sum() <= FAILED_LABELS else "markers",
        marker=dict(color=FAILED, size=9, symbol="x-thin-open", line=dict(width=2, color=FAILED)),
        text=said, textposition="bottom center", textfont=dict(size=10, color=FAILED),
        customdata=[[*row, text] for row, text in zip(custom[shown].tolist(), said, strict=True)],
        hovertemplate=HOVER.replace("<extra></extra>", "<br><b>%{customdata[9]}</b><extra></extra>"),
        meta={"failed_submissions": graded["submission_id"][shown].tolist()},
    ))
    _add_edge_markers(fig, lx, ly, side, custom, frame)
    fig.add_trace(window_trace(prep.x_col, prep.y_col, None, 0))
    fig.add_trace(highlight_trace(prep, team))
    n_failed_subs = int((points["status"] != "graded").sum())
    title = f"{round_tag}: {len(graded):,} graded submissions"
    if n_failed_subs:
        title += f" ({n_failed_subs:,} failed submissions not plotted)"
    _scatter_layout(fig, title, frame, round_tag, y_metric, x_metric)
    return fig


def highlight_trace(prep: Prepared, team: str | None) -> go.Scattergl:
    """The highlighted team's submissions (drawn last, on top); empty when no team is chosen."""
    rows = prep.graded[prep.graded["team"] == team] if team else prep.graded.iloc[0:0]
    name = f"team: {plain(team)}" if team else "highlighted team"
    if len(rows) > DOT_LIMIT:  # a response stays bounded even for a team that submitted without end
        name += f" (its {DOT_LIMIT:,} lowest of {len(rows):,})"
        rows = rows.nsmallest(DOT_LIMIT, prep.y_col)
    lx, ly = log_coords(rows[prep.x_col].to_numpy(np.float64), rows[prep.y_col].to_numpy(np.float64), prep.frame)
    px, py = pinned(lx, ly, prep.frame)
    return go.Scattergl(
        x=_round_sig(px), y=_round_sig(py), mode="markers", name=name,
        marker=dict(color=HIGHLIGHT, size=11, line=dict(color="white", width=1.5)),
        customdata=hover_columns(rows), hovertemplate=HOVER, showlegend=bool(team),
    )


# ---------------------------------------------------------------------------
# the scatter of a large field: density bins plus the dots an organizer reads
# ---------------------------------------------------------------------------

#: Above this many graded submissions in a round the scatter is drawn as density plus chosen dots,
#: and a zoom fetches the dots of the window when at most this many lie in it.
DOT_LIMIT = 5_000
#: Dots drawn per frame edge in the density view (the edge's count names all of them).
EDGE_DOT_LIMIT = 200
#: Density bins across x and y (log10 units of the frame).
DENSITY_BINS = (90, 60)
DENSITY_SCALE = [[0.0, "rgba(222,235,247,0.9)"], [0.5, "rgba(107,174,214,0.9)"], [1.0, "rgba(8,48,107,0.95)"]]
BEST = "rgba(30, 30, 30, 0.9)"
FRONTIER = "#2ca02c"


def frontier_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The Pareto frontier: the dots no other dot beats on both axes (as low or lower x and y).

    Sorted by x (then y), a dot is on the frontier when its y is below every y before it;
    of exact duplicates one is kept. Zero, missing and infinite values are never on it.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    idx = np.flatnonzero(np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0))
    order = idx[np.lexsort((y[idx], x[idx]))]
    ys = y[order]
    before = np.concatenate([[np.inf], np.minimum.accumulate(ys)[:-1]]) if ys.size else ys
    mask = np.zeros(x.shape, bool)
    mask[order[ys < before]] = True
    return mask


@dataclass(frozen=True)
class FieldView:
    """What the density view of a round draws: which dots individually, and the bins of the rest."""

    best: np.ndarray  # positions (in prep.graded) of each team's best submission
    frontier: np.ndarray  # positions of the frontier, by increasing x
    edges: dict[str, tuple[np.ndarray, int]]  # edge -> (positions drawn, how many are beyond it)
    x_edges: np.ndarray  # bin edges, log10
    y_edges: np.ndarray
    counts: np.ndarray  # (y bins, x bins): submissions in the frame not drawn as a dot

    @property
    def drawn(self) -> np.ndarray:
        """Every position drawn as a dot (whose details the figure's hover needs)."""
        parts = [self.best, self.frontier, *(shown for shown, _ in self.edges.values())]
        return np.unique(np.concatenate(parts)).astype(int) if parts else np.zeros(0, int)


def field_view(prep: Prepared, best_ids) -> FieldView:
    """Each team's best (by ``best_ids``), the frontier on the chosen axes, a bounded sample of the dots
    beyond each edge, and the counts per bin of every other dot in the frame."""
    graded, frame = prep.graded, prep.frame
    x, y = graded[prep.x_col].to_numpy(np.float64), graded[prep.y_col].to_numpy(np.float64)
    lx, ly = log_coords(x, y, frame)
    side = edge_sides(lx, ly, frame)
    best = np.flatnonzero(graded["submission_id"].isin(set(best_ids)).to_numpy())
    on_frontier = frontier_mask(x, y)
    frontier = np.flatnonzero(on_frontier)
    frontier = frontier[np.lexsort((y[frontier], x[frontier]))]
    edges = {}
    for edge in EDGE_SYMBOLS:
        beyond = np.flatnonzero(side == edge)
        if not beyond.size:
            continue
        along = ly[beyond] if edge in ("left", "right") else lx[beyond]
        ordered = beyond[np.argsort(along, kind="mergesort")]
        picks = np.unique(np.linspace(0, ordered.size - 1, min(EDGE_DOT_LIMIT, ordered.size)).astype(int))
        edges[edge] = (ordered[picks], int(beyond.size))
    rest = side == ""
    rest[best] = False
    rest[frontier] = False
    x_edges = np.linspace(frame.x[0], frame.x[1], DENSITY_BINS[0] + 1)
    y_edges = np.linspace(frame.y[0], frame.y[1], DENSITY_BINS[1] + 1)
    counts, _, _ = np.histogram2d(ly[rest], lx[rest], bins=(y_edges, x_edges))
    return FieldView(best, frontier, edges, x_edges, y_edges, counts.astype(np.int64))


def density_scatter_figure(prep: Prepared, details: pd.DataFrame, view: FieldView, ref: McReference, *,
                           round_tag: str, y_metric: str, x_metric: str, n_not_graded: int = 0) -> go.Figure:
    """A large round: density of the field in bins computed on the server, and the dots an organizer reads.

    ``details`` holds the full rows (``store.frame`` columns) of ``view.drawn``, for their hover. The
    last two traces are the dots a zoom fetched (empty here) and the highlighted team (empty).
    """
    graded, frame = prep.graded, prep.frame
    fig = go.Figure()
    _add_reference(fig, ref, frame, y_metric, x_metric)
    by_id = details.set_index("submission_id")
    fig.add_trace(_density_trace(view))
    for name, positions, marker, mode in (
        (f"every team's best ({view.best.size:,})", view.best, dict(color=BEST, size=7), "markers"),
        (f"frontier: no other submission has fewer FLOPs and a lower value ({view.frontier.size:,})", view.frontier,
         dict(color=FRONTIER, size=8, symbol="diamond"), "lines+markers"),
    ):
        rows = graded.iloc[positions]
        lx, ly = log_coords(rows[prep.x_col].to_numpy(np.float64), rows[prep.y_col].to_numpy(np.float64), frame)
        px, py = pinned(lx, ly, frame)
        fig.add_trace(go.Scattergl(
            x=_round_sig(px), y=_round_sig(py), mode=mode, name=name, marker=marker,
            line=dict(color=FRONTIER, width=1, shape="hv"), customdata=hover_columns(by_id.loc[rows["submission_id"]]
                                                                                   .reset_index()),
            hovertemplate=HOVER,
        ))
    annotations = []
    for edge, (positions, count) in view.edges.items():
        rows = graded.iloc[positions]
        lx, ly = log_coords(rows[prep.x_col].to_numpy(np.float64), rows[prep.y_col].to_numpy(np.float64), frame)
        px, py = pinned(lx, ly, frame)
        fig.add_trace(go.Scattergl(
            x=_round_sig(px), y=_round_sig(py), mode="markers", name=f"outside the frame ({edge})",
            marker=dict(symbol=EDGE_SYMBOLS[edge], size=9, color="rgba(40,40,40,0.8)"),
            customdata=hover_columns(by_id.loc[rows["submission_id"]].reset_index()),
            hovertemplate="<i>outside the frame, shown at its edge</i><br>" + HOVER, showlegend=False,
        ))
        text = _edge_annotation(edge, count)
        if positions.size < count:
            text["text"] += f" ({positions.size:,} drawn)"
        annotations.append(text)
    for a in annotations:
        fig.add_annotation(**a)
    fig.add_trace(window_trace(prep.x_col, prep.y_col, None, 0))
    fig.add_trace(go.Scattergl(x=[], y=[], mode="markers", name="highlighted team", showlegend=False))
    title = (f"{round_tag}: {len(graded):,} graded submissions"
             + (f" ({n_not_graded:,} failed submissions not plotted)" if n_not_graded else "")
             + f"<br><sup>Shade: submissions per bin of the rest ({DENSITY_BINS[0]} x {DENSITY_BINS[1]} bins, "
             f"counted on the server); dots: every team's best, the frontier, outliers at the edges. Zoom in: "
             f"the dots of a window holding at most {DOT_LIMIT:,} are fetched and drawn.</sup>")
    _scatter_layout(fig, title, frame, round_tag, y_metric, x_metric)
    fig.update_layout(margin=dict(t=70))
    return fig


def _density_trace(view: FieldView) -> go.Heatmap:
    counts = view.counts.astype(float)
    shown = np.where(counts > 0, np.log10(np.maximum(counts, 1)), np.nan)
    top = max(float(np.nanmax(shown)) if np.isfinite(shown).any() else 0.0, 1.0)
    ticks = [t for t in range(int(np.floor(top)) + 1)]
    x_mid = 10.0 ** ((view.x_edges[:-1] + view.x_edges[1:]) / 2)
    y_mid = 10.0 ** ((view.y_edges[:-1] + view.y_edges[1:]) / 2)
    return go.Heatmap(
        x=_round_sig(x_mid), y=_round_sig(y_mid), z=np.round(shown, 3), customdata=view.counts.astype(np.int32),
        zmin=0, zmax=top, colorscale=DENSITY_SCALE,
        hovertemplate="%{customdata:,} submissions in this bin<extra>density</extra>", name="density of the rest",
        showscale=True, showlegend=True, colorbar=dict(title="per bin", tickvals=ticks,
                                                     ticktext=[f"{10 ** t:,}" for t in ticks], thickness=10, len=0.6),
    )


def window_trace(x_col: str, y_col: str, rows: pd.DataFrame | None, n_in_view: int,
                 limit: int = DOT_LIMIT) -> go.Scattergl:
    """The dots of a zoomed window (``rows``), or an empty trace saying how many lie there."""
    if rows is None or rows.empty:
        name = (f"{n_in_view:,} submissions in view: zoom in to at most {limit:,} to see them" if n_in_view
                else "dots in the zoomed window")
        return go.Scattergl(x=[], y=[], mode="markers", name=name, showlegend=bool(n_in_view),
                            marker=dict(color=GREY, size=6))
    x = rows[x_col].fillna(rows["mean_flops_used"]) if x_col == "mean_effective_compute" else rows[x_col]
    return go.Scattergl(
        x=_round_sig(x.to_numpy(np.float64)), y=_round_sig(rows[y_col].to_numpy(np.float64)), mode="markers",
        name=f"the {len(rows):,} submissions in view", marker=dict(color=GREY, size=6),
        customdata=hover_columns(rows), hovertemplate=HOVER,
    )


def _scatter_layout(fig: go.Figure, title: str, frame: Frame, round_tag: str, y_metric: str, x_metric: str) -> None:
    fig.update_layout(
        title=dict(text=title, x=0.01, font=dict(size=15)),
        xaxis=dict(type="log", title=X_METRICS[x_metric][1], range=list(frame.x), exponentformat="power"),
        yaxis=dict(type="log", title=Y_METRICS[y_metric][1] + " (lower is better)", range=list(frame.y),
                   exponentformat="power"),
        height=560, margin=dict(l=70, r=20, t=50, b=60),
        legend=dict(orientation="h", y=-0.16, x=0), hovermode="closest",
        uirevision=f"{round_tag}:{y_metric}:{x_metric}",
    )


def _add_edge_markers(fig: go.Figure, lx, ly, side, custom, frame: Frame) -> None:
    annotations = []
    for edge, symbol in EDGE_SYMBOLS.items():
        mask = side == edge
        count = int(mask.sum())
        if not count:
            continue
        px, py = pinned(lx[mask], ly[mask], frame)
        fig.add_trace(go.Scattergl(
            x=_round_sig(px), y=_round_sig(py), mode="markers", name=f"outside the frame ({edge})",
            marker=dict(symbol=symbol, size=9, color="rgba(40,40,40,0.8)"), customdata=custom[mask],
            hovertemplate="<i>outside the frame, shown at its edge</i><br>" + HOVER, showlegend=False,
        ))
        annotations.append(_edge_annotation(edge, count))
    for a in annotations:
        fig.add_annotation(**a)


def _edge_annotation(edge: str, count: int) -> dict:
    text = f"{count:,} outside {'◀▶▲▼'['left right top bottom'.split().index(edge)]}"
    spots = {
        "left": dict(x=0.0, y=0.5, xanchor="left", yanchor="middle"),
        "right": dict(x=1.0, y=0.5, xanchor="right", yanchor="middle"),
        "top": dict(x=0.5, y=1.0, xanchor="center", yanchor="top"),
        "bottom": dict(x=0.5, y=0.0, xanchor="center", yanchor="bottom"),
    }
    return dict(text=text, xref="paper", yref="paper", showarrow=False, bgcolor="rgba(255,255,255,0.85)",
                bordercolor="#888", borderwidth=1, font=dict(size=11), name=f"edge-{edge}", **spots[edge])


def _add_reference(fig: go.Figure, ref: McReference, frame: Frame, y_metric: str, x_metric: str = "flops") -> None:
    """Monte Carlo band (or its analytic mean), lines of equal score, noise floor, budget and 10% markers."""
    xs = np.logspace(frame.x[0] - 0.5, frame.x[1] + 0.5, 120)
    if ref.band is not None and not ref.band.empty:
        _add_band(fig, ref, y_metric)
    _add_equal_score_lines(fig, ref, frame, y_metric, x_metric)
    if ref.mean_avg_variance:
        fig.add_trace(go.Scatter(
            x=_round_sig(xs), y=_round_sig(mc_curve(ref, xs, y_metric)), mode="lines",
            name=f"Monte Carlo σ²/N (mean avg_variance of {ref.dataset_key})",
            line=dict(color=BAND_LINE, dash="dash", width=1.5), hoverinfo="skip",
        ))
    if ref.noise_floor and y_metric == "mse":
        fig.add_hline(y=ref.noise_floor, line=dict(color="#999", dash="dot", width=1))
        fig.add_annotation(x=0.0, y=float(np.log10(ref.noise_floor)), xref="paper", yref="y", showarrow=False,
                           text=f"reference noise floor of {ref.dataset_key}", xanchor="left", yanchor="bottom",
                           font=dict(size=10, color="#666"))
    for value, text, dash in ((ref.budget, "B (budget)", "dash"), (0.1 * ref.budget, "10% of B (charging floor)", "dot")):
        fig.add_vline(x=value, line=dict(color="#333" if dash == "dash" else "#777", dash=dash, width=1.2))
        # On a log axis an annotation's x is log10 of the value (add_vline's own label lands off-axis).
        fig.add_annotation(x=float(np.log10(value)), y=1.0, xref="x", yref="paper", text=text, showarrow=False,
                           xanchor="right", yanchor="top", textangle=-90, font=dict(size=11, color="#333"),
                           bgcolor="rgba(255,255,255,0.7)", name=f"marker-{text.split()[0]}")


#: The most equal-score lines drawn (every power of ten of "x better than sampling" the frame crosses).
EQUAL_SCORE_LINES = 8
EQUAL_SCORE = "rgba(148, 103, 189, 0.55)"


def equal_score_multiples(ref: McReference, frame: Frame, y_metric: str) -> list[float]:
    """The powers of ten m (m x better than sampling: score = MC@B / m) whose line crosses the frame.

    On the score axis the line is flat at MC@B / m; on the MSE axis it is MC@B / (m max(0.1, x / B)),
    which falls from MC@B / (0.1 m) at the charging floor, so the range of y it covers is widened by that.
    """
    if not ref.mc_at_b or ref.mc_at_b <= 0:
        return []
    top = np.log10(ref.mc_at_b) + (1.0 if y_metric == "mse" else 0.0)  # log10 of the line's highest y for m = 1
    bottom = np.log10(ref.mc_at_b) - (max(0.0, frame.x[1] - np.log10(ref.budget)) if y_metric == "mse" else 0.0)
    # line m spans y in [bottom - log m, top - log m]: keep it when that meets the frame's y range
    lowest, highest = int(np.floor(bottom - frame.y[1])), int(np.ceil(top - frame.y[0]))
    exponents = [j for j in range(max(lowest, -3), highest + 1)
                 if bottom - j <= frame.y[1] and top - j >= frame.y[0]]
    return [10.0 ** j for j in exponents[:EQUAL_SCORE_LINES]]


def equal_score_y(ref: McReference, xs: np.ndarray, multiple: float, y_metric: str) -> np.ndarray:
    """The value on the y axis of a submission ``multiple`` x better than sampling that spent ``xs``."""
    score = ref.mc_at_b / multiple
    if y_metric == "score":
        return np.full(np.shape(xs), score)
    return score / np.maximum(0.1, np.asarray(xs, np.float64) / ref.budget)


def _add_equal_score_lines(fig: go.Figure, ref: McReference, frame: Frame, y_metric: str, x_metric: str) -> None:
    """Lines of equal score, as "m x better than sampling" (MC@B / score), in one trace, labelled at the right."""
    multiples = equal_score_multiples(ref, frame, y_metric)
    if not multiples:
        return
    xs = np.logspace(frame.x[0] - 0.5, frame.x[1] + 0.5, 60)
    line_x, line_y = [], []
    for m in multiples:
        line_x += [*_round_sig(xs).tolist(), None]
        line_y += [*_round_sig(equal_score_y(ref, xs, m, y_metric)).tolist(), None]
    basis = "" if y_metric == "score" or x_metric == "compute" else " (taking C = F)"
    fig.add_trace(go.Scatter(x=line_x, y=line_y, mode="lines", hoverinfo="skip",
                             name=f"equal score: 1x, 10x, … better than sampling (MC@B / score){basis}",
                             line=dict(color=EQUAL_SCORE, width=1, dash="dashdot")))
    right = 10.0 ** (frame.x[1] - 0.02 * (frame.x[1] - frame.x[0]))
    for m in multiples:
        y = float(equal_score_y(ref, np.array([right]), m, y_metric)[0])
        if frame.y[0] <= np.log10(y) <= frame.y[1]:
            fig.add_annotation(x=float(np.log10(right)), y=float(np.log10(y)), xref="x", yref="y", showarrow=False,
                               text=f"{m:g}x", xanchor="right", yanchor="bottom", name=f"equal-score-{m:g}",
                               font=dict(size=10, color="rgba(118, 73, 159, 0.9)"))


def _add_band(fig: go.Figure, ref: McReference, y_metric: str) -> None:
    band = ref.band.sort_values("flops")
    xs = band["flops"].to_numpy(np.float64)
    factor = np.maximum(0.1, xs / ref.budget) if y_metric == "score" else 1.0
    for lo, hi, label in (("p10", "p90", "Monte Carlo 10-90%"), ("p25", "p75", "Monte Carlo 25-75%")):
        if lo in band and hi in band:
            fig.add_trace(go.Scatter(x=xs, y=band[hi].to_numpy() * factor, mode="lines", line=dict(width=0),
                                     hoverinfo="skip", showlegend=False))
            fig.add_trace(go.Scatter(x=xs, y=band[lo].to_numpy() * factor, mode="lines", line=dict(width=0),
                                     fill="tonexty", fillcolor=BAND, name=label, hoverinfo="skip"))
    if "p50" in band:
        fig.add_trace(go.Scatter(x=xs, y=band["p50"].to_numpy() * factor, mode="lines", name="Monte Carlo median",
                                 line=dict(color=BAND_LINE, width=1.5), hoverinfo="skip"))


# ---------------------------------------------------------------------------
# timeline
# ---------------------------------------------------------------------------


def round_spans(points: pd.DataFrame) -> list[tuple[str, pd.Timestamp, pd.Timestamp]]:
    """Each round's span on the time axis: from its first to its last submission."""
    spans = []
    for tag, grp in points.groupby("round", sort=False):
        times = pd.to_datetime(grp["submitted_at"], utc=True)
        spans.append((str(tag), times.min(), times.max()))
    return sorted(spans, key=lambda s: s[1])


def _plotly_time(moment: pd.Timestamp) -> str:
    """UTC wall time without an offset: plotly.js has no time zones, and every x must agree."""
    return pd.Timestamp(moment).tz_convert("UTC").strftime("%Y-%m-%d %H:%M:%S.%f")


TIMELINE_HOVER = HOVER.replace("<extra></extra>", "<br>%{y:.3g}x better than sampling (MC@B %{customdata[9]:.3g}, "
                               "%{customdata[10]})<extra></extra>")


def timeline_points(points: pd.DataFrame) -> pd.DataFrame:
    """The submissions a timeline can place: graded, with a finite positive MC@B / score."""
    return points[(points["status"] == "graded") & np.isfinite(points["vs_mc"]) & (points["vs_mc"] > 0)]


def timeline_figure(points: pd.DataFrame, *, team: str | None = None, round_order: list[str] | None = None) -> go.Figure:
    """Every graded submission by time against MC@B / score (log), rounds shaded, 1x parity line."""
    graded = timeline_points(points)
    fig = go.Figure()
    order = round_order or sorted(points["round"].unique())
    _add_round_spans(fig, graded, order)
    for tag in order:
        rows = graded[graded["round"] == tag]
        if rows.empty:
            continue
        colour = ROUND_MARKERS[order.index(tag) % len(ROUND_MARKERS)]
        fig.add_trace(_timeline_trace(rows, name=tag, marker=dict(color=colour, size=6, opacity=0.7)))
    fig.add_hline(y=1.0, line=dict(color="#333", dash="dash", width=1.2),
                  annotation_text="1x: as good as Monte Carlo at the budget", annotation_position="bottom right",
                  annotation_font_size=11)
    fig.add_trace(timeline_best_trace(graded, team))
    fig.add_trace(timeline_highlight_trace(graded, team))
    _timeline_layout(fig, "Field against sampling over time (MC@B / score, higher is better)")
    return fig


#: Time bins and "x better than sampling" bins of a large field's timeline density.
TIMELINE_BINS = (160, 50)


def _id_ranks(graded: pd.DataFrame) -> np.ndarray:
    """Each row's place in id order (the store reads rows so, and then no text is sorted): what breaks ties."""
    ids = graded["submission_id"]
    if ids.is_monotonic_increasing:
        return np.arange(len(ids))
    ranks = np.empty(len(ids), np.int64)
    ranks[np.argsort(ids.to_numpy(object), kind="stable")] = np.arange(len(ids))
    return ranks


def _times(rows: pd.DataFrame) -> np.ndarray:
    return pd.to_datetime(rows["submitted_at"], utc=True).to_numpy("datetime64[ns]").view(np.int64)


def timeline_record_positions(graded: pd.DataFrame, ranks: np.ndarray | None = None) -> np.ndarray:
    """Positions of the submissions that set a round's record when they came (by time, then id): each beats
    every earlier submission of its round on MC@B / score."""
    ranks = _id_ranks(graded) if ranks is None else ranks
    order = np.lexsort((ranks, _times(graded)))
    rounds = pd.factorize(graded["round"])[0][order]
    vs_mc = pd.Series(graded["vs_mc"].to_numpy(np.float64)[order])
    best_before = vs_mc.groupby(rounds).cummax().groupby(rounds).shift(1, fill_value=-np.inf).to_numpy()
    return order[vs_mc.to_numpy() > best_before]


def timeline_best_positions(graded: pd.DataFrame, ranks: np.ndarray | None = None) -> np.ndarray:
    """Positions of each team's best submission (highest MC@B / score) in each round, best first;
    the earliest, then the lowest id, on a tie."""
    ranks = _id_ranks(graded) if ranks is None else ranks
    pair = pd.factorize(graded["round"])[0].astype(np.int64) * (len(graded) + 1) + pd.factorize(graded["team"])[0]
    vs_mc = graded["vs_mc"].to_numpy(np.float64)
    # Only a row holding its pair's highest value can come first for it: sort those few, not the field.
    highest = pd.Series(vs_mc).groupby(pair).transform("max").to_numpy()
    candidates = np.flatnonzero((vs_mc == highest) | np.isnan(highest))
    order = candidates[np.lexsort((ranks[candidates], _times(graded)[candidates], -vs_mc[candidates]))]
    return order[~pd.Series(pair[order]).duplicated().to_numpy()]


def timeline_records(graded: pd.DataFrame) -> pd.DataFrame:
    """The submissions that set a round's record when they came (the field's best so far, MC@B / score)."""
    return graded.iloc[timeline_record_positions(graded)]


def timeline_team_bests(graded: pd.DataFrame) -> pd.DataFrame:
    """Each team's best submission (highest MC@B / score) in each round."""
    return graded.iloc[timeline_best_positions(graded)]


class TimelineMarks(NamedTuple):
    """Positions (in ``timeline_points`` of the field) of the dots a large timeline draws."""

    bests: np.ndarray
    records: np.ndarray


def timeline_marks(graded: pd.DataFrame) -> TimelineMarks:
    """Every team's best per round and each round's records, found once for the ids and the figure."""
    ranks = _id_ranks(graded)
    return TimelineMarks(timeline_best_positions(graded, ranks), timeline_record_positions(graded, ranks))


def timeline_drawn_ids(graded: pd.DataFrame, marks: TimelineMarks | None = None) -> list[str]:
    """The submissions a large timeline draws as dots (whose details its hover needs)."""
    marks = timeline_marks(graded) if marks is None else marks
    positions = np.concatenate([marks.bests, marks.records])
    return list(dict.fromkeys(graded["submission_id"].to_numpy(object)[positions].tolist()))


def density_timeline_figure(field: pd.DataFrame, details: pd.DataFrame, *, round_order: list[str] | None = None,
                            marks: TimelineMarks | None = None) -> go.Figure:
    """A large field over time: density of every submission in bins counted on the server, each round's
    record line, and every team's best per round as a dot (hover from ``details``, full rows with MC@B).

    The last two traces are the highlighted team's best-so-far line and its dots (empty here), as in
    ``timeline_figure``. ``marks``: ``timeline_marks`` of the field's points, when the caller has them.
    """
    graded = timeline_points(field)
    marks = timeline_marks(graded) if marks is None else marks
    fig = go.Figure()
    order = round_order or sorted(graded["round"].unique())
    _add_round_spans(fig, graded, order)
    times = pd.to_datetime(graded["submitted_at"], utc=True)
    seconds = (times - pd.Timestamp("1970-01-01", tz="UTC")).dt.total_seconds().to_numpy()
    ly = np.log10(graded["vs_mc"].to_numpy(np.float64))
    if seconds.size:
        t_edges = np.linspace(seconds.min(), seconds.max() + 1.0, TIMELINE_BINS[0] + 1)
        y_edges = np.linspace(ly.min(), ly.max() + 1e-9, TIMELINE_BINS[1] + 1)
        counts, _, _ = np.histogram2d(ly, seconds, bins=(y_edges, t_edges))
        shown = np.where(counts > 0, np.log10(np.maximum(counts, 1)), np.nan)
        top = max(float(np.nanmax(shown)), 1.0)
        ticks = list(range(int(np.floor(top)) + 1))
        mid_t = pd.to_datetime((t_edges[:-1] + t_edges[1:]) / 2, unit="s", utc=True)
        fig.add_trace(go.Heatmap(
            x=[_plotly_time(t) for t in mid_t], y=_round_sig(10.0 ** ((y_edges[:-1] + y_edges[1:]) / 2)),
            z=np.round(shown, 3), customdata=counts.astype(np.int32), zmin=0, zmax=top, colorscale=DENSITY_SCALE,
            hovertemplate="%{customdata:,} submissions in this bin<extra>density</extra>",
            name=f"density of all {len(graded):,} submissions", showlegend=True,
            colorbar=dict(title="per bin", tickvals=ticks, ticktext=[f"{10 ** t:,}" for t in ticks], thickness=10,
                          len=0.6),
        ))
    by_id = details.set_index("submission_id")
    bests = by_id.loc[graded["submission_id"].to_numpy(object)[marks.bests]].reset_index()
    fig.add_trace(_timeline_trace(bests, name=f"every team's best per round ({len(bests):,})",
                                  marker=dict(color=BEST, size=6, opacity=0.8)))
    records = graded.iloc[marks.records]
    for i, (tag, rows) in enumerate(records.groupby("round", sort=False)):
        shown_rows = by_id.loc[rows["submission_id"]].reset_index()
        colour = ROUND_MARKERS[order.index(tag) % len(ROUND_MARKERS)] if tag in order else ROUND_MARKERS[0]
        trace = _timeline_trace(shown_rows, name=f"{tag}: record so far", marker=dict(color=colour, size=8),
                                showlegend=i == 0)
        fig.add_trace(go.Scatter(x=trace.x, y=trace.y, mode="lines+markers", name=f"{tag}: record so far",
                                 line=dict(color=colour, shape="hv", width=1.5), marker=dict(color=colour, size=7),
                                 customdata=trace.customdata, hovertemplate=TIMELINE_HOVER))
    fig.add_hline(y=1.0, line=dict(color="#333", dash="dash", width=1.2),
                  annotation_text="1x: as good as Monte Carlo at the budget", annotation_position="bottom right",
                  annotation_font_size=11)
    fig.add_trace(timeline_best_trace(details.iloc[0:0], None))
    fig.add_trace(timeline_highlight_trace(details.iloc[0:0], None))
    _timeline_layout(fig, "Field against sampling over time (MC@B / score, higher is better)<br><sup>Shade: "
                     f"submissions per bin ({TIMELINE_BINS[0]} x {TIMELINE_BINS[1]}, counted on the server); dots: "
                     "every team's best per round and each round's record line</sup>")
    fig.update_layout(margin=dict(t=70))
    return fig


def _add_round_spans(fig: go.Figure, graded: pd.DataFrame, order: list[str]) -> None:
    spans = round_spans(graded)
    whole = (spans[-1][2] - spans[0][1]) if spans else pd.Timedelta(0)
    pad = max(whole * 0.01, pd.Timedelta(seconds=1))
    for i, (tag, start, end) in enumerate(spans):
        colour = ROUND_COLOURS[order.index(tag) % len(ROUND_COLOURS)] if tag in order else ROUND_COLOURS[0]
        fig.add_vrect(x0=_plotly_time(start - pad), x1=_plotly_time(end + pad), fillcolor=colour, line_width=0,
                      layer="below", annotation_text=tag, annotation_position="top left", annotation_font_size=11,
                      annotation_yshift=-14 * (i % 2))


def _timeline_layout(fig: go.Figure, title: str) -> None:
    fig.update_layout(
        title=dict(text=title, x=0.01, font=dict(size=15)),
        xaxis=dict(title="submitted (UTC)", type="date"),
        yaxis=dict(type="log", title="x better than Monte Carlo at B", exponentformat="power"),
        height=420, margin=dict(l=70, r=20, t=50, b=50),
        legend=dict(orientation="h", y=-0.2, x=0), hovermode="closest", uirevision="timeline",
    )


def _timeline_trace(rows: pd.DataFrame, *, name: str, marker: dict, showlegend: bool = True) -> go.Scattergl:
    custom = hover_columns(rows)
    extra = np.array(list(zip(rows["mc_at_b"], rows["mc_basis"], strict=True)), dtype=object).reshape(len(rows), 2)
    custom = np.concatenate([custom, extra], axis=1) if len(rows) else np.empty((0, 11))
    times = pd.to_datetime(rows["submitted_at"], utc=True).map(_plotly_time)
    return go.Scattergl(x=times.to_numpy(), y=_round_sig(rows["vs_mc"].to_numpy()), mode="markers", name=name,
                        marker=marker, customdata=custom, hovertemplate=TIMELINE_HOVER, showlegend=showlegend)


def timeline_best_trace(points: pd.DataFrame, team: str | None) -> go.Scatter:
    """The team's best so far (highest MC@B / score) as a step line per round; empty without a team."""
    graded = timeline_points(points)
    rows = graded[graded["team"] == team] if team else graded.iloc[0:0]
    xs: list = []
    ys: list = []
    for _tag, grp in rows.sort_values("submitted_at", kind="mergesort").groupby("round", sort=False):
        xs += [*pd.to_datetime(grp["submitted_at"], utc=True).map(_plotly_time), None]
        ys += [*_round_sig(grp["vs_mc"].cummax().to_numpy()).tolist(), None]
    return go.Scatter(x=xs[:-1], y=ys[:-1], mode="lines", line=dict(color=HIGHLIGHT, shape="hv", width=1.5),
                      name=f"team: {plain(team)}, best so far" if team else "best so far", showlegend=bool(team),
                      hoverinfo="skip", connectgaps=False)


def timeline_highlight_trace(points: pd.DataFrame, team: str | None) -> go.Scattergl:
    graded = timeline_points(points)
    rows = graded[graded["team"] == team] if team else graded.iloc[0:0]
    name = f"team: {plain(team)}" if team else "highlighted team"
    if len(rows) > DOT_LIMIT:  # bounded, as the scatter's highlight
        name += f" (its {DOT_LIMIT:,} best of {len(rows):,})"
        rows = rows.nlargest(DOT_LIMIT, "vs_mc").sort_values("submitted_at", kind="mergesort")
    return _timeline_trace(rows, name=name,
                           marker=dict(color=HIGHLIGHT, size=11, line=dict(color="white", width=1.5)),
                           showlegend=bool(team))


# ---------------------------------------------------------------------------
# integrity: public against private, a team's history
# ---------------------------------------------------------------------------

FLAGGED = "#d62728"
HONEST = "rgba(31, 119, 180, 0.8)"
COLOUR_CHOICES = ("flag", "share")
PUBPRIV_HOVER = ("<b>%{customdata[0]}</b><br>%{customdata[1]}<br>public %{x:.4g} · private %{y:.4g}<br>"
                 "private / public %{customdata[2]:.3g} (p = %{customdata[3]:.2g})<br>F / C %{customdata[4]}<br>"
                 "%{customdata[5]}<extra></extra>")


PUBPRIV_COLUMNS = ("team", "submission_id", "adjusted_score", "private_score", "private_ratio", "overfit_p",
                   "overfit", "flops_differ", "overfit_text", "fc_share")


def public_private_figure(table: pd.DataFrame | None, *, colour_by: str = "flag",
                          team: str | None = None) -> go.Figure:
    """Each team's public score against its private one (log-log) with y = x; flagged teams stand out.

    ``table`` is an integrity board (``integrity.board``) with ``public`` aggregates as
    ``adjusted_score`` and the organizer's columns. ``colour_by="share"`` colours by the
    instrumented share F / C (log scale) instead of the overfitting flag.
    """
    if table is None or "private_score" not in table:  # no private results to show (or not to this viewer)
        table = pd.DataFrame({c: pd.Series(dtype=object if c in ("team", "submission_id", "overfit_text") else float)
                              for c in PUBPRIV_COLUMNS})
    rows = table[np.isfinite(table["private_score"].astype(float)) & (table["private_score"].astype(float) > 0)
                 & (table["adjusted_score"].astype(float) > 0)]
    x, y = rows["adjusted_score"].to_numpy(float), rows["private_score"].to_numpy(float)
    fig = go.Figure()
    both = np.concatenate([x, y])
    low, high = (float(np.log10(both.min())) - 0.3, float(np.log10(both.max())) + 0.3) if both.size else (-8.0, -2.0)
    fig.add_trace(go.Scatter(x=[10**low, 10**high], y=[10**low, 10**high], mode="lines", name="private = public",
                             line=dict(color="#555", dash="dash", width=1), hoverinfo="skip"))
    share = rows["fc_share"].astype(float)
    custom = np.array([[plain(t), plain(sid), r, p, "—" if s != s else f"{s:.2g}", plain(text or "not flagged")]
                       for t, sid, r, p, s, text in zip(rows["team"], rows["submission_id"], rows["private_ratio"],
                                                        rows["overfit_p"], share, rows["overfit_text"], strict=True)],
                      dtype=object).reshape(len(rows), 6)
    flagged = rows["overfit"].astype(bool).to_numpy() | rows["flops_differ"].astype(bool).to_numpy()
    x = x.astype(float)
    if colour_by == "share":
        finite = share.where(share > 0)
        fig.add_trace(go.Scatter(
            x=x.tolist(), y=y.tolist(), mode="markers", name="teams (colour: F / C)", customdata=custom.tolist(),
            hovertemplate=PUBPRIV_HOVER,
            marker=dict(size=10, color=np.log10(finite.to_numpy(float)).tolist(), colorscale="Viridis", cmin=-5, cmax=0,
                        colorbar=dict(title="log10 F / C", thickness=12), symbol=np.where(flagged, "x", "circle"),
                        line=dict(color="white", width=0.5)),
        ))
    else:
        for mask, name, colour, symbol in ((~flagged, "teams", HONEST, "circle"),
                                           (flagged, "flagged: overfitting signature", FLAGGED, "x")):
            fig.add_trace(go.Scatter(x=x[mask].tolist(), y=y[mask].tolist(), mode="markers", name=name,
                                     customdata=custom[mask].tolist(),
                                     hovertemplate=PUBPRIV_HOVER, marker=dict(size=10, color=colour, symbol=symbol)))
    chosen = rows["team"] == team if team else np.zeros(len(rows), bool)
    fig.add_trace(go.Scatter(x=x[chosen].tolist(), y=y[chosen].tolist(), mode="markers", name=f"team: {plain(team)}" if team else "team",
                             showlegend=bool(team), hoverinfo="skip",
                             marker=dict(size=16, color="rgba(0,0,0,0)", line=dict(color=HIGHLIGHT, width=2.5))))
    fig.update_layout(
        title=dict(text=f"Public against private score, {len(rows)} teams (above the line: worse on the withheld MLPs)",
                   x=0.01, font=dict(size=15)),
        xaxis=dict(type="log", title="public score (lower is better)", range=[low, high], exponentformat="power"),
        yaxis=dict(type="log", title="private score", range=[low, high], exponentformat="power"),
        height=460, margin=dict(l=70, r=20, t=50, b=60), legend=dict(orientation="h", y=-0.18, x=0),
        hovermode="closest",
    )
    return fig


#: The least time a team's history spans: one submission (or several graded at once) on a day's axis, not on
#: the millisecond plotly.js zooms a single moment to.
HISTORY_MIN_SPAN = pd.Timedelta(days=1)


def history_figure(history: pd.DataFrame, *, team: str) -> go.Figure:
    """A team's submissions by time and its best-so-far score as a step line, one colour per round."""
    fig = go.Figure()
    for i, (tag, rows) in enumerate(history.groupby("round", sort=False)):
        colour = ROUND_MARKERS[i % len(ROUND_MARKERS)]
        times = pd.to_datetime(rows["submitted_at"], utc=True).map(_plotly_time).to_numpy()
        fig.add_trace(go.Scatter(x=times, y=rows["adjusted_score"], mode="markers", name=f"{tag}: submissions",
                                 marker=dict(color=colour, size=8), customdata=rows["submission_id"].map(plain),
                                 hovertemplate="%{customdata}<br>%{x}<br>score %{y:.4g}<extra></extra>"))
        fig.add_trace(go.Scatter(x=times, y=rows["best_so_far"], mode="lines", line=dict(color=colour, shape="hv"),
                                 name=f"{tag}: best so far", hoverinfo="skip"))
    moments = pd.to_datetime(history["submitted_at"], utc=True) if len(history) else pd.Series(dtype=object)
    x_range = None
    if len(moments) and moments.max() - moments.min() < HISTORY_MIN_SPAN:  # one moment: plotly spans a millisecond
        middle = moments.min() + (moments.max() - moments.min()) / 2
        x_range = [_plotly_time(middle - HISTORY_MIN_SPAN / 2), _plotly_time(middle + HISTORY_MIN_SPAN / 2)]
    fig.update_layout(
        title=dict(text=f"{plain(team)}: score over time and best so far", x=0.01, font=dict(size=14)),
        xaxis=dict(title="submitted (UTC)", type="date", range=x_range),
        yaxis=dict(type="log", title="score (lower is better)", exponentformat="power"),
        height=340, margin=dict(l=70, r=20, t=45, b=50), legend=dict(orientation="h", y=-0.25, x=0),
    )
    return fig
