"""The submissions store: every graded submission and, optionally, its per-MLP results.

Tables live on ``whestboard.store._database.Base`` so they share the app's engine: an SQLite
file (WAL) by default, any SQLAlchemy URL through ``WHESTBOARD_DATABASE_URL``.

Writes are upserts keyed by the submission id and happen in one transaction, so
an import is all-or-nothing and importing the same file twice changes nothing.
Every write that changes a row bumps a revision counter; readers in any worker
cache what they computed from the store under that revision, so 10,000
submissions are read from the database once per change, not once per request.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from operator import attrgetter

import numpy as np
import pandas as pd
from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    bindparam,
    delete,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from whestboard import config
from whestboard.cache import Region
from whestboard.leaderboard import _snapshot
from whestboard.store import Base, engine, session

STATUSES = ("graded", "failed")
#: What a version (or seed protocol) reads when the file a submission came from did not say: shown as
#: such, never guessed. ``whestbench_version`` is a required column of the first schema, so an unknown
#: one is stored as this word; the later columns store None.
UNKNOWN = "unknown"
#: Which suite a per-MLP result belongs to: the public board's MLPs, the withheld ones, or the fresh
#: private rerun of a nominated submission (what prizes come from).
SPLITS = ("public", "private", "rerun")
#: The source of a row the final evaluation writes to hold a team's ``rerun`` split (a nominee given as
#: a file): no public score, so no count, field, timeline, ranking or export of the board includes it;
#: only what reads it by id (the rerun split's board, the final's standings) does.
FINAL_SOURCE = "final"
PUBLIC = "public"
#: The source of a submission read from the grader's own record (AIcrowd's per-submission JSON): its
#: numbers are the record's, checked to the record's own rounding.
RECORD_SOURCE = "aicrowd"
#: Splits only the organizer sees (server-side check, whestboard.leaderboard._auth).
ORGANIZER_SPLITS = ("private", "rerun")
REVISION_KEY = "submissions_revision"
EPOCH_KEY = "submissions_epoch"
SEEDED_KEY = "submissions_seeded"
_IN_CHUNK = 500  # ids per IN (...) clause: well under SQLite's and PostgreSQL's parameter limits
#: A write that lost a race for a new key (two imports of the same new file) is redone this often.
WRITE_ATTEMPTS = 5


class SubmissionRow(Base):
    """One graded (or failed) submission, as the leaderboard shows it."""

    __tablename__ = "submissions"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    team: Mapped[str] = mapped_column(String(200), index=True)
    round_tag: Mapped[str] = mapped_column(String(32), index=True)
    submitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=False))  # UTC
    status: Mapped[str] = mapped_column(String(16))
    mean_flops_used: Mapped[float | None] = mapped_column(Float, nullable=True)
    final_layer_mse: Mapped[float | None] = mapped_column(Float, nullable=True)
    adjusted_score: Mapped[float | None] = mapped_column(Float, nullable=True)
    mean_multiplier: Mapped[float | None] = mapped_column(Float, nullable=True)
    n_failed_mlps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    whestbench_version: Mapped[str] = mapped_column(String(64))
    flopscope_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    n_mlps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    mean_effective_compute: Mapped[float | None] = mapped_column(Float, nullable=True)
    dataset: Mapped[str | None] = mapped_column(String(500), nullable=True)
    mean_avg_variance: Mapped[float | None] = mapped_column(Float, nullable=True)
    estimator: Mapped[str | None] = mapped_column(String(500), nullable=True)
    source: Mapped[str | None] = mapped_column(String(64), nullable=True)
    nominated: Mapped[bool] = mapped_column(Boolean, default=False)
    # Added after the first release (nullable, so the bootstrap adds them to an older table): the seed
    # protocol of the suite it was scored on, and the run record of this app it was made from (when it
    # was scored here: what holds its package, so it can be re-scored), with the submission it re-scores.
    seed_protocol: Mapped[str | None] = mapped_column(String(32), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(32), nullable=True)
    rescore_of: Mapped[str | None] = mapped_column(String(200), nullable=True)
    # When the grader finished it (a grader record's completed_at); None: not recorded.
    graded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=False), nullable=True)  # UTC


class SubmissionMLPRow(Base):
    """One MLP's result inside a submission: what bootstrap and paired tests need."""

    __tablename__ = "submission_mlp_results"

    submission_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("submissions.id", ondelete="CASCADE"), primary_key=True
    )
    split: Mapped[str] = mapped_column(String(16), primary_key=True, default=PUBLIC)
    mlp_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    mlp_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    final_layer_mse: Mapped[float] = mapped_column(Float)
    adjusted_score: Mapped[float] = mapped_column(Float)
    flops_used: Mapped[float | None] = mapped_column(Float, nullable=True)
    effective_compute: Mapped[float | None] = mapped_column(Float, nullable=True)
    multiplier: Mapped[float | None] = mapped_column(Float, nullable=True)
    failed: Mapped[bool] = mapped_column(Boolean, default=False)
    avg_variance: Mapped[float | None] = mapped_column(Float, nullable=True)
    failure: Mapped[str | None] = mapped_column(String(16), nullable=True)
    meter_tampering: Mapped[str | None] = mapped_column(String(500), nullable=True)
    # What the grader (or a run) measured beside the scores: the error beyond the final layer, the grader's
    # own error code, and the times each cap is held against (whestboard.rules.cap_margins). None: not recorded.
    all_layers_mse: Mapped[float | None] = mapped_column(Float, nullable=True)
    per_layer_mse: Mapped[str | None] = mapped_column(String(2000), nullable=True)  # a JSON array, one per layer
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    predict_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    residual_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    setup_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    kernel_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    overhead_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    comms_wall_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class StoreMeta(Base):
    """Small key/value counters: the revision readers cache under, the seeded flag."""

    __tablename__ = "whestboard_store_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[int] = mapped_column(Integer, default=0)


# ---------------------------------------------------------------------------
# plain records (what import produces and export writes)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Submission:
    """A submission as validated plain data; field names are the import schema's."""

    submission_id: str
    team: str
    round: str
    submitted_at: datetime
    status: str
    whestbench_version: str
    mean_flops_used: float | None = None
    final_layer_mse: float | None = None
    adjusted_score: float | None = None
    mean_multiplier: float | None = None
    n_failed_mlps: int | None = None
    flopscope_version: str | None = None
    n_mlps: int | None = None
    mean_effective_compute: float | None = None
    dataset: str | None = None
    mean_avg_variance: float | None = None
    estimator: str | None = None
    source: str | None = None
    nominated: bool = False
    seed_protocol: str | None = None  # whestbench's seed protocol version of its suite ("3.0"); None: unknown
    run_id: str | None = None  # the run record it was scored as here; None: imported from a file
    rescore_of: str | None = None  # the submission this one re-scores under newer versions
    graded_at: datetime | None = None  # when the grader finished it (a grader record's completed_at)


