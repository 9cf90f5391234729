"""Per-MLP results for the standings rule's tests: real scores spread (lognormal across MLPs, one team a
multiple of another on each MLP), the grader's failure verdict (the all-zero prediction, multiplier 1)
where a team fails, and extra MLPs continuing the same suite."""

from __future__ import annotations

import math

import numpy as np

#: The reference noise of each MLP on the score scale (avg_variance / K): far below every score drawn here.
FLOOR = 1e-12
#: What a failed MLP scores: the all-zero prediction's MSE, about 1e5x a covariance propagation.
FAILED_SCORE = 0.3


def entry(i: int, score: float, *, failed: bool = False, all_layer: float | None = None,
           compute: float = 1e10) -> dict:
    return {"mlp_index": i, "adjusted_final_layer_score": score, "final_layer_mse": score * 10,
            "all_layers_mse": all_layer if all_layer is not None else score * 5, "effective_compute": compute,
            "score_multiplier": 1.0 if failed else 0.1, "noise_floor": FLOOR, "failed": failed}


class Suite:
    """Per-MLP difficulty drawn once per MLP index, so extra MLPs continue the same suite for every team."""

    def __init__(self, seed: int = 7):
        self.rng = np.random.default_rng(seed)
        self.difficulty: list[float] = []

    def mlp(self, i: int) -> float:
        while len(self.difficulty) <= i:
            self.difficulty.append(float(1e-6 * self.rng.lognormal(0.0, 0.8)))
        return self.difficulty[i]


def team(suite: Suite, indices, factor: float = 1.0, *, spread: float = 0.0, seed: int = 0,
          fails: frozenset[int] = frozenset(), all_layer: float | None = None, wobble: float = 0.0) -> list[dict]:
    """A team scoring ``factor`` x the MLP's difficulty, times a lognormal of ``spread`` per MLP and
    exp(+wobble, -wobble, 0) on MLPs 0, 1, 2 (mod 3), failing on ``fails``."""
    noise = np.random.default_rng(seed + 1000 * min(indices, default=0)).lognormal(0.0, spread, len(indices))
    out = []
    for i, jitter in zip(indices, noise, strict=True):
        if i in fails:
            out.append(entry(i, FAILED_SCORE, failed=True, compute=0.0))
            continue
        score = suite.mlp(i) * factor * (float(jitter) if spread else 1.0) * math.exp(wobble * (1, -1, 0)[i % 3])
        out.append(entry(i, score, all_layer=None if all_layer is None else score * all_layer))
    return out
