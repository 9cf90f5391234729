"""The challenge's rules, as whestbench and flopscope define them: rounds, billing, versions.

Owns: the three rounds (``whestbench.budget.ROUNDS``: budget, wall cap, residual rule), the grader's
environment per round (which modules participant code may import), the library
versions a result was metered under, and (``internals``) each private name of theirs that Whestboard
calls, behind a function. This is the one adapter to whestbench's and flopscope's internals:
every figure of a round comes from them here, never re-derived. May import: ``whestbench``,
``flopscope``, ``whestboard.config``.
"""

from whestboard.rules import billing, environment, internals, rounds, versions
from whestboard.rules.environment import GraderEnvironment, environment_for
from whestboard.rules.rounds import ALL_ROUNDS, Round, get_round, round_for_shape, sampling_mse
from whestboard.rules.versions import library_versions

__all__ = ["ALL_ROUNDS", "GraderEnvironment", "Round", "billing", "environment", "environment_for", "get_round",
           "internals", "library_versions", "round_for_shape", "rounds", "sampling_mse", "versions"]