@dataclass(frozen=True, slots=True)
class MLPResult:
    """One MLP's graded result; field names are the per-MLP import schema's."""

    submission_id: str
    mlp_index: int
    final_layer_mse: float
    adjusted_score: float
    failed: bool = False
    mlp_name: str | None = None
    flops_used: float | None = None
    effective_compute: float | None = None
    multiplier: float | None = None
    avg_variance: float | None = None
    split: str = PUBLIC
    failure: str | None = None  # the verdict word of whestboard.rules._failures, when known
    meter_tampering: str | None = None  # what the sandbox saw make flopscope count less (runs scored here)
    all_layers_mse: float | None = None
    per_layer_mse: str | None = None  # the MSE of each layer as a JSON array ("[1e-05,2e-06]")
    error_code: str | None = None  # the grader's own code for a failed MLP
    predict_wall_s: float | None = None  # predict()'s wall time
    residual_wall_s: float | None = None  # wall time outside flopscope
    setup_wall_s: float | None = None  # setup()'s wall time
    kernel_wall_s: float | None = None  # flopscope's kernels (the server's, on the Phase 2 grader)
    overhead_wall_s: float | None = None  # flopscope's own overhead
    comms_wall_s: float | None = None  # the flopscope client's traffic with its server


SUBMISSION_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Submission))
#: The submission's times (naive UTC in the store, aware UTC in a record).
TIME_FIELDS = ("submitted_at", "graded_at")
MLP_RESULT_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MLPResult))
#: The per-MLP times a grader or a run records (``whestboard.rules.cap_margins`` holds them to the caps).
TIMING_FIELDS = ("predict_wall_s", "residual_wall_s", "setup_wall_s", "kernel_wall_s", "overhead_wall_s",
                 "comms_wall_s")
#: The per-MLP fields that hold numbers (a frame's float columns).
MLP_NUMBER_FIELDS = ("final_layer_mse", "adjusted_score", "flops_used", "effective_compute", "multiplier",
                     "avg_variance", "all_layers_mse", "predict_wall_s", "residual_wall_s", "setup_wall_s",
                     "kernel_wall_s", "overhead_wall_s", "comms_wall_s")

# import-schema name -> column on SubmissionRow (the only two that differ)
_RENAMED = {"submission_id": "id", "round": "round_tag"}


def _text_limits(table, renamed: dict[str, str]) -> dict[str, int]:
    back = {column: name for name, column in renamed.items()}
    return {back.get(c.name, c.name): c.type.length for c in table.columns
            if isinstance(c.type, String) and c.type.length}


#: The text fields of each schema and their longest allowed value (the column widths).
SUBMISSION_TEXT_LIMITS: dict[str, int] = _text_limits(SubmissionRow.__table__, _RENAMED)
MLP_TEXT_LIMITS: dict[str, int] = _text_limits(SubmissionMLPRow.__table__, {})
# Unicode's control characters (C0, DEL, C1): NUL, tab, newline, escape, ... No text field holds them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def text_problem(text: str, name: str, *, limit_after_strip: bool = False) -> str | None:
    """Why ``text`` cannot be stored in text field ``name`` (too long, a control character), or None.

    The store's one rule for text, shared by every import and by ``edit``: a NUL
    cannot be stored by PostgreSQL at all, and a tab, newline or escape in a team
    name breaks every table and CSV it is shown in. ``limit_after_strip``: the
    length that counts is that of the text without surrounding spaces (what is stored).
    """
    limit = SUBMISSION_TEXT_LIMITS.get(name) or MLP_TEXT_LIMITS.get(name)
    length = len(text.strip(" ")) if limit_after_strip else len(text)
    if limit and length > limit:
        return f"{name} is {length:,} characters long; at most {limit} are allowed"
    control = _CONTROL.search(text)
    if control:
        return (f"{name} contains the control character U+{ord(control.group()):04X} at character "
                f"{control.start() + 1}; text may not hold control characters (NUL, tab, line breaks, ...)")
    return None


_ROW_COLUMNS = tuple(_RENAMED.get(k, k) for k in SUBMISSION_FIELDS)


def _row_values(sub: Submission) -> dict:
    """The row's columns (a shallow copy: ``dataclasses.asdict`` deep-copies every value, half an import's time)."""
    values = dict(zip(_ROW_COLUMNS, (getattr(sub, k) for k in SUBMISSION_FIELDS), strict=True))
    for name in TIME_FIELDS:
        values[name] = to_utc_naive(values[name])
    return values


def _mlp_values(res: MLPResult) -> dict:
    return {k: getattr(res, k) for k in MLP_RESULT_FIELDS}


def to_utc_naive(moment: datetime | None) -> datetime | None:
    """Stored times are naive UTC, so SQLite and PostgreSQL hold identical values."""
    if moment is not None and moment.tzinfo is not None:
        moment = moment.astimezone(UTC).replace(tzinfo=None)
    return moment


@dataclass
class UpsertReport:
    """What a write did, by submission id."""

    inserted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    #: What the import checked and wants said (a grader record's score recomputed, its unscored MLPs).
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.updated)

    def summary(self) -> str:
        return f"{len(self.inserted)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged"


# ---------------------------------------------------------------------------
# writes
# ---------------------------------------------------------------------------


def upsert(
    submissions: Sequence[Submission],
    mlp_results: Iterable[MLPResult] = (),
    *,
    url: str | None = None,
) -> UpsertReport:
    """Insert or update every submission (and replace the per-MLP rows given) in one transaction.

    A submission whose stored row and per-MLP rows already equal the new ones is
    left untouched, so a repeated import reports everything unchanged and does
    not bump the revision. Two imports of the same new file at once both succeed:
    the one that loses the race for the new ids is redone on what the other wrote.
    """
    by_sub: dict[str, list[MLPResult]] = {}
    for res in mlp_results:
        by_sub.setdefault(res.submission_id, []).append(res)
    ensure_split_key(url=url)
    return _write(url, lambda s: _upsert(s, submissions, by_sub))


_split_key_checked: set[str] = set()


