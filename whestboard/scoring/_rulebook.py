"""A round's settings restored together: budget, wall cap, residual rule, lambda and dtype billing.

Re-scoring a round means restoring all of its settings at once; a mix of two rulebooks matches neither.
The budget may be overridden (the lab's "what if"); the rest always comes from
``whestbench.budget.ROUNDS``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from whestbench.budget import CURRENT_ROUND
from whestbench.scoring import ContestSpec

from whestboard.rules import get_round, library_versions, metered_dtype_aware_billing
from whestboard.scoring._inputs import check_budget


@dataclass(frozen=True)
class Rulebook:
    """One round's settings, restored together, with the budget optionally overridden."""

    round_tag: str
    flop_budget: int
    round_budget: int
    wall_time_limit_s: float | None
    residual_wall_time_limit_s: float | None
    lambda_flops_per_second: float
    residual_mode: str
    dtype_aware_billing: bool

    @property
    def custom_budget(self) -> bool:
        return self.flop_budget != self.round_budget

    @property
    def charging_floor(self) -> float:
        return 0.1 * self.flop_budget

    @property
    def metered_dtype_aware_billing(self) -> bool:
        return metered_dtype_aware_billing()

    @property
    def billing_note(self) -> str | None:
        """Why this run's FLOPs can differ from what the round's own grader charged, if they can."""
        if self.dtype_aware_billing == self.metered_dtype_aware_billing:
            return None
        flopscope_version = library_versions()["flopscope_version"]
        if not self.dtype_aware_billing:
            return (
                f"{self.round_tag} was graded before flopscope 0.9, when float64 cost the same as float32 and "
                f"float32->float64 casts were free. flopscope {flopscope_version} keeps dtype rates in one "
                "process-wide table (flopscope._weights), not on a BudgetContext, and even with unit rates it "
                "still bills each cast 1 FLOP per element; so this run is metered with dtype-aware billing. "
                "float32-only estimators are unaffected; float64 work costs more here than the round charged."
            )
        return (
            f"{self.round_tag} bills float64 at twice float32, but the installed flopscope {flopscope_version} "
            "does not; float64 work costs less here than the round charged."
        )

    def contest_spec(self, *, width: int, depth: int, n_mlps: int, n_samples: int) -> ContestSpec:
        spec = ContestSpec(
            width=width,
            depth=depth,
            n_mlps=n_mlps,
            flop_budget=self.flop_budget,
            ground_truth_samples=n_samples,
            wall_time_limit_s=self.wall_time_limit_s,
            residual_wall_time_limit_s=self.residual_wall_time_limit_s,
            lambda_flops_per_second=self.lambda_flops_per_second,
        )
        spec.validate()
        return spec

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out.update(
            custom_budget=self.custom_budget,
            charging_floor=self.charging_floor,
            metered_dtype_aware_billing=self.metered_dtype_aware_billing,
            billing_note=self.billing_note,
        )
        return out


def rulebook_for(round_tag: str | None, budget: int | None = None) -> Rulebook:
    """The round's full rulebook (the current round when none is known), budget overridable.

    A budget outside what a run accepts (1 FLOP to ``MAX_BUDGET_MULTIPLE`` x B) is a ``RunError``,
    whoever asks.
    """
    round_budget = int((get_round(round_tag).config if round_tag else CURRENT_ROUND).flop_budget)
    if budget is not None:
        check_budget(float(budget), round_budget)
    cfg = get_round(round_tag).config if round_tag else CURRENT_ROUND
    return Rulebook(
        round_tag=cfg.tag,
        flop_budget=int(budget) if budget is not None else int(cfg.flop_budget),
        round_budget=int(cfg.flop_budget),
        wall_time_limit_s=cfg.wall_time_limit_s,
        residual_wall_time_limit_s=cfg.residual_wall_time_limit_s,
        lambda_flops_per_second=float(cfg.lambda_flops_per_second),
        residual_mode=cfg.residual_mode,
        dtype_aware_billing=bool(cfg.dtype_aware_billing),
    )
