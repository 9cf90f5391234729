"""The leaderboard's data: the submissions store, import and export, rankings, the baseline sweep.

Owns: the submissions tables, reading graded submissions (CSV, Parquet, ``whest run --json``) with
row-level problems, all or nothing, and writing them back (formula cells escaped), rankings with
bootstrap intervals and paired tests, columnar snapshots of the narrow scans per store revision, the organizers' integrity views (splits, overfitting and
residual-arbitrage flags, histories, ties), the organizer's token check, and the sweep that grades the
baseline family as submissions. May import: ``whestboard.scoring``, ``whestboard.data``,
``whestboard.rules``, ``whestboard.store``, ``whestboard.config``.
"""

from whestboard.leaderboard import auth, files, integrity, ranking, snapshot, store, sweep
from whestboard.leaderboard.files import MAX_FILE_BYTES, ImportRejected
from whestboard.leaderboard.store import MLPResult, Submission

__all__ = ["MAX_FILE_BYTES", "ImportRejected", "MLPResult", "Submission", "auth", "files", "integrity", "ranking",
           "snapshot", "store", "sweep"]
