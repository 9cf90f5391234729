"""Figures of the final standings: plain data in, ``go.Figure`` out, no I/O.

* ``shake_up_figure``: each finalist as a dot at (public rank among the finalists, final rank), the
  diagonal where nothing moved, and a segment from the diagonal to the dot (green: rose, red: fell).
  Rank 1 is at the top left, as on a board.
* ``rank_probability_figure``: P(rank <= k), teams (final order, top row first) x k, from the bootstrap.
* ``win_matrix_figure``: P(row team ranks strictly above column team); the hover gives P(tie).
* ``fragility_figure``: each team's median rank and 5-95% range when k MLPs are left out, per k.

The numbers come from ``whestboard.leaderboard`` (``shake_up``, ``bootstrap_standings``,
``fragility``); these builders only draw them, on plotly's default template (the app's).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from components.figures.leaderboard import HIGHLIGHT
from components.figures.text import plain, plain_all
from whestboard.leaderboard import BootstrapStandings, Fragility

ROSE = "rgba(44, 160, 44, 0.85)"
FELL = "rgba(214, 39, 40, 0.85)"
STAYED = "rgba(90, 98, 110, 0.85)"
PROBABILITY_SCALE = [[0.0, "#f7fbff"], [0.5, "#6baed6"], [1.0, "#08306b"]]
WIN_SCALE = [[0.0, "#b2182b"], [0.5, "#f7f7f7"], [1.0, "#2166ac"]]
#: Teams drawn in the fragility plot (the top of the standings: what a prize depends on).
FRAGILITY_TEAMS = 12
#: Heatmaps print their value in each cell up to this many teams.
CELL_TEXT_LIMIT = 20
LEFT_OUT_COLOURS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b")


def _layout(fig: go.Figure, title: str, *, height: int) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, font=dict(size=15)), height=height,
                      margin=dict(l=70, r=20, t=60, b=60), hovermode="closest")
    return fig


def _height(n_teams: int) -> int:
    return int(min(900, max(320, 140 + 24 * n_teams)))


def shake_up_figure(shake: pd.DataFrame, *, team: str | None = None) -> go.Figure:
    """Public rank (among the finalists) against final rank; movement as segments from the diagonal."""
    on_board = shake[np.isfinite(shake["public_rank_among_finalists"].astype(float))]
    n = int(max(len(shake), 1))
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0.5, n + 0.5], y=[0.5, n + 0.5], mode="lines", name="no movement",
                             line=dict(color="#555", dash="dash", width=1), hoverinfo="skip"))
    x = on_board["public_rank_among_finalists"].to_numpy(float)
    y = on_board["final_rank"].to_numpy(float)
    moved = on_board["moved"].to_numpy(float)
    for mask, name, colour in ((moved > 0, "rose", ROSE), (moved < 0, "fell", FELL)):
        xs = np.column_stack([x[mask], x[mask], np.full(mask.sum(), np.nan)]).ravel()
        ys = np.column_stack([x[mask], y[mask], np.full(mask.sum(), np.nan)]).ravel()
        fig.add_trace(go.Scatter(x=xs.tolist(), y=ys.tolist(), mode="lines", name=f"{name} ({int(mask.sum())})",
                                 line=dict(color=colour, width=2), hoverinfo="skip"))
    colour = np.where(moved > 0, ROSE, np.where(moved < 0, FELL, STAYED))
    custom = np.column_stack([plain_all(on_board["team"]), on_board["public_rank"].to_numpy(float),
                              moved]).tolist()
    fig.add_trace(go.Scatter(
        x=x.tolist(), y=y.tolist(), mode="markers", name="finalists", marker=dict(size=10, color=colour.tolist()),
        customdata=custom, hovertemplate=("<b>%{customdata[0]}</b><br>final rank %{y}<br>public rank among the "
                                          "finalists %{x} (board rank %{customdata[1]})<br>moved %{customdata[2]:+}"
                                          "<extra></extra>"),
    ))
    chosen = on_board["team"] == team if team else np.zeros(len(on_board), bool)
    fig.add_trace(go.Scatter(x=x[chosen].tolist(), y=y[chosen].tolist(), mode="markers", hoverinfo="skip",
                             name=f"team: {plain(team)}" if team else "team", showlegend=bool(team),
                             marker=dict(size=17, color="rgba(0,0,0,0)", line=dict(color=HIGHLIGHT, width=2.5))))
    missing = len(shake) - len(on_board)
    title = f"Shake-up: public rank against final rank, {len(on_board)} finalists"
    if missing:
        title += f"<br><sup>{missing} finalist(s) with no submission on the public board are not drawn</sup>"
    axis = dict(range=[n + 0.5, 0.5], dtick=1 if n <= 25 else None, zeroline=False)
    fig.update_xaxes(title="public rank among the finalists", **axis)
    fig.update_yaxes(title="final rank", **axis)
    fig.update_layout(legend=dict(orientation="h", y=-0.15, x=0))
    return _layout(fig, title, height=520)


def rank_probability_figure(boot: BootstrapStandings) -> go.Figure:
    """P(rank <= k): one row per team (final order, top first), one column per k."""
    n = len(boot.teams)
    ks = list(range(1, n + 1))
    fig = go.Figure(go.Heatmap(
        z=np.round(boot.rank_at_most, 4).tolist(), x=ks, y=plain_all(boot.teams), zmin=0, zmax=1,
        colorscale=PROBABILITY_SCALE, colorbar=dict(title="P", thickness=12),
        text=np.vectorize(lambda p: f"{p:.2f}")(boot.rank_at_most).tolist() if n <= CELL_TEXT_LIMIT else None,
        texttemplate="%{text}" if n <= CELL_TEXT_LIMIT else None,
        hovertemplate="<b>%{y}</b><br>P(rank ≤ %{x}) = %{z:.3f}<extra></extra>",
    ))
    fig.update_xaxes(title="k", dtick=1 if n <= 25 else None)
    fig.update_yaxes(title="team (final order)", autorange="reversed", type="category")
    return _layout(fig, f"P(rank ≤ k), {boot.draws:,} bootstrap resamples of the suite's {boot.n_mlps} MLPs",
                   height=_height(n))


def win_matrix_figure(boot: BootstrapStandings) -> go.Figure:
    """P(row team ranks strictly above column team); the diagonal is blank, the hover adds P(tie)."""
    n = len(boot.teams)
    wins = boot.wins.copy()
    np.fill_diagonal(wins, np.nan)
    z = [[None if np.isnan(v) else round(float(v), 4) for v in row] for row in wins]
    ties = np.round(boot.ties, 4).tolist()
    fig = go.Figure(go.Heatmap(
        z=z, x=plain_all(boot.teams), y=plain_all(boot.teams), zmin=0, zmax=1, colorscale=WIN_SCALE, customdata=ties,
        colorbar=dict(title="P(above)", thickness=12),
        text=[["" if v is None else f"{v:.2f}" for v in row] for row in z] if n <= CELL_TEXT_LIMIT else None,
        texttemplate="%{text}" if n <= CELL_TEXT_LIMIT else None,
        hovertemplate="P(<b>%{y}</b> ranks above %{x}) = %{z:.3f}<br>P(tie) = %{customdata:.3f}<extra></extra>",
    ))
    fig.update_xaxes(title="column team", type="category", tickangle=-45)
    fig.update_yaxes(title="row team ranks above…", autorange="reversed", type="category")
    return _layout(fig, f"Win probability, {boot.draws:,} bootstrap resamples (paired: the same MLPs for every team)",
                   height=_height(n))


def _rank_quantiles(share: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """Per team (rows of a rank distribution over ranks 1..n), the smallest rank whose cumulative share reaches q."""
    cumulative = np.cumsum(share, axis=1)
    return np.stack([1 + (cumulative < q - 1e-12).sum(axis=1) for q in qs], axis=1)


def fragility_figure(frag: Fragility, *, top: int = FRAGILITY_TEAMS) -> go.Figure:
    """Median rank and 5-95% range of the top teams for each number of MLPs left out."""
    teams = plain_all(frag.teams[:top])
    fig = go.Figure()
    offsets = np.linspace(-0.25, 0.25, max(len(frag.left_out), 1)) if len(frag.left_out) > 1 else [0.0]
    positions = np.arange(len(teams), dtype=float)
    for e, k in enumerate(frag.left_out):
        share = frag.rank_share[e][: len(teams)]
        low, median, high = _rank_quantiles(share, (0.05, 0.5, 0.95)).T
        stay_first = share[:, 0]
        how = "every subset" if frag.exact[e] else f"{frag.sets[e]:,} random subsets"
        fig.add_trace(go.Scatter(
            x=(positions + offsets[e]).tolist(), y=median.tolist(), mode="markers",
            name=f"{k} of {frag.n_mlps} MLPs left out ({how})",
            marker=dict(size=9, color=LEFT_OUT_COLOURS[e % len(LEFT_OUT_COLOURS)]),
            error_y=dict(type="data", symmetric=False, array=(high - median).tolist(),
                         arrayminus=(median - low).tolist(), thickness=1.5, width=4),
            customdata=np.column_stack([teams, low, high, stay_first]).tolist(),
            hovertemplate=("<b>%{customdata[0]}</b><br>median rank %{y}, 5-95%: %{customdata[1]}–%{customdata[2]}"
                           "<br>P(rank 1) = %{customdata[3]:.3f}<extra>" + f"{k} left out</extra>"),
        ))
    n = len(frag.teams)
    fig.update_xaxes(title="team (final order)", tickvals=positions.tolist(), ticktext=teams, tickangle=-30)
    fig.update_yaxes(title="rank on the rest of the suite", range=[n + 0.5, 0.5], dtick=1 if n <= 25 else None)
    fig.update_layout(legend=dict(orientation="h", y=-0.3, x=0))
    return _layout(fig, f"Fragility of the top: ranks when k of the {frag.n_mlps} MLPs are left out", height=480)