def ensure_split_key(*, url: str | None = None) -> None:
    """Give a per-MLP table created before splits its new key (submission, split, MLP index).

    The table bootstrap adds the ``split`` column to an older table (every row public) but
    cannot change its primary key, which would refuse the same MLP index in two splits (a
    rerun of the private MLPs). Once per store and process, before the first write: PostgreSQL
    swaps the constraint; SQLite, which cannot, copies the rows into a table of the new shape,
    all in one transaction, so a concurrent second attempt finds the key in place.
    """
    key = url or db_url()
    if key in _split_key_checked:
        return
    eng = engine(url)
    table = SubmissionMLPRow.__table__
    if "split" not in inspect(eng).get_pk_constraint(table.name)["constrained_columns"]:
        with eng.begin() as conn:
            if "split" not in inspect(conn).get_pk_constraint(table.name)["constrained_columns"]:
                _rekey(conn, table)
    _split_key_checked.add(key)


def _rekey(conn, table) -> None:
    columns = [f'"{c.name}"' for c in table.columns]
    if conn.dialect.name == "postgresql":
        constraint = inspect(conn).get_pk_constraint(table.name)["name"]
        conn.execute(text(f'ALTER TABLE {table.name} DROP CONSTRAINT "{constraint}"'))
        conn.execute(text(f"UPDATE {table.name} SET split = '{PUBLIC}' WHERE split IS NULL"))
        conn.execute(text(f"ALTER TABLE {table.name} ADD PRIMARY KEY (submission_id, split, mlp_index)"))
        return
    old = f"{table.name}_before_splits"
    copied = [f"COALESCE(split, '{PUBLIC}')" if c == '"split"' else c for c in columns]
    conn.execute(text(f"ALTER TABLE {table.name} RENAME TO {old}"))
    table.create(conn)
    conn.execute(text(f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {', '.join(copied)} FROM {old}"))
    conn.execute(text(f"DROP TABLE {old}"))


def _look_up_by_key(s: Session) -> None:
    """On PostgreSQL, this transaction's lookups of stored ids go through the tables' keys.

    An import compares each chunk with what is stored, 500 ids per query, while it fills the tables in
    the same transaction. The planner's statistics still describe the tables before the import (empty,
    at a first import), so it scanned the whole table for every query: 40,005 new rows took 92 s there
    against 8.5 s on SQLite, and the cost grows with the square of the import. ``SET LOCAL`` ends with
    the transaction.
    """
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SET LOCAL enable_seqscan = off"))


def _write(url: str | None, work):
    """``work(session)`` in one transaction; redone in a fresh one when a concurrent writer took a new key first.

    An IntegrityError here can only be a race (every value was validated before):
    another import inserted the same submission id, per-MLP key or store counter
    between this one's read and its write. The transaction is rolled back whole,
    so the retry sees the other's rows and decides again (unchanged or updated).
    """
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            with session(url) as s:
                _look_up_by_key(s)
                return work(s)
        except IntegrityError:
            if attempt == WRITE_ATTEMPTS:
                raise


def _upsert(s: Session, submissions: Sequence[Submission], by_sub: dict[str, list[MLPResult]]) -> UpsertReport:
    """Compared and written _WRITE_CHUNK submissions at a time: memory follows the chunk, not the import.

    Per-MLP rows naming a stored submission that is not in ``submissions`` (a private or
    rerun suite added later) replace that submission's rows of their splits only.
    """
    report = UpsertReport()
    for chunk in _chunks(list(submissions), _WRITE_CHUNK):
        _upsert_chunk(s, chunk, by_sub, report)
    named = {sub.submission_id for sub in submissions}
    attached = [sid for sid in by_sub if sid not in named]
    for chunk in _chunks(attached):
        existing_mlps = _existing_mlp_rows(s, chunk)
        new_mlps: list[MLPResult] = []
        for sid in chunk:
            changed = _replace_splits(s, sid, _sorted_mlps(by_sub[sid]), existing_mlps.get(sid, []), new_mlps)
            (report.updated if changed else report.unchanged).append(sid)
        _insert_mlps(s, new_mlps)
    if report.changed:
        _bump(s, REVISION_KEY)
    return report


#: Submissions compared and written at a time (their stored rows are read _IN_CHUNK ids per query).
_WRITE_CHUNK = 10_000


def _sorted_mlps(results: Iterable[MLPResult]) -> list[MLPResult]:
    return sorted(results, key=lambda r: (r.split, r.mlp_index))


def _replace_splits(s: Session, sid: str, new: list[MLPResult], old: list[dict], inserts: list[MLPResult]) -> bool:
    """Replace the stored rows of each split ``new`` carries (other splits stay); True when any changed."""
    changed = False
    for split in dict.fromkeys(row.split for row in new):
        fresh = [row for row in new if row.split == split]
        if [row for row in old if row["split"] == split] == [_mlp_values(row) for row in fresh]:
            continue
        s.execute(delete(SubmissionMLPRow).where(SubmissionMLPRow.submission_id == sid,
                                                 SubmissionMLPRow.split == split))
        inserts += fresh
        changed = True
    return changed


def _upsert_chunk(s: Session, chunk: Sequence[Submission], by_sub: dict[str, list[MLPResult]],
                  report: UpsertReport) -> None:
    existing = existing_rows(s, [sub.submission_id for sub in chunk])
    existing_mlps = _existing_mlp_rows(s, [sub.submission_id for sub in chunk
                                           if sub.submission_id in by_sub and sub.submission_id in existing])
    new_rows: list[Submission] = []
    new_mlps: list[MLPResult] = []
    for sub in chunk:
        old = existing.get(sub.submission_id)
        if old is None:
            new_rows.append(sub)
            new_mlps += _sorted_mlps(by_sub.get(sub.submission_id, ()))
            report.inserted.append(sub.submission_id)
            continue
        row_same = _same(old, _row_tuple(sub))
        if not row_same:
            s.execute(update(SubmissionRow).where(SubmissionRow.id == sub.submission_id).values(**_row_values(sub)))
        mlps_changed = _replace_splits(s, sub.submission_id, _sorted_mlps(by_sub.get(sub.submission_id, ())),
                                       existing_mlps.get(sub.submission_id, []), new_mlps)
        (report.unchanged if row_same and not mlps_changed else report.updated).append(sub.submission_id)
    _insert_records(s, SubmissionRow.__table__, new_rows, SUBMISSION_FIELDS, _ROW_COLUMNS)
    _insert_mlps(s, new_mlps)


def _insert_mlps(s: Session, results: Sequence[MLPResult]) -> None:
    _insert_records(s, SubmissionMLPRow.__table__, results, MLP_RESULT_FIELDS, MLP_RESULT_FIELDS)


#: Rows per executemany of an insert.
_INSERT_ROWS = 5_000
#: Positional placeholders by DBAPI paramstyle (sqlite3: qmark; psycopg: pyformat, which takes %s).
_PLACEHOLDERS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


def _insert_records(s: Session, table, records: Sequence, attributes: Sequence[str], columns: Sequence[str]) -> None:
    """Insert the records' ``attributes`` into ``columns`` of ``table``: one executemany per _INSERT_ROWS.

    The values go to the driver as tuples, converted a column at a time by the column types' own
    bind processors (what SQLAlchemy's insert would store: SQLite's text times, its integer
    booleans); building a parameter dict per row cost a 500,000-row import more than its checks.
    """
    if not records:
        return
    conn = s.connection()
    dialect = conn.dialect
    placeholder = _PLACEHOLDERS.get(dialect.paramstyle)
    if placeholder is None:  # a driver of another paramstyle: SQLAlchemy's own executemany of dicts
        for part in _chunks(list(records), _INSERT_ROWS):
            s.execute(table.insert(), [dict(zip(columns, _record_values(r, attributes), strict=True)) for r in part])
        return
    quote = dialect.identifier_preparer.quote
    sql = (f"INSERT INTO {dialect.identifier_preparer.format_table(table)} ({', '.join(map(quote, columns))}) "
           f"VALUES ({', '.join([placeholder] * len(columns))})")
    processors = [table.c[column].type.bind_processor(dialect) for column in columns]
    for name in TIME_FIELDS:
        if name in attributes:
            at = attributes.index(name)
            processors[at] = _naive_then(processors[at])
    converted = [i for i, process in enumerate(processors) if process]
    values_of = attrgetter(*attributes)
    # a column no record of a chunk fills (a file's absent optional columns) is left out of its insert:
    # NULL either way, and binding it costs as much as a filled one; only columns without a default
    droppable = [i for i, column in enumerate(columns)
                 if table.c[column].default is None and table.c[column].server_default is None]
    for part in _chunks(list(records), _INSERT_ROWS):
        by_column = list(zip(*map(values_of, part), strict=True))
        for i in converted:  # a column at a time: the few columns whose type converts its values
            by_column[i] = list(map(processors[i], by_column[i]))
        empty = {i for i in droppable if by_column[i].count(None) == len(part)}
        kept = [i for i in range(len(columns)) if i not in empty]
        statement = sql if not empty else (
            f"INSERT INTO {dialect.identifier_preparer.format_table(table)} "
            f"({', '.join(quote(columns[i]) for i in kept)}) VALUES ({', '.join([placeholder] * len(kept))})")
        conn.exec_driver_sql(statement, list(zip(*(by_column[i] for i in kept), strict=True)))


def _naive_then(process):
    """A time column's bind processor, given naive UTC (``to_utc_naive``) first."""
    return (lambda moment: process(to_utc_naive(moment))) if process else to_utc_naive


def _record_values(record, attributes: Sequence[str]) -> list:
    return [to_utc_naive(getattr(record, a)) if a in TIME_FIELDS else getattr(record, a) for a in attributes]


def _same(old: tuple, new: tuple) -> bool:
    return old == new or all(_equal(a, b) for a, b in zip(old, new, strict=True))


def _equal(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


_ROW_VALUES = attrgetter(*SUBMISSION_FIELDS)
_TIME_POSITIONS = tuple(SUBMISSION_FIELDS.index(name) for name in TIME_FIELDS)


def _row_tuple(sub: Submission) -> tuple:
    """The row's columns in _ROW_COLUMNS order, as ``existing_rows`` reads them back."""
    values = list(_ROW_VALUES(sub))
    for at in _TIME_POSITIONS:
        values[at] = to_utc_naive(values[at])
    return tuple(values)


_STORED_ROWS = select(*(SubmissionRow.__table__.c[name] for name in _ROW_COLUMNS)).where(
    SubmissionRow.__table__.c.id.in_(bindparam("ids", expanding=True)))


def existing_rows(s: Session, ids: Sequence[str]) -> dict[str, tuple]:
    """The stored rows of ``ids`` that exist, each its columns in _ROW_COLUMNS order, by id.

    One statement, its ids bound per chunk, run on the session's connection: the rows the ORM would
    return, without building a statement and coercing its 500 ids per chunk, nor the ORM's row loading
    (a quarter of the lookups' cost at a 40,000-row import).
    """
    conn = s.connection()
    out: dict[str, tuple] = {}
    for chunk in _chunks(list(ids)):
        for row in conn.execute(_STORED_ROWS, {"ids": chunk}):
            out[row[0]] = tuple(row)
    return out


def _existing_mlp_rows(s: Session, ids: Sequence[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    cols = [getattr(SubmissionMLPRow, name) for name in MLP_RESULT_FIELDS]
    for chunk in _chunks(list(ids)):
        query = (
            select(*cols)
            .where(SubmissionMLPRow.submission_id.in_(chunk))
            .order_by(SubmissionMLPRow.submission_id, SubmissionMLPRow.split, SubmissionMLPRow.mlp_index)
        )
        for row in s.execute(query).mappings():
            out.setdefault(row["submission_id"], []).append(dict(row))
    return out


def _chunks(items: list, size: int = _IN_CHUNK) -> Iterable[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _bump(s: Session, key: str) -> None:
    """Count a change; a store whose counters were wiped starts a new random epoch.

    The epoch keeps a wiped-and-refilled store from reusing a revision number
    that a reader has cached different data under.
    """
    import secrets

    pinned = _PINNED.get()
    if pinned:  # this request's later reads see its own write
        pinned.clear()
    if s.get(StoreMeta, EPOCH_KEY) is None:
        s.add(StoreMeta(key=EPOCH_KEY, value=secrets.randbelow(2**31 - 1) + 1))
    # One atomic increment in the database: two writers at once count two changes, not one.
    counted = s.execute(update(StoreMeta).where(StoreMeta.key == key).values(value=StoreMeta.value + 1)).rowcount
    if not counted:
        s.add(StoreMeta(key=key, value=1))
    s.flush()  # a concurrent first insert of a counter fails here, inside the write that _write redoes


EDITABLE_FIELDS = ("team", "status", "submitted_at", "estimator")


def edit_submission(submission_id: str, changes: dict, *, url: str | None = None) -> bool:
    """Change a few descriptive fields of one submission; False if it does not exist.

    Scores are not editable: a wrong score is fixed by re-importing the graded
    file, so every number on the board still comes from a grader's output. Text
    follows the import's rules (``text_problem``), so an edit cannot store what
    an import would refuse.
    """
    unknown = sorted(set(changes) - set(EDITABLE_FIELDS))
    if unknown:
        raise ValueError(f"cannot edit {', '.join(unknown)}; editable fields: {', '.join(EDITABLE_FIELDS)}")
    values = dict(changes)
    if "status" in values and values["status"] not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {values['status']!r}")
    for name in ("team", "estimator"):
        if name in values:
            values[name] = _edited_text(values[name], name, required=name == "team")
    if "submitted_at" in values:
        if not isinstance(values["submitted_at"], datetime):
            raise ValueError("submitted_at must be a time")
        values["submitted_at"] = to_utc_naive(values["submitted_at"])

    def change(s: Session) -> bool:
        row = s.get(SubmissionRow, submission_id)
        if row is None:
            return False
        for key, value in values.items():
            setattr(row, key, value)
        _bump(s, REVISION_KEY)
        return True

    return _write(url, change)


def _edited_text(value, name: str, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text")
    text = value.strip()
    if not text:
        if required:
            raise ValueError(f"{name} must not be empty")
        return None
    problem = text_problem(text, name)
    if problem:
        raise ValueError(problem)
    return text


def delete_submission(submission_id: str, *, url: str | None = None) -> bool:
    """Remove one submission and its per-MLP rows; False if there was none."""

    def remove(s: Session) -> bool:
        s.execute(delete(SubmissionMLPRow).where(SubmissionMLPRow.submission_id == submission_id))
        gone = s.execute(delete(SubmissionRow).where(SubmissionRow.id == submission_id)).rowcount
        if gone:
            _bump(s, REVISION_KEY)
        return bool(gone)

    return _write(url, remove)


def mark_seeded(*, url: str | None = None) -> bool:
    """Record that the shipped data was offered once; True only for the caller that set it."""
    try:
        with session(url) as s:
            if s.get(StoreMeta, SEEDED_KEY) is not None:
                return False
            s.add(StoreMeta(key=SEEDED_KEY, value=1))
    except IntegrityError:  # another worker set it a moment earlier
        return False
    return True


# ---------------------------------------------------------------------------
# reads
# ---------------------------------------------------------------------------


#: The revisions read so far in this request (``revision_pinned``), by store address; None outside one.
_PINNED: ContextVar[dict[str, str] | None] = ContextVar("whestboard_pinned_revision", default=None)


@contextmanager
def revision_pinned() -> Iterator[None]:
    """Read each store's revision once for everything inside (a web request): a page's layout reads a dozen
    cached views, each of which asked the store its revision; now the first asks and every view of the
    answer is of one revision. A write inside forgets what was read (``_bump``)."""
    token = _PINNED.set({})
    try:
        yield
    finally:
        _PINNED.reset(token)


def board_revision(*, url: str | None = None) -> str:
    """Changes with every write ("epoch:count"); what caches of derived data are keyed by."""
    pinned = _PINNED.get()
    where = url or db_url()
    if pinned is not None and where in pinned:
        return pinned[where]
    with session(url) as s:
        rows = dict(s.execute(select(StoreMeta.key, StoreMeta.value)
                              .where(StoreMeta.key.in_([EPOCH_KEY, REVISION_KEY]))).all())
    revision = f"{rows.get(EPOCH_KEY, 0)}:{rows.get(REVISION_KEY, 0)}"
    if pinned is not None:
        pinned[where] = revision
    return revision


def submission_count(*, url: str | None = None) -> int:
    """Public submissions stored (a final's rows holding only a rerun split are not submissions of the board)."""
    from sqlalchemy import func

    t = SubmissionRow.__table__
    with session(url) as s:
        return int(s.execute(select(func.count()).select_from(t).where(public_rows(t))).scalar_one())


def public_rows(t):
    """The clause every read of the board's field applies: not a row the final wrote (``FINAL_SOURCE``)."""
    return t.c.source.is_(None) | (t.c.source != FINAL_SOURCE)


def was_seeded(*, url: str | None = None) -> bool:
    with session(url) as s:
        return s.get(StoreMeta, SEEDED_KEY) is not None


SUBMISSION_COLUMNS = list(SUBMISSION_FIELDS)


def submissions_frame(*, round_tag: str | None = None, team: str | None = None, ids: Sequence[str] | None = None,
                      url: str | None = None) -> pd.DataFrame:
    """Every submission (of one round, of one team, among ``ids``) as a DataFrame in the import schema's columns.

    Without ``ids`` it reads the board's field, so a final's rows (``FINAL_SOURCE``) are left out; with
    ``ids`` it returns exactly the rows named (the rerun split's board names a final's rows).

    Read a few thousand rows at a time: the frame holds the store's text once per distinct value
    (a team's name, a version), not once per row, and no list of row objects outlives its chunk.
    """
    table = SubmissionRow.__table__
    query = _submissions_query(round_tag, public=ids is None)
    if team is not None:
        query = query.where(table.c.team == team)
    if ids is not None:
        rows: list = []  # the rows of every chunk, then one frame: building a frame costs ~25 ms however small
        with session(url) as s:
            for chunk in _chunks(list(ids)):
                rows += s.execute(query.where(table.c.id.in_(chunk))).all()
        out = _submission_frame(rows)
        return out.sort_values(["submitted_at", "submission_id"], kind="mergesort", ignore_index=True)
    return _frame_in_parts(query, url)


#: Rows read per chunk when a frame is built from many rows.
FRAME_CHUNK_ROWS = 20_000


def _frame_in_parts(query, url: str | None) -> pd.DataFrame:
    parts = []
    with session(url) as s:
        result = s.execute(query, execution_options={"yield_per": FRAME_CHUNK_ROWS})
        for part in result.partitions(FRAME_CHUNK_ROWS):
            parts.append(_submission_frame(part))
    if not parts:
        return _submission_frame([])
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


def iter_frames(rows_per_frame: int, *, with_final: bool = False, url: str | None = None) -> Iterator[pd.DataFrame]:
    """Every submission, in ``frame``'s order and columns, a few thousand rows at a time.

    The first frame is the empty table (the columns), so an empty store still
    yields its header; the query runs before it. What exports stream from:
    memory follows the frame, not the store. ``with_final`` adds the rows a final wrote
    (``FINAL_SOURCE``): the organizer's export, whose rerun results name them.
    """
    with session(url) as s:  # queried before the first frame: an unreachable store fails there
        result = s.execute(_submissions_query(None, public=not with_final),
                           execution_options={"yield_per": rows_per_frame})
        yield _submission_frame([])
        for part in result.partitions(rows_per_frame):
            yield _submission_frame(part)


def _submissions_query(round_tag: str | None, *, public: bool = True):
    table = SubmissionRow.__table__
    query = select(table).where(public_rows(table)) if public else select(table)
    if round_tag is not None:
        query = query.where(table.c.round_tag == round_tag)
    return query.order_by(table.c.submitted_at, table.c.id)


_REPEATED_TEXT = ("team", "round", "status", "whestbench_version", "flopscope_version", "dataset", "estimator",
                  "source", "seed_protocol")


def _submission_frame(rows: Sequence) -> pd.DataFrame:
    """Rows of ``select(SubmissionRow)`` (tuples in its column order), built column by column."""
    names = [c.name for c in SubmissionRow.__table__.columns]
    repeated = {_RENAMED.get(name, name) for name in _REPEATED_TEXT}
    # one string object per distinct value (500,000 rows name 300 teams), interned before the frame is
    # built: a frame's text column is not iterated back into Python objects to do it
    if len(rows):
        df = pd.DataFrame({name: [sys.intern(v) if isinstance(v, str) else v for v in values] if name in repeated
                           else list(values) for name, values in zip(names, zip(*rows, strict=True), strict=True)})
    else:
        df = pd.DataFrame(columns=names)
    df = df.rename(columns={v: k for k, v in _RENAMED.items()})[SUBMISSION_COLUMNS]
    for col in TIME_FIELDS:
        df[col] = pd.to_datetime(df[col], utc=True)
    for col in ("mean_flops_used", "final_layer_mse", "adjusted_score", "mean_multiplier",
                "mean_effective_compute", "mean_avg_variance"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    for col in ("n_failed_mlps", "n_mlps"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    df["nominated"] = df["nominated"].fillna(False).astype(bool)
    return df


#: The columns a round's scatter bins, read without the rest of the row (no text but the id).
FIELD_COLUMNS = ("submission_id", "adjusted_score", "final_layer_mse", "mean_flops_used", "mean_effective_compute")


def round_field(round_tag: str, *, url: str | None = None) -> pd.DataFrame:
    """The round's graded submissions in FIELD_COLUMNS only, by id: what the scatter's density is binned from.

    Taken from ``round_scan`` (one read of the round per store revision, shared with the counts and
    each team's best): no time parsed, no text but the id.
    """
    scan = round_scan(round_tag, url=url)
    graded = scan[scan["graded"].to_numpy(bool)]
    return graded[list(FIELD_COLUMNS)].reset_index(drop=True).assign(status="graded")


#: What ``round_scan`` reads of every submission of a round (``graded``: its status is "graded").
SCAN_COLUMNS = ("submission_id", "team", "graded", *FIELD_COLUMNS[1:])


def round_scan(round_tag: str, *, url: str | None = None) -> pd.DataFrame:
    """Every submission of the round in SCAN_COLUMNS, ordered by id: one narrow read per store revision.

    The round's counts per team, each team's lowest score and the scatter's field are all derived from
    it (``cached``), so the first draw of a 350,000-submission round reads the round once; and once per
    store revision on the machine, not per worker: the read is kept as a columnar snapshot (``snapshot``).
    """
    def compute() -> pd.DataFrame:
        return _snapshotted(f"round_scan:{round_tag}", lambda: _round_scan_rows(round_tag, url), ("team",), url)

    return cached(f"round_scan:{round_tag}", compute, url=url)


def _round_scan_rows(round_tag: str, url: str | None) -> pd.DataFrame:
    """``round_scan`` read from the table itself (what a snapshot is made of)."""
    df = _columns_in_parts(_scan_query(round_tag, url), SCAN_COLUMNS, FIELD_COLUMNS[1:], url, repeated=("team",))
    df["graded"] = df["graded"].astype(bool)
    return df


def _snapshotted(name: str, scan, repeated: Sequence[str], url: str | None) -> pd.DataFrame:
    """``scan()`` as kept by ``snapshot`` for the store's current revision: arrays from a file, not rows."""
    return _snapshot.read_or_build(url or db_url(), name, lambda: board_revision(url=url), scan, repeated)


def refresh_snapshots(*, url: str | None = None) -> None:
    """Write the snapshots of every round's narrow read and of the timeline's columns for the current revision.

    Called right after an import commits, so the first page view after it reads arrays, not the table.
    """
    for round_tag in sorted(rounds_present(url=url)):
        round_scan(round_tag, url=url)
    timeline_field(url=url)


#: A round holding more than this share of the store is read by one pass over the table, not its index.
WHOLE_TABLE_SHARE = 1 / 3


def _scan_query(round_tag: str, url: str | None):
    """``round_scan``'s query. For a round holding most of the store, looking each row up through the
    round's index costs more than one pass over the table (20% of the read at 350,000 of 500,000 rows
    on SQLite), so the comparison is written so that no index serves it."""
    from sqlalchemy import case, func, literal

    t = SubmissionRow.__table__
    with session(url) as s:
        in_round = int(s.execute(select(func.count()).select_from(t).where(t.c.round_tag == round_tag)).scalar_one())
        total = int(s.execute(select(func.count()).select_from(t)).scalar_one())
    matches = (t.c.round_tag + literal("")) == round_tag if in_round > WHOLE_TABLE_SHARE * total \
        else t.c.round_tag == round_tag
    return (select(t.c.id, t.c.team, case((t.c.status == "graded", 1), else_=0), t.c.adjusted_score,
                   t.c.final_layer_mse, t.c.mean_flops_used, t.c.mean_effective_compute)
            .where(matches & public_rows(t)).order_by(t.c.id))


def _plain_rows(s: Session, query) -> Iterator[list[tuple]]:
    """The query's rows as the driver returns them (plain tuples), FRAME_CHUNK_ROWS at a time.

    For narrow numeric reads of a whole round: SQLAlchemy's row objects cost more than the
    values in them, and a frame built from tuples is built in C. Only for columns the driver
    returns as they are stored (numbers, text; times are cast to text in the query).
    """
    connection = s.connection()
    compiled = query.compile(dialect=connection.dialect)
    params = compiled.construct_params()
    args = tuple(params[name] for name in compiled.positiontup) if compiled.positional else params
    cursor = connection.connection.dbapi_connection.cursor()
    try:
        cursor.execute(str(compiled), args)
        while part := cursor.fetchmany(FRAME_CHUNK_ROWS):
            yield part
    finally:
        cursor.close()


def _columns_in_parts(query, names: Sequence[str], numeric: Sequence[str], url: str | None,
                      repeated: Sequence[str] = ()) -> pd.DataFrame:
    """A narrow query's rows as a frame, read a chunk at a time and converted by numpy, not row by row.

    Each chunk becomes one object array, split at once into its columns (None turns into NaN where the
    column is numeric) and dropped; a ``repeated`` text column (a team's name, a round) holds one
    string object per distinct value of a chunk, so memory follows the columns, not the rows.
    """
    columns: dict[str, list[np.ndarray]] = {name: [] for name in names}
    with session(url) as s:
        for part in _plain_rows(s, query):
            values = np.array(part, dtype=object).reshape(len(part), len(names))
            del part
            for i, name in enumerate(names):
                column = values[:, i]
                if name in numeric:
                    columns[name].append(column.astype(np.float64))
                elif name in repeated:
                    codes, distinct = pd.factorize(column, use_na_sentinel=False)
                    columns[name].append(np.asarray(distinct, dtype=object)[codes])
                else:
                    columns[name].append(column.copy())  # a copy: the chunk's 2-D array is freed with it
    out = {}
    for name, parts in columns.items():
        kind = np.float64 if name in numeric else object
        joined = np.concatenate(parts) if parts else np.empty(0, dtype=kind)
        out[name] = joined if name in numeric else pd.Series(joined, dtype=object)
    return pd.DataFrame(out)


def timeline_field(*, url: str | None = None) -> pd.DataFrame:
    """Every graded submission's id, team, round, time, score and own variance: what a timeline bins.

    Times are read as text and parsed once per column, not once per row; kept as a snapshot per
    store revision (``snapshot``), so a fresh worker reads arrays, not 500,000 rows.
    """
    return _snapshotted("timeline_field", lambda: _timeline_scan(url), ("team", "round", "status"), url)


def _timeline_scan(url: str | None) -> pd.DataFrame:
    from sqlalchemy import cast

    t = SubmissionRow.__table__
    query = (select(t.c.id, t.c.team, t.c.round_tag, cast(t.c.submitted_at, String), t.c.adjusted_score,
                    t.c.mean_avg_variance).where((t.c.status == "graded") & public_rows(t)).order_by(t.c.id))
    names = ("submission_id", "team", "round", "submitted_at", "adjusted_score", "mean_avg_variance")
    df = _columns_in_parts(query, names, names[4:], url, repeated=("team", "round"))
    df["submitted_at"] = pd.to_datetime(df["submitted_at"], utc=True, format="ISO8601")
    df["status"] = "graded"
    return df


def round_counts(round_tag: str, *, url: str | None = None) -> tuple[dict[str, int], int]:
    """Submissions of the round per team (any status), and how many of them are graded (from ``round_scan``)."""

    def compute() -> tuple[dict[str, int], int]:
        scan = round_scan(round_tag, url=url)
        per_team = scan["team"].value_counts(sort=False)
        return {str(team): int(n) for team, n in per_team.items()}, int(scan["graded"].sum())

    per_team, n_graded = cached(f"round_counts:{round_tag}", compute, url=url)
    return dict(per_team), n_graded


def rounds_present(*, url: str | None = None) -> set[str]:
    t = SubmissionRow.__table__
    with session(url) as s:
        return set(s.execute(select(t.c.round_tag).where(public_rows(t)).distinct()).scalars())


def best_candidates(round_tag: str, *, url: str | None = None) -> pd.DataFrame:
    """The round's graded submissions whose score is their team's lowest (ties kept), as ``frame`` rows.

    ``ranking.best_per_team`` of these equals that of the whole round (it keeps the lowest score,
    then the earliest, then the smallest id), so a ranking of 500,000 submissions reads a few
    hundred full rows; the lowest score per team comes from ``round_scan``, once per revision (``cached``).
    """

    def compute() -> pd.DataFrame:
        scan = round_scan(round_tag, url=url)
        scored = scan[scan["graded"].to_numpy(bool) & scan["adjusted_score"].notna().to_numpy()]
        lowest = scored.groupby("team", sort=False)["adjusted_score"].transform("min")
        return submissions_frame(ids=scored["submission_id"][scored["adjusted_score"] == lowest].tolist(), url=url)

    return cached(f"best_candidates:{round_tag}", compute, url=url).copy()


def in_window(round_tag: str, x_column: str, y_column: str, x_range: tuple[float, float],
              y_range: tuple[float, float], limit: int, *, url: str | None = None) -> tuple[int, pd.DataFrame]:
    """How many graded submissions of the round lie in the window, and their rows when at most ``limit`` do.

    ``x_column``: ``mean_flops_used`` or ``mean_effective_compute`` (which falls back to the FLOPs,
    as the scatter draws it); ``y_column``: ``adjusted_score`` or ``final_layer_mse``. Counted on the
    round's narrow read (``round_scan``, kept per store revision), so a zoom reads the full rows of
    the dots in view only, never the field.
    """
    scan = round_scan(round_tag, url=url)
    x = scan[x_column].to_numpy(np.float64)
    if x_column == "mean_effective_compute":
        x = np.where(np.isnan(x), scan["mean_flops_used"].to_numpy(np.float64), x)
    y = scan[y_column].to_numpy(np.float64)
    with np.errstate(invalid="ignore"):  # a missing value is in no window, as in SQL
        inside = (scan["graded"].to_numpy(bool) & (x >= x_range[0]) & (x <= x_range[1])
                  & (y >= y_range[0]) & (y <= y_range[1]))
    n = int(inside.sum())
    if n > limit:
        return n, _submission_frame([])
    return n, submissions_frame(ids=scan["submission_id"].to_numpy(object)[inside].tolist(), url=url)


def mlp_frame(submission_ids: Sequence[str] | None = None, *, splits: Sequence[str] | None = None,
              url: str | None = None) -> pd.DataFrame:
    """Per-MLP results (of the given submissions, or all; of the given splits, or all) in the per-MLP schema."""
    parts: list[tuple] = []  # plain tuples: a row mapping per result costs 3x as much for 30,000 rows
    with session(url) as s:
        if submission_ids is None:
            parts = list(s.execute(_mlp_query(splits)).all())
        else:
            table = SubmissionMLPRow.__table__
            for chunk in _chunks(list(submission_ids)):
                parts += s.execute(_mlp_query(splits).where(table.c.submission_id.in_(chunk))).all()
    return _mlp_frame(parts).sort_values(["submission_id", "split", "mlp_index"], ignore_index=True)


def iter_mlp_frames(rows_per_frame: int, *, splits: Sequence[str] | None = None,
                    url: str | None = None) -> Iterator[pd.DataFrame]:
    """Every per-MLP result (of ``splits``), in ``mlp_frame``'s order and columns, a few thousand rows at a time."""
    with session(url) as s:
        result = s.execute(_mlp_query(splits), execution_options={"yield_per": rows_per_frame}).mappings()
        yield _mlp_frame([])
        for part in result.partitions(rows_per_frame):
            yield _mlp_frame([dict(r) for r in part])


def _mlp_query(splits: Sequence[str] | None = None):
    table = SubmissionMLPRow.__table__
    query = select(*[table.c[name] for name in MLP_RESULT_FIELDS])
    if splits is not None:
        query = query.where(table.c.split.in_(list(splits)))
    return query.order_by(table.c.submission_id, table.c.split, table.c.mlp_index)


def _mlp_frame(rows: Sequence) -> pd.DataFrame:
    """Rows as dicts or as tuples in MLP_RESULT_FIELDS order (built column by column: 6x faster than by row)."""
    if rows and not isinstance(rows[0], dict):
        df = pd.DataFrame(dict(zip(MLP_RESULT_FIELDS, map(list, zip(*rows, strict=True)), strict=True)))
    else:
        df = pd.DataFrame(list(rows), columns=list(MLP_RESULT_FIELDS))
    for col in MLP_NUMBER_FIELDS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    df["mlp_index"] = df["mlp_index"].astype(int)
    df["failed"] = df["failed"].astype(bool)
    df["split"] = df["split"].fillna(PUBLIC).astype(object)
    return df


def split_summary(splits: Sequence[str], *, url: str | None = None) -> pd.DataFrame:
    """Per (submission, split): MLP count, failed count and the means of the per-MLP values, in SQL.

    What a private or rerun ranking is built from: one grouped query instead of
    every per-MLP row of 10,000 submissions.
    """
    from sqlalchemy import func

    t = SubmissionMLPRow.__table__
    query = (
        select(t.c.submission_id, t.c.split, func.count().label("n_mlps"),
               func.sum(func.cast(t.c.failed, Integer)).label("n_failed_mlps"),
               func.avg(t.c.adjusted_score).label("adjusted_score"),
               func.avg(t.c.final_layer_mse).label("final_layer_mse"),
               func.avg(t.c.multiplier).label("mean_multiplier"),
               func.avg(t.c.flops_used).label("mean_flops_used"),
               func.avg(t.c.effective_compute).label("mean_effective_compute"))
        .where(t.c.split.in_(list(splits)))
        .group_by(t.c.submission_id, t.c.split)
    )
    with session(url) as s:
        rows = s.execute(query).mappings().all()
    columns = ["submission_id", "split", "n_mlps", "n_failed_mlps", "adjusted_score", "final_layer_mse",
               "mean_multiplier", "mean_flops_used", "mean_effective_compute"]
    df = pd.DataFrame([dict(r) for r in rows], columns=columns)
    for col in columns[4:]:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype(float)
    for col in ("n_mlps", "n_failed_mlps"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df


def mlp_variance_summary(*, url: str | None = None) -> pd.Series:
    """Mean per-MLP avg_variance of each submission whose public per-MLP variances are all known.

    Aggregated in SQL so the leaderboard never pulls every per-MLP row.
    """
    from sqlalchemy import func

    t = SubmissionMLPRow.__table__
    query = (
        select(t.c.submission_id, func.avg(t.c.avg_variance), func.count(t.c.avg_variance), func.count())
        .where(t.c.split == PUBLIC)
        .group_by(t.c.submission_id)
    )
    with session(url) as s:
        rows = s.execute(query).all()
    return pd.Series({sid: float(mean) for sid, mean, known, total in rows if known == total and mean is not None},
                     dtype=float)


def stored_ids(ids: Sequence[str], *, url: str | None = None) -> set[str]:
    """Which of ``ids`` are stored submissions."""
    found: set[str] = set()
    with session(url) as s:
        for chunk in _chunks(list(ids)):
            found |= set(s.execute(select(SubmissionRow.id).where(SubmissionRow.id.in_(chunk))).scalars())
    return found


def ids_with_mlp_results(*, url: str | None = None) -> set[str]:
    table = SubmissionMLPRow.__table__
    with session(url) as s:
        return set(s.execute(select(table.c.submission_id).distinct()).scalars())


def get_submission(submission_id: str, *, url: str | None = None) -> Submission | None:
    with session(url) as s:
        row = s.get(SubmissionRow, submission_id)
        if row is None:
            return None
        values = {k: getattr(row, _RENAMED.get(k, k)) for k in SUBMISSION_FIELDS}
    for name in TIME_FIELDS:
        if values[name] is not None:
            values[name] = values[name].replace(tzinfo=UTC)
    return Submission(**values)


# ---------------------------------------------------------------------------
# derived data, once per store revision and process, in the one cache service
# ---------------------------------------------------------------------------


def _weight(value) -> int:
    """What a derived value holds in memory: frames and arrays by their buffers, tuples by their parts."""
    if isinstance(value, pd.DataFrame):
        return int(value.memory_usage(index=True).sum())
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, tuple):
        return sum(_weight(part) for part in value)
    return 0


#: A key holds the store, its revision and the read's name, so a write is never served stale; the
#: values of an older revision go as the region's entry and byte bounds evict them.
_DERIVED = Region("leaderboard-derived", max_entries=64, share=0.5, size_of=_weight)


#: A team's own rows, apart from the board's views: a visitor going through many teams evicts only teams.
_TEAMS = Region("leaderboard-team-rows", max_entries=256, share=0.05, size_of=_weight)


def team_submissions(team: str, *, url: str | None = None) -> pd.DataFrame:
    """The team's submissions of every round, read once per store revision and process: its highlighted
    dots, its history panel and its timeline traces read them on every view that names the team. The
    frame is shared: callers never change it in place."""
    return cached(f"team-submissions:{team}", lambda: submissions_frame(team=team, url=url), url=url, region=_TEAMS)


def team_mlp_results(team: str, *, url: str | None = None) -> pd.DataFrame:
    """The public per-MLP results of the team's submissions, likewise once per revision (shared, unchanged)."""
    return cached(f"team-mlps:{team}", lambda: mlp_frame(team_submissions(team, url=url)["submission_id"].tolist(),
                                                          splits=(PUBLIC,), url=url), url=url, region=_TEAMS)


def count_board_change(*, url: str | None = None) -> None:
    """Count a change made beside the tables (a final's record in the artifact store): every cached view
    of the board is read afresh, on every machine."""
    _write(url, lambda s: _bump(s, REVISION_KEY))


def cached(name: str, compute, *, url: str | None = None, region: Region = _DERIVED):
    """``compute()`` once per store revision and process: a cheap revision read per call.

    Pages call this so that a page view with 10,000 submissions costs one
    integer query, not a table scan, until an organizer changes something.
    ``region``: the LRU it is kept in (a team's rows have their own, so that they never evict a board).
    """
    return region.get_or_load((url or db_url(), board_revision(url=url), name), compute)


def db_url() -> str:

    return config.database_url()
