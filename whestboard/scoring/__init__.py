"""Scoring an estimator exactly as the grader does: what is asked, estimator handles, runs, reports, the store.

Owns: reading what a user asks a run for (MLP selections, budgets), the rulebook a run is scored under
(a round's settings restored together), estimator specs (built-ins, Monte Carlo, files run in the
sandbox), runs (one ``whestbench.scoring.evaluate_estimator`` call per MLP, aggregated as the grader
aggregates), the ``whest run --json``-shaped report, the run store and its cache, and the upload job
(contract check, sandboxed run, baselines on the same MLPs), and the playground's every-estimator
scoring of one generated MLP. May import: ``whestboard.sandbox``,
``whestboard.data``, ``whestboard.jobs``, ``whestboard.rules``, ``whestboard.store``, ``whestboard.config``.
"""

from whestboard.scoring import (
           estimators,
           inputs,
           playground,
           report,
           rulebook,
           runs,
           runstore,
           sandboxed,
           uploads,
)
from whestboard.scoring.estimators import BUILTIN_KINDS, resolve_estimator
from whestboard.scoring.handle import EstimatorHandle
from whestboard.scoring.inputs import RunError, parse_budget, parse_mlp_selection, quoted, select_mlps
from whestboard.scoring.rulebook import Rulebook, rulebook_for
from whestboard.scoring.runs import RunOutcome, RunRequest, execute, run

__all__ = ["BUILTIN_KINDS", "EstimatorHandle", "RunError", "RunOutcome", "RunRequest", "Rulebook", "estimators",
           "execute", "inputs", "parse_budget", "parse_mlp_selection", "playground", "quoted", "report", "resolve_estimator",
           "rulebook", "rulebook_for", "run", "runs", "runstore", "sandboxed", "select_mlps", "uploads"]
