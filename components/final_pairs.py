"""The final's neighbour pairs as both pages show them: the test, its p-value, the MLPs used, what decided it."""

from __future__ import annotations

from dash import html

from components.format import sci

#: What each outcome means, in the standings' words.
DECIDED_BY = {
    "score": "different by the paired test on the suite: ranked by score",
    "extra_mlps": "close, separated by the extra MLPs",
    "all_layer_mse": "close after the extra MLPs; ordered by all-layer MSE",
    "effective_compute": "close; all-layer MSE equal, ordered by effective compute",
    "shared": "equal within the reference noise and no criterion separated them: they share the rank",
    "unresolved": "not resolved by the MLPs allowed: the score order stands, the ranks are provisional",
}


def pair_line(pair: dict) -> str:
    """One neighbour pair in a sentence."""
    p = pair.get("p_value")
    return (f"{pair['upper']} vs {pair['lower']}: {DECIDED_BY.get(pair['decided_by'], pair['decided_by'])} "
            f"({pair.get('test', 'paired test')}, p = {'n/a' if p is None else sci(p)}, {pair.get('n_mlps')} MLPs"
            f"{'' if pair.get('ratio') is None else ', ratio ' + sci(pair['ratio'])}). {pair.get('reason', '')}")


def pair_list(record: dict, element_id: str) -> html.Div:
    """Every neighbour pair of the final order (records written before pairs were kept show none)."""
    pairs = record.get("pairs") or []
    if not pairs:
        return html.Div(id=element_id)
    return html.Div([html.Div("Neighbours, in the final order:", className="small fw-semibold"),
                     html.Ul([html.Li(pair_line(pair), className="final-pair") for pair in pairs],
                             className="small mb-1")], id=element_id)


def rank_text(row: dict) -> str:
    """The rank, with a mark when a pair nothing decided makes it provisional."""
    return f"{row['rank']} (provisional)" if row.get("provisional") else str(row["rank"])
