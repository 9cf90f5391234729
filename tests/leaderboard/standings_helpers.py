"""A final record built from graded per-MLP scores, ranked and tie-checked as the final's rules say."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from whestboard.leaderboard import ALPHA, competition_ranks, mlps_needed, sign_flip_p_value


def final_record_from(per_mlp: pd.DataFrame, teams: dict[str, str], *, round_tag: str, suite_seed: int) -> dict:
    """The record of a final whose suite is the MLPs every submission in ``teams`` (id -> team) was scored on.

    Ranks by mean score (ties share), neighbours tested with the paired sign-flip test; a close pair is
    recorded as shared with the extra MLPs a test would need (no extra MLPs are baked here).
    """
    rows = per_mlp[per_mlp["submission_id"].isin(teams)]
    table = rows.pivot_table(index="submission_id", columns="mlp_index", values="adjusted_score", aggfunc="first")
    table = table.dropna(axis=1)
    names = [teams[sid] for sid in table.index]
    scores = table.to_numpy(float)
    means = scores.mean(axis=1)
    ranks = competition_ranks(means[None, :])[0]
    mse = rows.pivot_table(index="submission_id", columns="mlp_index", values="final_layer_mse", aggfunc="first")
    flops = rows.groupby("submission_id")["flops_used"].mean()
    order = np.argsort(means, kind="mergesort")
    ties = []
    for upper, lower in zip(order[:-1], order[1:], strict=True):
        d = scores[lower] - scores[upper]
        p = sign_flip_p_value(d)
        if p >= ALPHA:  # close: no extra MLPs are baked here, so nothing separates them and they share
            needed = mlps_needed(d)
            ties.append({"teams": [names[upper], names[lower]], "p_value": p,
                         "extra_mlps": int(math.ceil(needed)) if math.isfinite(needed) else 0,
                         "decided_by": "shared"})
            ranks[lower] = ranks[upper]
    standings = [{"rank": int(ranks[i]), "team": names[i], "score": float(means[i]),
                  "final_layer_mse": float(mse.loc[table.index[i], table.columns].mean()),
                  "all_layer_mse": None, "effective_compute": float(flops[table.index[i]]),
                  "n_mlps": int(scores.shape[1])} for i in order]
    return {"round": round_tag, "suite_seed": suite_seed, "n_mlps": int(scores.shape[1]), "standings": standings,
            "tie_breaks": ties,
            "per_mlp": {"mlp_ids": [int(c) for c in table.columns],
                        "scores": {n: [float(v) for v in row] for n, row in zip(names, scores, strict=True)}}}
