"""The competition's rounds, read from whestbench's own rulebook.

Every number here comes from ``whestbench.budget.ROUNDS``; this module only
reshapes it for display and maps a dataset's shape back to the round it
belongs to. Restating a budget or cap by hand is how two rulebooks get mixed.
"""

from __future__ import annotations

from dataclasses import dataclass

from whestbench.budget import (
    ROUNDS,
    RoundConfig,
    mc_at_bm,
    mc_flops_per_sample_for_round,
    mc_samples_at_budget,
)


@dataclass(frozen=True)
class Round:
    """A round's rulebook plus the Monte Carlo figures derived from it."""

    config: RoundConfig

    @property
    def tag(self) -> str:
        return self.config.tag

    @property
    def width(self) -> int:
        return self.config.width

    @property
    def depth(self) -> int:
        return self.config.depth

    @property
    def budget(self) -> int:
        return int(self.config.flop_budget)

    @property
    def charging_floor(self) -> float:
        """Below 10% of B the multiplier stops falling (``max(0.1, C/B)``)."""
        return 0.1 * self.budget

    @property
    def residual_mode(self) -> str:
        return self.config.residual_mode

    @property
    def wall_time_limit_s(self) -> float:
        return float(self.config.wall_time_limit_s)

    @property
    def residual_wall_time_limit_s(self) -> float | None:
        return self.config.residual_wall_time_limit_s

    @property
    def lambda_flops_per_second(self) -> float:
        return float(self.config.lambda_flops_per_second)

    @property
    def dtype_aware_billing(self) -> bool:
        return bool(self.config.dtype_aware_billing)

    @property
    def mc_flops_per_sample(self) -> int:
        return int(mc_flops_per_sample_for_round(self.config))

    @property
    def mc_samples_at_budget(self) -> float:
        return float(mc_samples_at_budget(self.config))

    def mc_at_bm(self, mean_avg_variance: float) -> float:
        """Score of spending the whole budget on sampling, for these MLPs' variance."""
        return float(mc_at_bm(mean_avg_variance, self.config))

    @property
    def shape_label(self) -> str:
        return f"{self.width} x {self.depth}"

    @property
    def residual_rule(self) -> str:
        """One line a participant can read: how residual wall time is treated."""
        if self.residual_mode == "priced":
            return f"priced: C = F + {self.lambda_flops_per_second:.0e} x R"
        return f"gated: C = F, R capped at {self.residual_wall_time_limit_s} s"


ALL_ROUNDS: dict[str, Round] = {tag: Round(cfg) for tag, cfg in ROUNDS.items()}


def get_round(tag: str) -> Round:
    """The round for a dataset tag, or a KeyError naming the known tags."""
    try:
        return ALL_ROUNDS[tag]
    except KeyError:
        known = ", ".join(ALL_ROUNDS)
        raise KeyError(f"unknown round {tag!r}; known rounds: {known}") from None


def round_for_shape(width: int, depth: int) -> Round | None:
    """The round whose MLPs have this width x depth, or None for a custom shape."""
    for rnd in ALL_ROUNDS.values():
        if (rnd.width, rnd.depth) == (int(width), int(depth)):
            return rnd
    return None



def sampling_mse(flops: float, mean_sigma2: float, flops_per_sample: float) -> float:
    """Expected MSE of Monte Carlo that spends ``flops``: sigma^2 / N with N = flops / per-sample cost."""
    if flops <= 0:
        return float("inf")
    return float(mean_sigma2) * float(flops_per_sample) / float(flops)
