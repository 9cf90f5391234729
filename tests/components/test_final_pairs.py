"""The final's neighbour pairs on the page: every pair's test, p-value, MLPs and outcome, from the rule's own decisions."""

from __future__ import annotations

from components.final_pairs import DECIDED_BY, pair_list, rank_text
from tests.final.standings_helpers import Suite, team
from whestboard.final import PAIR_TEST, standings


def _texts(node) -> list[str]:
    """Every string under a Dash component, depth first."""
    children = getattr(node, "children", node)
    if isinstance(children, str):
        return [children]
    if isinstance(children, list | tuple):
        return [t for child in children for t in _texts(child)]
    return [] if children is None else _texts(children)


def test_every_pair_shows_its_test_p_value_mlps_and_what_decided_it():
    suite = Suite()
    base = {"a": team(suite, range(3)), "b": team(suite, range(3)),
            "c": team(suite, range(3), 21.0, spread=0.1), "d": team(suite, range(3), fails=frozenset({1}))}
    result = standings(list(base), base, 0, lambda group, k: {})
    record = {"pairs": [d.as_dict() for d in result.pairs]}
    lines = [t for t in _texts(pair_list(record, "x")) if " vs " in t]
    assert len(lines) == len(result.pairs) == 3
    for line, pair in zip(lines, result.pairs, strict=True):
        assert line.startswith(f"{pair.upper} vs {pair.lower}: {DECIDED_BY[pair.decided_by]}")
        assert PAIR_TEST in line and f"{pair.n_mlps} MLPs" in line and "p = " in line and pair.reason in line
    assert [p.decided_by for p in result.pairs] == ["shared", "score", "unresolved"]
    assert rank_text({"rank": 4, "provisional": True}) == "4 (provisional)" and rank_text({"rank": 1}) == "1"


def test_a_record_without_pairs_shows_none():
    assert _texts(pair_list({"tie_breaks": []}, "x")) == []
