"""Standings by the official rules, from per-MLP results: rank, close neighbours, tie-break criteria.

Rank by the round's score (mean ``adjusted_final_layer_score``) on the rerun suite. Neighbours whose
paired sign-flip test (the one the board's ties use) cannot reject equal means at ``ALPHA`` are close;
chains of close neighbours form a group. A group is then decided pair by pair on every MLP its teams
were scored on (the suite plus the extra MLPs baked for it): the score if the extra MLPs made the
test reject, else all-layer MSE, else effective compute, each by the same paired test; a pair no
criterion separates shares the rank.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from whestboard.leaderboard import ALPHA, TIE_POWER, mlps_needed, sign_flip_p_value

#: The sign-flip test cannot reach ALPHA with fewer MLPs (its smallest p-value is 2 / 2^n).
MIN_TEST_MLPS = math.ceil(math.log2(2 / ALPHA))
CRITERIA = (("extra_mlps", "adjusted_final_layer_score"), ("all_layer_mse", "all_layers_mse"),
            ("effective_compute", "effective_compute"))


def column(entries: Sequence[dict], name: str) -> np.ndarray:
    return np.array([float(e.get(name) or 0.0) for e in entries], dtype=np.float64)


def summary(entries: Sequence[dict]) -> dict:
    """A team's numbers on these MLPs, means as the grader forms them."""
    return {"score": float(np.mean(column(entries, "adjusted_final_layer_score"))),
            "final_layer_mse": float(np.mean(column(entries, "final_layer_mse"))),
            "all_layer_mse": float(np.mean(column(entries, "all_layers_mse"))),
            "effective_compute": float(np.mean(column(entries, "effective_compute"))),
            "n_mlps": len(entries), "n_failed_mlps": sum(1 for e in entries if e.get("failed"))}


def paired_p(a: Sequence[dict], b: Sequence[dict], name: str) -> float:
    """Two-sided paired sign-flip p-value of ``name`` between two teams on the same MLPs."""
    return sign_flip_p_value(column(a, name) - column(b, name))


def close_groups(order: Sequence[str], base: dict[str, list[dict]]) -> list[tuple[list[str], list[float]]]:
    """Runs of ranked neighbours the paired test cannot separate, with each neighbour pair's p-value."""
    groups: list[tuple[list[str], list[float]]] = []
    current, ps = [order[0]], []
    for upper, lower in zip(order, order[1:], strict=False):
        p = paired_p(base[lower], base[upper], "adjusted_final_layer_score")
        if p >= ALPHA:
            current.append(lower)
            ps.append(p)
            continue
        if len(current) > 1:
            groups.append((current, ps))
        current, ps = [lower], []
    if len(current) > 1:
        groups.append((current, ps))
    return groups


def extra_needed(group: Sequence[str], base: dict[str, list[dict]], limit: int) -> int:
    """Extra MLPs the tie sizing says would separate the group's closest pair, at most ``limit``."""
    most = 0
    for upper, lower in zip(group, group[1:], strict=False):
        d = column(base[lower], "adjusted_final_layer_score") - column(base[upper], "adjusted_final_layer_score")
        total = mlps_needed(d, alpha=ALPHA, power=TIE_POWER)
        needed = limit if not math.isfinite(total) else max(math.ceil(total), MIN_TEST_MLPS) - d.size
        most = max(most, needed)
    return int(min(max(most, 0), limit))


@dataclass
class PairDecision:
    """How two neighbours of a close group were ordered, with every p-value looked at."""

    upper: str
    lower: str
    decided_by: str
    p_values: dict[str, float] = field(default_factory=dict)


def decide(a: Sequence[dict], b: Sequence[dict], *, extra: int) -> tuple[int, str, dict[str, float]]:
    """(-1 a first, 1 b first, 0 shared), the deciding criterion and the p-values of those tried."""
    p_values: dict[str, float] = {}
    for criterion, name in CRITERIA:
        if criterion == "extra_mlps" and extra == 0:
            continue
        p = paired_p(a, b, name)
        p_values[criterion] = p
        if p < ALPHA:
            difference = float(np.mean(column(a, name) - column(b, name)))
            return (-1 if difference < 0 else 1), criterion, p_values
    return 0, "shared", p_values


def order_group(group: Sequence[str], scored: dict[str, list[dict]], extra: int) -> tuple[list[str], list[PairDecision]]:
    """The group's teams in their decided order and each neighbour pair's decision."""
    ordered = sorted(group, key=functools.cmp_to_key(lambda x, y: decide(scored[x], scored[y], extra=extra)[0]))
    decisions = []
    for upper, lower in zip(ordered, ordered[1:], strict=False):
        _, by, p_values = decide(scored[upper], scored[lower], extra=extra)
        decisions.append(PairDecision(upper, lower, by, p_values))
    return ordered, decisions


def ranks(order: Sequence[str], shared_with_previous: set[str]) -> dict[str, int]:
    """Competition ranks (1, 1, 3): a team sharing with the one above it takes that one's rank."""
    out: dict[str, int] = {}
    for position, team in enumerate(order, start=1):
        out[team] = out[order[position - 2]] if team in shared_with_previous and position > 1 else position
    return out
