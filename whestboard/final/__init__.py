"""The final evaluation: nominated submissions rerun on a fresh private suite, standings by the official rules.

Owns: the final's private suite (N MLPs of the round's shape from one suite seed by whestbench's own
suite protocol, continued for tie-breaks, references kept in the artifact store), scoring each
(submission, MLP) as a job of the one job system with its result kept as it finishes (resumable, never
scored twice; each team's batch handed to the Celery workers when ``WHESTBOARD_REDIS_URL`` is set, as the
``final-team`` job body), the standings (rank by score; neighbours different by the paired t-test on log score ratios, close
by a stated margin or the reference noise, else undecided; close groups get extra MLPs, then all-layer MSE,
then effective compute; a rank is shared only within the noise, else kept in score order and marked
provisional), the rerun split and the final's record.
May import: ``whestboard.leaderboard``, ``whestboard.scoring``, ``whestboard.data``, ``whestboard.jobs``,
``whestboard.rules``, ``whestboard.store``, ``whestboard.config``, ``whestboard.logs``.
"""

from whestboard.final._final import (
    DEFAULT_MAX_EXTRA_MLPS,
    DEFAULT_TRUTH_SAMPLES,
    FinalError,
    FinalRequest,
    Nominee,
    final_submission_id,
    nominee,
    run_final,
    served_nominee,
    standings_text,
    workers_text,
)
from whestboard.final._scoring import PAIR_RESULTS
from whestboard.final._standings import PAIR_TEST, standings
from whestboard.final._suite import SEED_PROTOCOL, FinalSuite

__all__ = [
    "DEFAULT_MAX_EXTRA_MLPS",
    "DEFAULT_TRUTH_SAMPLES",
    "final_submission_id",
    "FinalError",
    "FinalRequest",
    "FinalSuite",
    "Nominee",
    "nominee",
    "served_nominee",
    "PAIR_RESULTS",
    "PAIR_TEST",
    "run_final",
    "SEED_PROTOCOL",
    "standings",
    "standings_text",
    "workers_text",
]
