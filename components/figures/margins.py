"""How close each MLP came to each cap, drawn the same way wherever a result is shown.

One panel (``margins_panel``) for the leaderboard's team panel and every lab, upload and playground
result: a table of each cap's worst MLP and its margin, the figure of every MLP's use of every cap as a
share of it (the cap at 100%), and, where flopscope's times were recorded, where predict's wall time
went. The numbers are ``whestboard.rules.cap_margins``'s; this module only draws them. An item's label may be
a name someone chose (an upload's file name on the playground): figures show it through ``text.plain``.
"""

from __future__ import annotations

import dash_bootstrap_components as dbc
import plotly.graph_objects as go
from dash import dcc, html

from components.figures.text import plain, plain_all
from components.format import sci
from whestboard.rules import CLOSE_SHARE, EDGE_SHARE, FALLBACK, CapMargin, CapMargins, TimeSplit

#: Each state's colour and what it means, from safe to failed.
STATE_STYLE = {
    "clear": ("#2c7fb8", f"under {CLOSE_SHARE:.0%} of the cap"),
    "close": ("#f0a202", f"{CLOSE_SHARE:.0%}-{EDGE_SHARE:.0%} of the cap: within 2x of it"),
    "edge": ("#e8590c", f"{EDGE_SHARE:.0%} of the cap or more: a busier machine or a harder MLP may "
                                  "push it over"),
    "over": ("#c92a2a", f"past the cap: {FALLBACK}"),
}
PART_STYLE = {"participant": ("participant code", "#7048e8"), "kernel": ("flopscope kernels", "#2c7fb8"),
              "overhead": ("flopscope overhead", "#74c0fc"), "comms": ("comms with the flopscope server", "#adb5bd"),
              "other": ("not attributed", "#dee2e6")}
#: The wall cap is drawn over the time split when the longest MLP took at least this share of it.
CAP_IN_VIEW = 0.1
GRAPH_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


def _percent(share: float) -> str:
    """A share as a percentage: whole percents from 1% on, two significant digits below (0.32%, 0.0075%)."""
    return f"{share:.0%}" if share >= 0.01 or share == 0 else f"{share * 100:.2g}%"


def amount(value: float, unit: str) -> str:
    """A cap's quantity as the panel writes it: seconds to 3 digits, FLOPs in exponent form."""
    if unit == "s":
        return f"{value:.1f} s" if abs(value) >= 10 else f"{value:.3g} s"
    return f"{sci(value, 3)} FLOPs"


def _state(value_share: float, failed: bool) -> str:
    if failed or value_share > 1:
        return "over"
    if value_share >= EDGE_SHARE:
        return "edge"
    return "close" if value_share >= CLOSE_SHARE else "clear"


def spare_text(margin: CapMargin) -> str:
    """What the worst MLP had left (or how far past it went), in the cap's unit."""
    if margin.margin < 0 or margin.n_over:
        text = f"{amount(abs(margin.margin), margin.unit)} past it" if margin.margin < 0 else "failed on it"
        passing = margin.closest_passing
        if passing is not None:
            label, used = passing
            text += (f"; the closest that passed: {amount(used, margin.unit)} ({_percent(used / margin.limit)}, "
                     f"{label})")
        return text
    text = f"{amount(margin.margin, margin.unit)} to spare"
    if margin.margin_seconds is not None:
        text += f" ({margin.margin_seconds:.3g} s more residual time)"
    return text


def margins_figure(margins: CapMargins, item: str = "MLP") -> go.Figure:
    """Every MLP's (``item``'s) use of every cap as a share of it: one row per cap, the cap at 100%, bands for
    close and edge."""
    fig = go.Figure()
    rows = list(margins.margins)
    highest = max([1.1] + [min(s, 3.0) * 1.05 for m in rows for s in m.shares])
    fig.add_vrect(x0=CLOSE_SHARE, x1=EDGE_SHARE, fillcolor=STATE_STYLE["close"][0], opacity=0.08, line_width=0)
    fig.add_vrect(x0=EDGE_SHARE, x1=1.0, fillcolor=STATE_STYLE["edge"][0], opacity=0.12, line_width=0)
    fig.add_vline(x=1.0, line={"color": STATE_STYLE["over"][0], "width": 2})
    for state, (colour, meaning) in STATE_STYLE.items():
        xs, ys, texts = [], [], []
        for row, margin in enumerate(rows):
            for k, (label, used, share, failed) in enumerate(zip(margin.labels, margin.used, margin.shares,
                                                               margin.failed, strict=True)):
                if _state(share, failed) != state:
                    continue
                xs.append(min(share, 3.0))
                ys.append(row + ((k * 0.6180339887) % 1.0 - 0.5) * 0.5)  # a fixed spread, so dots do not hide
                texts.append(f"{plain(label)}<br>{margin.title}: {amount(used, margin.unit)} of "
                             f"{amount(margin.limit, margin.unit)} ({_percent(share)})"
                             + ("<br>failed on it" if failed else ""))
        if xs:
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="markers", name=f"{state}: {meaning}" if state != "over" else "over: failed",
                marker={"color": colour, "size": 8 if state != "over" else 11,
                        "symbol": "x" if state == "over" else "circle", "line": {"width": 0}},
                text=texts, hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(
        height=90 + 60 * max(len(rows), 1), margin={"l": 10, "r": 20, "t": 30, "b": 40},
        title={"text": f"Each {item}'s use of each cap (the cap at 100%)", "font": {"size": 13}},
        xaxis={"title": "share of the cap", "tickformat": ".0%", "range": [0, highest]},
        yaxis={"tickvals": list(range(len(rows))), "ticktext": [m.title for m in rows], "range": [len(rows) - 0.5, -0.5],
               "showgrid": False, "zeroline": False},
        legend={"orientation": "h", "y": -0.35, "font": {"size": 11}}, showlegend=True,
    )
    return fig


def time_split_figure(split: TimeSplit, wall_cap: float | None, item: str = "MLP") -> go.Figure:
    """Predict's wall time of each MLP in its four parts, stacked, against the wall cap."""
    fig = go.Figure()
    for part in TimeSplit.PARTS:
        name, colour = PART_STYLE[part]
        values = getattr(split, part)
        if not any(values):
            continue
        fig.add_trace(go.Bar(x=plain_all(split.labels), y=list(values), name=name, marker_color=colour,
                             hovertemplate=f"%{{x}}<br>{name}: %{{y:.3g}} s<extra></extra>"))
    totals = [sum(parts) for parts in zip(*(getattr(split, p) for p in TimeSplit.PARTS), strict=True)]
    # the cap is drawn where it is in view of the bars; far above them, it is named in the title instead
    cap_drawn = wall_cap is not None and max(totals) >= CAP_IN_VIEW * wall_cap
    if cap_drawn:
        fig.add_hline(y=wall_cap, line={"color": STATE_STYLE["over"][0], "dash": "dash", "width": 2},
                      annotation_text=f"wall cap {wall_cap:g} s", annotation_position="top left")
    top = max(totals + [wall_cap if cap_drawn else 0.0]) * 1.1
    title = f"Where predict's wall time went, per {item}" + (
        f" (the wall cap, {wall_cap:g} s, is far above)" if wall_cap is not None and not cap_drawn else "")
    fig.update_layout(
        barmode="stack", height=300, margin={"l": 60, "r": 20, "t": 30, "b": 60},
        title={"text": title, "font": {"size": 13}},
        yaxis={"title": "seconds", "range": [0, top]}, xaxis={"showticklabels": len(split.labels) <= 20},
        legend={"orientation": "h", "y": -0.25, "font": {"size": 11}, "traceorder": "normal"},
    )
    return fig


def _row(margin: CapMargin) -> html.Tr:
    colour, meaning = STATE_STYLE[margin.state]
    close = margin.n_at_least(EDGE_SHARE)
    return html.Tr([
        html.Td(margin.title, title=margin.note),
        html.Td(f"{amount(margin.worst, margin.unit)} of {amount(margin.limit, margin.unit)} "
                f"({_percent(margin.worst_share)}, {margin.worst_label})"),
        html.Td(spare_text(margin)),
        html.Td(f"{close} of {len(margin.used)}"),
        html.Td(dbc.Badge(margin.state, color=colour, title=meaning)),
    ], className=f"margin-{margin.key}", style={"borderLeft": f"4px solid {colour}"})




def split_line(split: TimeSplit, item: str = "MLP") -> str:
    """Mean seconds per MLP (``item``) of each part of predict's wall time, with its share."""
    parts = [f"{PART_STYLE[p][0]} {split.mean(p):.3g} s ({_percent(split.share(p))})" for p in TimeSplit.PARTS
             if split.mean(p) > 0]
    return f"Where predict's wall time went (mean per {item} over {len(split.labels)}): " + ", ".join(parts) + "."


def margins_panel(margins: CapMargins, prefix: str, *, title: str = "How close to each cap",
                  item: str = "MLP") -> html.Div:
    """The one view of ``cap_margins``: table, figure and time split; ids start with ``prefix``. ``item`` names
    what each measurement is of (an MLP; the playground's estimators on its one MLP)."""
    if margins.empty:
        return html.Div(f"{title}: no time or FLOP count was recorded (a file without them).",
                        className="small text-muted", id=f"{prefix}-margins")
    closest = margins.closest
    verdict = (f"Closest: {closest.title}, {_percent(closest.worst_share)} of its cap on {closest.worst_label} "
               f"({STATE_STYLE[closest.state][1]}).")
    head = html.Thead(html.Tr([html.Th(h) for h in ("cap", f"worst {item}", "margin", f"≥ {EDGE_SHARE:.0%} of cap",
                                                     "state")]))
    body: list = [
        html.H6(title, className="mt-3 mb-1"),
        html.Div(verdict, className="small mb-1", id=f"{prefix}-margins-verdict"),
        dbc.Table([head, html.Tbody([_row(m) for m in margins.margins])], size="sm", className="small mb-1",
                  id=f"{prefix}-margins-table"),
        dcc.Graph(id=f"{prefix}-margins-figure", figure=margins_figure(margins, item), config=GRAPH_CONFIG),
    ]
    if margins.split is not None:
        body += [html.Div(split_line(margins.split, item), className="small", id=f"{prefix}-time-split-line"),
                 dcc.Graph(id=f"{prefix}-time-split", config=GRAPH_CONFIG,
                           figure=time_split_figure(margins.split, margins.caps.wall_time_limit_s, item))]
    return html.Div(body, id=f"{prefix}-margins")
