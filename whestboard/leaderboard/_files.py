"""Import graded submissions (CSV, Parquet, ``whest run --json``) and export them back.

The schema is documented in docs/submissions-schema.md. Every problem found is
reported with the file and line it comes from, and nothing is written unless
the whole batch is valid: an organizer fixes the file and imports it again,
never half a leaderboard. Re-importing a submission id updates that
submission (its per-MLP rows replaced when the batch carries them).

Hostile input is refused, never fatal: tables are read in chunks, a refused
file keeps no records and stops being checked after MAX_COUNTED_PROBLEMS
problems, only the first MAX_SHOWN_PROBLEMS are kept word for word, values are
echoed cut short, and a JSON report is bounded in size and nesting before it
is walked. Every CSV export goes through ``csv_text``, which neutralises cells
a spreadsheet would run as formulas in a way the import reverses.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from functools import lru_cache, partial
from itertools import compress
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whestboard import config, logs
from whestboard.data import data_dir
from whestboard.leaderboard import _store
from whestboard.leaderboard._records import AGGREGATE_RTOL, is_record, read_record, rounding_rtol, unwrap
from whestboard.leaderboard._store import (
    MLP_RESULT_FIELDS,
    MLP_TEXT_LIMITS,
    SUBMISSION_FIELDS,
    SUBMISSION_TEXT_LIMITS,
    TIME_FIELDS,
    TIMING_FIELDS,
    MLPResult,
    Submission,
    UpsertReport,
)
from whestboard.rules import (
    ALL_ROUNDS,
    VERDICTS,
    flat_entry,
    get_round,
    is_failed,
    judge,
    round_for_shape,
    telemetry_of,
)
from whestboard.store import strict_json

#: ``whestbench_version`` is not required: a file that does not say what priced its scores imports with the
#: versions unknown (``_store.UNKNOWN``), shown as such on the board, never guessed.
REQUIRED_SUBMISSION_COLUMNS = ("submission_id", "team", "round", "submitted_at", "status")
REQUIRED_MLP_COLUMNS = ("submission_id", "mlp_index", "final_layer_mse", "adjusted_score")
PER_MLP_SUFFIX = ".per_mlp"
# Aggregates must equal the mean of their per-MLP values to AGGREGATE_RTOL (relative), or to a grader
# record's own rounding (``rounding_rtol``); a grader record is read by ``_records``.
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
#: Failure flags of a per-MLP entry in a ``whest run`` report (whestbench.scoring's own list).

#: Problems listed word for word (the page, the HTTP API and the command line show these).
MAX_SHOWN_PROBLEMS = 50
#: A refused import is checked no further than this many problems: the verdict cannot change.
MAX_COUNTED_PROBLEMS = 1_000
#: Rows per table file: 10,000 submissions x 100 MLPs; a larger file is split.
MAX_TABLE_ROWS = 1_000_000

def max_parquet_expanded_bytes() -> int:
    """What a Parquet file may expand to, uncompressed (its metadata says before anything is read)."""
    return 4 * config.upload_max_bytes()

#: Rows parsed at a time: memory follows the chunk, not the file.
CHUNK_ROWS = 20_000
#: A CSV header of this schema is ~300 bytes; a longer first line is not a header.
MAX_HEADER_BYTES = 64 * 2**10
#: A `whest run --json` report takes ~10 KB per MLP: 8 MiB holds 800 MLPs (a phase's suite has 100).
MAX_REPORT_BYTES = 8 * 2**20
#: A report nests about 10 levels deep; deeper JSON is not a report (and recursion must stay bounded).
MAX_JSON_DEPTH = 64
#: Characters of a bad value echoed in a message.
SHOWN_CHARACTERS = 60

#: A cell starting with one of these is run as a formula by spreadsheets (OWASP, "CSV injection").
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE_QUOTE = "'"
_ESCAPED_STARTS = frozenset((*FORMULA_TRIGGERS, ESCAPE_QUOTE))


class ProblemLog:
    """The problems of one import: counted by kind, the first MAX_SHOWN_PROBLEMS kept word for word.

    A refused 50 MB file can hold millions of problems; what the organizer needs
    is the first few (to see what is wrong) and the counts (to see how far it
    goes), in a message of a few KB. ``stopped_at`` says where checking stopped
    once MAX_COUNTED_PROBLEMS were found (None: every row was checked).
    """

    def __init__(self, messages: Iterable[str] = (), kind: str = "file") -> None:
        self.shown: list[str] = []
        self.counts: Counter[str] = Counter()
        self.total = 0
        self.stopped_at: str | None = None
        for message in messages:
            self.add(message, kind)

    def add(self, message: str, kind: str = "file") -> None:
        self.total += 1
        self.counts[kind] += 1
        if len(self.shown) < MAX_SHOWN_PROBLEMS:
            self.shown.append(message)

    def extend(self, messages: Iterable[str], kind: str = "file") -> None:
        for message in messages:
            self.add(message, kind)

    @property
    def full(self) -> bool:
        """Enough to refuse and to show: checking further would only cost time and memory."""
        return self.total >= MAX_COUNTED_PROBLEMS

    def __bool__(self) -> bool:
        return self.total > 0

    def __iter__(self) -> Iterator[str]:
        return iter(self.shown)

    def summary(self) -> str:
        if self.stopped_at:
            return (f"at least {self.total:,} problems found (checking stopped at {self.stopped_at}); "
                    "nothing was imported")
        return f"{self.total:,} problem(s) found; nothing was imported"

    def unshown(self) -> str | None:
        """The line that stands for the problems not listed, with the counts by kind; None when all are listed."""
        hidden = self.total - len(self.shown)
        if hidden <= 0:
            return None
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in self.counts.most_common())
        return f"… and {hidden:,} more (all problems by field: {kinds})"

    def as_json(self) -> dict:
        """The HTTP API's body for a refused import: a few KB whatever the file."""
        return {"ok": False, "error": self.summary(), "problems": list(self.shown), "problem_count": self.total,
                "problem_counts": dict(self.counts), "complete": self.stopped_at is None}


class ImportRejected(ValueError):
    """The batch had problems; nothing was imported. ``problems`` lists the first ones, ``log`` has the counts."""

    def __init__(self, problems: ProblemLog | Iterable[str]) -> None:
        self.log = problems if isinstance(problems, ProblemLog) else ProblemLog(problems)
        self.problems = list(self.log.shown)
        lines = self.problems + [line for line in [self.log.unshown()] if line]
        super().__init__(self.log.summary() + ":\n  " + "\n  ".join(lines))


@dataclass
class Batch:
    """Validated submissions and per-MLP results, ready to write in one transaction."""

    submissions: list[Submission] = field(default_factory=list)
    mlp_results: list[MLPResult] = field(default_factory=list)
    problems: ProblemLog = field(default_factory=ProblemLog)
    files: list[str] = field(default_factory=list)
    # where each submission came from, for cross-check messages
    origin: dict[str, str] = field(default_factory=dict)
    # submissions not in the batch whose private or rerun results it adds (they must be stored)
    attached: set[str] = field(default_factory=set)
    # what was checked and is worth saying once the batch is written (a grader record's recomputed score)
    notes: list[str] = field(default_factory=list)
    # a submission whose numbers were rounded where they came from (a grader record): the relative
    # tolerance its aggregates are checked to against its per-MLP values (else AGGREGATE_RTOL)
    rtol: dict[str, float] = field(default_factory=dict)

    def keep(self, record: Submission | MLPResult, where: str) -> None:
        """Hold a valid record, unless the batch is refused already: a refused import keeps no rows in memory."""
        if self.problems:
            return
        if isinstance(record, MLPResult):
            self.mlp_results.append(record)
        else:
            self.submissions.append(record)
            self.origin.setdefault(record.submission_id, where)

    def refuse(self, message: str, kind: str = "file") -> None:
        self.problems.add(message, kind)
        self.drop_records()

    def drop_records(self) -> None:
        """A refused batch is never written: its records would only hold memory."""
        self.submissions.clear()
        self.mlp_results.clear()
        self.origin.clear()
        self.attached.clear()
        self.notes.clear()


@dataclass(frozen=True)
class Upload:
    """A file's name and bytes, as the page and the HTTP API receive it."""

    name: str
    data: bytes


# ---------------------------------------------------------------------------
# CSV cells a spreadsheet would run
# ---------------------------------------------------------------------------


def escape_formula(value: Any) -> Any:
    """A text cell as exported: one more leading quote when it starts with a formula trigger or a quote.

    OWASP's rule for CSV injection (a leading ``'`` makes a spreadsheet show the
    cell as text), made reversible: because a cell that starts with a quote is
    quoted too, ``unescape_formula`` can tell an added quote from one in the data.
    """
    if isinstance(value, str) and value[:1] in _ESCAPED_STARTS:
        return ESCAPE_QUOTE + value
    return value


def unescape_formula(value: Any) -> Any:
    """A CSV text cell as imported: the one quote ``escape_formula`` added is removed.

    Only a quote followed by a trigger or by another quote is one; any other
    leading quote (``'s-Hertogenbosch``) is data, as it was before the rule.
    """
    if isinstance(value, str) and len(value) > 1 and value[0] == ESCAPE_QUOTE and value[1] in _ESCAPED_STARTS:
        return value[1:]
    return value


def csv_text(df: pd.DataFrame, text_columns: Iterable[str], *, header: bool = True) -> str:
    """The one CSV writer of every export (command line, HTTP API, page downloads)."""
    out = df.copy()
    for column in text_columns:
        if column in out.columns:
            out[column] = out[column].map(escape_formula)
    return out.to_csv(index=False, header=header)


# ---------------------------------------------------------------------------
# value parsing: each returns (value, problem-or-None)
# ---------------------------------------------------------------------------


def _blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    try:
        if value is pd.NA or value is pd.NaT:
            return True
    except TypeError:
        pass
    return isinstance(value, str) and not value.strip()


def _shown(value: Any) -> str:
    """A value as a message echoes it: its repr, cut short (a 50 MB cell must not make a 50 MB message)."""
    if isinstance(value, dict):
        return "a JSON object"
    if isinstance(value, list | tuple):
        return "a JSON array"
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARACTERS:
            return repr(value)
        return f"{value[:SHOWN_CHARACTERS]!r}… ({len(value):,} characters)"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + "…"


#: Text fields whose values repeat from row to row (a team, a round, a version): checked once per value.
_REPEATING_TEXT = frozenset({"team", "round", "status", "whestbench_version", "flopscope_version", "dataset",
                             "estimator", "source", "mlp_name", "seed_protocol", "error_code"})


def _text(value: Any, name: str, *, required: bool):
    if name in _REPEATING_TEXT and type(value) is str:
        return _repeating_text(value, name, required)
    return _checked_text(value, name, required)


@lru_cache(maxsize=8192)
def _repeating_text(value: str, name: str, required: bool):
    """``_checked_text`` of a value seen before: a 500,000-row file names a few hundred teams."""
    return _checked_text(value, name, required)


def _checked_text(value: Any, name: str, required: bool):
    if _blank(value):
        return None, (f"{name} is missing" if required else None)
    if isinstance(value, dict | list):
        return None, f"{name} is {_shown(value)}, not text"
    text = str(value)
    # the raw value is checked: a tab or line break at either end is refused, not stripped away unseen
    problem = _store.text_problem(text, name, limit_after_strip=True)
    # one string object per distinct value: a team, round or version repeats on every row of a large file
    return (None, problem) if problem else (sys.intern(text.strip()), None)


def _version(value: Any, name: str):
    """whestbench's version: blank is ``_store.UNKNOWN`` (the file did not say), never a guess."""
    text, problem = _text(value, name, required=False)
    return (_store.UNKNOWN if text is None and problem is None else text), problem


def _number(value: Any, name: str, *, required: bool, minimum: float = 0.0, strict: bool = False):
    if _blank(value):
        return None, (f"{name} is missing" if required else None)
    if isinstance(value, bool):
        return None, f"{name} is {value!r}, not a number"
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None, f"{name} is {_shown(value)}, not a number"
    if not math.isfinite(number):
        return None, f"{name} is {_shown(value)}; it must be a finite number"
    if number < minimum or (strict and number == minimum):
        relation = "above" if strict else "at least"
        return None, f"{name} is {number:g}; it must be {relation} {minimum:g}"
    return number, None


def _integer(value: Any, name: str, *, required: bool, minimum: int = 0):
    number, problem = _number(value, name, required=required, minimum=minimum)
    if problem or number is None:
        return None, problem
    if number != int(number):
        return None, f"{name} is {_shown(value)}, not a whole number"
    return int(number), None


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def _boolean(value: Any, name: str):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False, None
    if isinstance(value, bool):
        return value, None
    text = str(value).strip().lower() if not isinstance(value, dict | list) else None
    if text in _TRUE:
        return True, None
    if text in _FALSE:
        return False, None
    return None, f"{name} is {_shown(value)}; write true or false"


#: The failure kinds a per-MLP row may name: the one failure vocabulary's verdicts (whestboard.rules._failures).
FAILURE_KINDS = tuple(v for v in VERDICTS if v != "ok")


def _choice(value: Any, name: str, choices: Sequence[str], default: str | None):
    """A value from a fixed list (case-insensitive); blank gives ``default``."""
    if _blank(value):
        return default, None
    text = str(value).strip().lower() if not isinstance(value, dict | list) else None
    if text in choices:
        return sys.intern(text), None
    return None, f"{name} is {_shown(value)}; write one of {', '.join(choices)}"


def _split(value: Any, name: str):
    return _choice(value, name, _store.SPLITS, _store.PUBLIC)


def _failure(value: Any, name: str):
    return _choice(value, name, FAILURE_KINDS, None)


def parse_time(value: Any) -> datetime:
    """ISO 8601 (or a datetime); a time without zone is taken as UTC. Raises ValueError."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, datetime):
        return _in_utc(value)
    return _text_time(str(value))


def _text_time(value: str) -> datetime:
    """``parse_time`` of a text. Raises ValueError (or OverflowError)."""
    text = value.strip()[:64]  # an ISO time is ~32 characters; a longer one is not a time
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return _in_utc(datetime.fromisoformat(text))


def _in_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _optional_time(value: Any, name: str):
    """A time that may be left out (``graded_at``): blank is None, not a problem."""
    return (None, None) if _blank(value) else _time(value, name)


#: A depth of a round is at most 32; a list of more layers than this is no per-layer MSE of any round.
MAX_LAYERS = 64


def _layers(value: Any, name: str):
    """Per-layer MSEs: a JSON array of numbers >= 0 (a CSV cell, as the export writes it) or a list (a record,
    a Parquet cell), stored as compact JSON text that reads back to the same floats."""
    if value is None or (isinstance(value, str) and _blank(value)) or (isinstance(value, float) and math.isnan(value)):
        return None, None
    if isinstance(value, str):
        problem = _store.text_problem(value, name, limit_after_strip=True)
        if problem:
            return None, problem
        try:
            value = json.loads(value)
        except ValueError:
            return None, f"{name} is {_shown(value)}; write a JSON array of numbers, one per layer"
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list | tuple) or not value or len(value) > MAX_LAYERS:
        return None, f"{name} is {_shown(value)}; write a JSON array of 1 to {MAX_LAYERS} numbers, one per layer"
    numbers = []
    for position, item in enumerate(value):
        number, problem = _number(item, f"{name}[{position}]", required=True)
        if problem:
            return None, problem
        numbers.append(number)
    text = json.dumps(numbers, separators=(",", ":"))
    problem = _store.text_problem(text, name)  # written back compactly, it must still fit the column
    return (None, problem) if problem else (text, None)


def _time(value: Any, name: str):
    if _blank(value):
        return None, f"{name} is missing"
    if isinstance(value, dict | list):
        return None, f"{name} is {_shown(value)}, not a time"
    try:
        return parse_time(value), None
    except (TypeError, ValueError, OverflowError):
        return None, f"{name} is {_shown(value)}; write an ISO 8601 time such as 2026-05-01T12:00:00Z"


# ---------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------


class _Unreadable(Exception):
    """The file cannot be read as a table at all; the message says why."""


def _table_frames(data: bytes, name: str) -> Iterator[pd.DataFrame]:
    """A CSV or Parquet file as DataFrames of at most CHUNK_ROWS rows of strings-or-native values.

    The first frame always carries the columns (empty for a header-only file).
    Raises _Unreadable, also midway, for a file that is not a table of this size.
    """
    if Path(name).suffix.lower() in (".parquet", ".pq"):
        yield from _parquet_frames(data, name)
        return
    first_line = data[: MAX_HEADER_BYTES + 1].split(b"\n", 1)[0]
    if len(first_line) > MAX_HEADER_BYTES:
        raise _Unreadable(f"{name}: the first line is over {MAX_HEADER_BYTES // 1024} KiB long, so it is not a "
                          f"header of this schema (docs/submissions-schema.md)")
    try:
        yield from pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False, skipinitialspace=True,
                               chunksize=CHUNK_ROWS)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise _Unreadable(f"{name}: not a readable CSV file ({_cut(str(exc).strip())})") from None


def _parquet_frames(data: bytes, name: str) -> Iterator[pd.DataFrame]:
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(io.BytesIO(data))
        meta = parquet.metadata
        expanded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if meta.num_rows > MAX_TABLE_ROWS:
            raise _Unreadable(f"{name}: {meta.num_rows:,} rows; an import takes at most {MAX_TABLE_ROWS:,} per "
                              "file, so split it")
        if expanded > max_parquet_expanded_bytes():
            raise _Unreadable(f"{name}: expands to {expanded / 2**20:,.0f} MiB; at most "
                              f"{max_parquet_expanded_bytes() // 2**20} MiB per file, so split it")
        yield parquet.schema_arrow.empty_table().to_pandas().astype(object)
        for batch in parquet.iter_batches(batch_size=CHUNK_ROWS):
            yield batch.to_pandas().astype(object)
    except _Unreadable:
        raise
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise _Unreadable(f"{name}: not a readable Parquet file ({_cut(str(exc).strip())})") from None


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


def _row_label(name: str, position: int, is_csv: bool) -> str:
    # CSV: the header is line 1, so the first data row is line 2.
    return f"{name} line {position + 2}" if is_csv else f"{name} row {position + 1}"


def _column_problems(columns: Sequence[str], name: str, required: Sequence[str], known: Sequence[str]) -> list[str]:
    problems = []
    missing = [c for c in required if c not in columns]
    unknown = [_shown(c) if len(c) > 40 or not c.isprintable() else c for c in columns if c not in known][:20]
    n_unknown = sum(c not in known for c in columns)
    if missing:
        problems.append(f"{name}: missing column(s) {', '.join(missing)}")
    if unknown:
        more = f" and {n_unknown - len(unknown):,} more" if n_unknown > len(unknown) else ""
        problems.append(
            f"{name}: unknown column(s) {', '.join(unknown)}{more}; the schema's columns are {', '.join(known)} "
            "(docs/submissions-schema.md)"
        )
    return problems


class _RowProblems(list):
    """Every problem found in one row, so a bad row is reported whole, not first error only.

    ``kinds`` names the field of each problem, for the counts by field.
    """

    def __init__(self, row: dict) -> None:
        super().__init__()
        self.row = row
        self.kinds: list[str] = []

    def note(self, kind: str, problem: str) -> None:
        self.append(problem)
        self.kinds.append(kind)

    def take(self, parser, key, *args, **kwargs):
        """Parse ``row[key]``; note the problem, if any, and return the value (or None)."""
        value, problem = parser(self.row.get(key), key, *args, **kwargs)
        if problem:
            self.note(key, problem)
        return value


def parse_submission_row(row: dict) -> tuple[Submission | None, _RowProblems]:
    """One submission row: the record, or every problem with it."""
    problems = _RowProblems(row)
    take = problems.take

    sid = take(_text, "submission_id", required=True)
    team = take(_text, "team", required=True)
    round_tag = take(_text, "round", required=True)
    if round_tag is not None and round_tag not in ALL_ROUNDS:
        problems.note("round", f"round is {_shown(round_tag)}; known rounds: {', '.join(ALL_ROUNDS)}")
    submitted_at = take(_time, "submitted_at")
    status = take(_text, "status", required=True)
    if status is not None:
        status = sys.intern(status.lower())
        if status not in _store.STATUSES:
            problems.note("status", f"status is {_shown(status)}; write one of {', '.join(_store.STATUSES)}")
    source = take(_text, "source", required=False)
    graded = status == "graded" and source != _store.FINAL_SOURCE  # a final's own row has no public numbers
    values = {
        "mean_flops_used": take(_number, "mean_flops_used", required=graded),
        "final_layer_mse": take(_number, "final_layer_mse", required=graded),
        "adjusted_score": take(_number, "adjusted_score", required=graded),
        "mean_multiplier": take(_number, "mean_multiplier", required=graded, minimum=0.1 - 1e-12),
        "n_failed_mlps": take(_integer, "n_failed_mlps", required=graded),
        "n_mlps": take(_integer, "n_mlps", required=False, minimum=1),
        "mean_effective_compute": take(_number, "mean_effective_compute", required=False),
        "mean_avg_variance": take(_number, "mean_avg_variance", required=False, strict=True),
        "whestbench_version": take(_version, "whestbench_version"),
        "flopscope_version": take(_text, "flopscope_version", required=False),
        "dataset": take(_text, "dataset", required=False),
        "estimator": take(_text, "estimator", required=False),
        "source": source,
        "nominated": take(_boolean, "nominated"),
        "seed_protocol": take(_text, "seed_protocol", required=False),
        "run_id": take(_text, "run_id", required=False),
        "rescore_of": take(_text, "rescore_of", required=False),
        "graded_at": take(_optional_time, "graded_at"),
    }
    n_failed, n_mlps = values["n_failed_mlps"], values["n_mlps"]
    if n_failed is not None and n_mlps is not None and n_failed > n_mlps:
        problems.note("n_failed_mlps", f"n_failed_mlps ({n_failed}) exceeds n_mlps ({n_mlps})")
    if problems:
        return None, problems
    return (
        Submission(submission_id=sid, team=team, round=round_tag, submitted_at=submitted_at, status=status, **values),
        problems,
    )


def parse_mlp_row(row: dict) -> tuple[MLPResult | None, _RowProblems]:
    """One per-MLP row: the record, or every problem with it."""
    problems = _RowProblems(row)
    take = problems.take

    result = dict(
        submission_id=take(_text, "submission_id", required=True),
        mlp_index=take(_integer, "mlp_index", required=True),
        mlp_name=take(_text, "mlp_name", required=False),
        final_layer_mse=take(_number, "final_layer_mse", required=True),
        adjusted_score=take(_number, "adjusted_score", required=True),
        flops_used=take(_number, "flops_used", required=False),
        effective_compute=take(_number, "effective_compute", required=False),
        multiplier=take(_number, "multiplier", required=False, minimum=0.1 - 1e-12),
        avg_variance=take(_number, "avg_variance", required=False, strict=True),
        failed=take(_boolean, "failed"),
        split=take(_split, "split"),
        failure=take(_failure, "failure"),
        meter_tampering=take(_text, "meter_tampering", required=False),
        all_layers_mse=take(_number, "all_layers_mse", required=False),
        per_layer_mse=take(_layers, "per_layer_mse"),
        error_code=take(_text, "error_code", required=False),
        **{name: take(_number, name, required=False) for name in TIMING_FIELDS},
    )
    if result["failure"] is not None and result["failed"] is False:
        problems.note("failure", f"failure is {result['failure']!r} but failed is false; mark the MLP failed "
                                 "or leave failure empty")
    if problems:
        return None, problems
    return MLPResult(**result), problems


# ---------------------------------------------------------------------------
# a chunk's columns at once
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    """How a whole column of one field is checked: ``parse(value, name)`` is the row parser's for the field.

    ``parse`` gives a blank its default without a problem; ``required`` (True, False, or
    "graded": required of a graded submission) flags a blank where the row parser would refuse it.
    ``number`` (minimum, strict, whole): the column may be read as floats at once.
    """

    name: str
    parse: Callable[[Any, str], tuple[Any, str | None]]
    required: bool | str = False
    number: tuple[float, bool, bool] | None = None


def _known_round(value: Any, name: str):
    tag, problem = _text(value, name, required=False)
    return (None, "not a known round") if tag is not None and tag not in ALL_ROUNDS else (tag, problem)


def _known_status(value: Any, name: str):
    status, problem = _text(value, name, required=False)
    if status is None:
        return None, problem
    status = sys.intern(status.lower())
    return (status, None) if status in _store.STATUSES else (None, "not a known status")


def _number_check(name: str, required: bool | str = False, *, minimum: float = 0.0, strict: bool = False,
                  whole: bool = False) -> _Check:
    parse = (partial(_integer, required=False, minimum=minimum) if whole
             else partial(_number, required=False, minimum=minimum, strict=strict))
    return _Check(name, parse, required, (minimum, strict, whole))


_OPTIONAL_TEXT = partial(_text, required=False)
_MULTIPLIER_MINIMUM = 0.1 - 1e-12

#: ``parse_submission_row``, a column at a time (every field, in the record's order).
_SUBMISSION_CHECKS = (
    _Check("submission_id", _OPTIONAL_TEXT, True),
    _Check("team", _OPTIONAL_TEXT, True),
    _Check("round", _known_round, True),
    _Check("submitted_at", _time, True),
    _Check("status", _known_status, True),
    _Check("whestbench_version", _version),
    _number_check("mean_flops_used", "graded"),
    _number_check("final_layer_mse", "graded"),
    _number_check("adjusted_score", "graded"),
    _number_check("mean_multiplier", "graded", minimum=_MULTIPLIER_MINIMUM),
    _number_check("n_failed_mlps", "graded", whole=True),
    _Check("flopscope_version", _OPTIONAL_TEXT),
    _number_check("n_mlps", minimum=1, whole=True),
    _number_check("mean_effective_compute"),
    _Check("dataset", _OPTIONAL_TEXT),
    _number_check("mean_avg_variance", strict=True),
    _Check("estimator", _OPTIONAL_TEXT),
    _Check("source", _OPTIONAL_TEXT),
    _Check("nominated", _boolean),
    _Check("seed_protocol", _OPTIONAL_TEXT),
    _Check("run_id", _OPTIONAL_TEXT),
    _Check("rescore_of", _OPTIONAL_TEXT),
    _Check("graded_at", _optional_time),
)

#: ``parse_mlp_row``, a column at a time.
_MLP_CHECKS = (
    _Check("submission_id", _OPTIONAL_TEXT, True),
    _number_check("mlp_index", True, whole=True),
    _number_check("final_layer_mse", True),
    _number_check("adjusted_score", True),
    _Check("failed", _boolean),
    _Check("mlp_name", _OPTIONAL_TEXT),
    _number_check("flops_used"),
    _number_check("effective_compute"),
    _number_check("multiplier", minimum=_MULTIPLIER_MINIMUM),
    _number_check("avg_variance", strict=True),
    _Check("split", _split),
    _Check("failure", _failure),
    _Check("meter_tampering", _OPTIONAL_TEXT),
    _number_check("all_layers_mse"),
    _Check("per_layer_mse", _layers),
    _Check("error_code", _OPTIONAL_TEXT),
    *(_number_check(name) for name in TIMING_FIELDS),
)


def _check_columns(checks: Sequence[_Check], across: Callable[[dict[str, list]], np.ndarray],
                   raw: dict[str, list], n: int) -> tuple[dict[str, list], np.ndarray]:
    """Every field's values for ``n`` rows, and which rows the row parser must see (its problems decide).

    A row not flagged gets exactly the values ``parse_submission_row``/``parse_mlp_row`` would give
    it and no problem; a flagged one may still be clean (the row parser says). Each distinct value of
    a column is parsed once (a team, a round, a time repeat from row to row), and a column of numbers
    is read as floats in one pass; ``across`` flags the rows whose fields disagree with each other.
    """
    values: dict[str, list] = {}
    flagged = np.zeros(n, dtype=bool)
    blank: dict[str, np.ndarray] = {}
    for check in checks:
        column = raw.get(check.name)
        if column is None:
            value, problem = check.parse(None, check.name)
            column_values, bad = [value] * n, np.full(n, problem is not None)
        else:
            column_values, bad = _check_column(check, column)
        values[check.name] = column_values
        flagged |= bad
        if check.required:
            blank[check.name] = _nones(column_values)
    graded = _objects(values["status"]) == "graded" if "status" in values else np.zeros(n, dtype=bool)
    if "source" in values:  # a final's own row (``FINAL_SOURCE``) is graded but has no public numbers
        graded &= _objects(values["source"]) != _store.FINAL_SOURCE
    for check in checks:
        if check.required is True:
            flagged |= blank[check.name]
        elif check.required == "graded":
            flagged |= blank[check.name] & graded
    flagged |= across(values)
    return values, flagged


def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _nones(values: list) -> np.ndarray:
    """Which values are None (a blank the field's parser gave no default)."""
    return np.equal(_objects(values), None)


def _submission_across(values: dict[str, list]) -> np.ndarray:
    """Rows whose n_failed_mlps exceeds their n_mlps."""
    failed, n_mlps = values["n_failed_mlps"], values["n_mlps"]
    both = ~(_nones(failed) | _nones(n_mlps))
    over = np.zeros(len(failed), dtype=bool)
    over[both] = _objects(failed)[both] > _objects(n_mlps)[both]
    return over


def _mlp_across(values: dict[str, list]) -> np.ndarray:
    """Rows that name a failure but are not marked failed."""
    return ~_nones(values["failure"]) & np.array([failed is False for failed in values["failed"]], dtype=bool)


def _check_column(check: _Check, column: list) -> tuple[list, np.ndarray]:
    """One field's values and the rows whose value has a problem (``_check_columns``)."""
    kinds = set(map(type, column))
    if check.number and kinds <= {str, float, int}:
        numbers = _number_column(check.number, column)
        if numbers is not None:
            return numbers
    if kinds == {str} and check.parse is _OPTIONAL_TEXT and check.name not in _REPEATING_TEXT:
        return _plain_text_column(check, column)
    if kinds == {str} and check.parse is _time:
        return _time_column(check, column)
    if len(kinds - {type(None)}) == 1:
        try:
            codes, distinct = pd.factorize(pd.Series(column, dtype=object))
        except TypeError:  # an unhashable value (a list or dict in a Parquet cell)
            pass
        else:
            return _distinct_parsed(check, column, codes, distinct)
    # mixed types (1, 1.0 and True would count as one distinct value) or unhashable: value by value
    pairs = [check.parse(v, check.name) for v in column]
    return [v for v, _ in pairs], np.fromiter((p is not None for _, p in pairs), dtype=bool, count=len(pairs))


def _plain_text_column(check: _Check, column: list[str]) -> tuple[list, np.ndarray]:
    """A text column of one value per row (an id): printable ASCII without spaces at its ends, within the
    field's length, is stored as it is; any other value is parsed (``_text``)."""
    limit = _store.SUBMISSION_TEXT_LIMITS.get(check.name) or _store.MLP_TEXT_LIMITS.get(check.name) or 0
    plain = [v.isascii() and v.isprintable() and 0 < len(v) <= limit and v[0] != " " and v[-1] != " "
             for v in column]
    if all(plain):
        return column, np.zeros(len(column), dtype=bool)
    pairs = [(v, None) if ok else check.parse(v, check.name) for v, ok in zip(column, plain, strict=True)]
    return [v for v, _ in pairs], np.fromiter((p is not None for _, p in pairs), dtype=bool, count=len(pairs))


def _time_column(check: _Check, column: list[str]) -> tuple[list, np.ndarray]:
    """A column of ISO times, each distinct text parsed once (``parse_time``); a text that is none is flagged."""
    codes, distinct = pd.factorize(pd.Series(column, dtype=object))
    moments, bad = [], []
    for text in distinct:
        try:
            moments.append(_text_time(text))
            bad.append(False)
        except (ValueError, OverflowError):
            moments.append(None)
            bad.append(True)
    return [moments[c] for c in codes.tolist()], np.array(bad, dtype=bool)[codes]


def _distinct_parsed(check: _Check, column: list, codes: np.ndarray, distinct) -> tuple[list, np.ndarray]:
    pairs = [check.parse(v, check.name) for v in distinct]
    parsed = [v for v, _ in pairs]
    bad = np.fromiter((p is not None for _, p in pairs), dtype=bool, count=len(pairs))
    code_list = codes.tolist()
    missing = codes < 0  # None, NaN, NaT, pd.NA: each parsed as it is (they are not all alike to a parser)
    out = [parsed[c] for c in code_list] if not missing.any() else [
        parsed[c] if c >= 0 else check.parse(column[i], check.name)[0] for i, c in enumerate(code_list)]
    flags = bad[codes] if len(bad) else np.zeros(len(codes), dtype=bool)
    if missing.any():
        flags = flags.copy()
        for i in np.flatnonzero(missing).tolist():
            flags[i] = check.parse(column[i], check.name)[1] is not None
    return out, flags


def _number_column(number: tuple[float, bool, bool], column: list) -> tuple[list, np.ndarray] | None:
    """A column of text or numbers read as floats at once (Python's ``float`` of each value), or None.

    None when some value is no number at all (a blank, a word): the column is then parsed value by value.
    """
    minimum, strict, whole = number
    try:
        floats = np.array(column, dtype=object).astype(np.float64)
    except (TypeError, ValueError, OverflowError):
        return None
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(floats) | (floats < minimum)
        if strict:
            bad |= floats == minimum
        if whole:
            bad |= floats != np.trunc(floats)
    if whole:
        return [int(x) for x in np.where(bad, 0.0, floats).tolist()], bad
    return floats.tolist(), bad


def _add_table(batch: Batch, upload: Upload) -> None:
    """Check a table's columns, then its rows chunk by chunk."""
    name = upload.name
    frames = _table_frames(upload.data, name)
    try:
        head = next(frames)
    except _Unreadable as exc:
        batch.refuse(str(exc))
        return
    columns = [str(c).strip() for c in head.columns]
    per_mlp = "mlp_index" in columns
    required, known = (
        (REQUIRED_MLP_COLUMNS, MLP_RESULT_FIELDS) if per_mlp else (REQUIRED_SUBMISSION_COLUMNS, SUBMISSION_FIELDS)
    )
    column_problems = _column_problems(columns, name, required, known)
    for problem in column_problems:
        batch.refuse(problem, "columns")
    if column_problems:
        return
    try:
        checked = _add_rows(batch, _chain(head, frames), name, per_mlp, columns)
    except _Unreadable as exc:
        batch.refuse(str(exc))
        return
    if checked == 0:
        batch.refuse(f"{name}: no rows")


def _add_rows(batch: Batch, frames: Iterator[pd.DataFrame], name: str, per_mlp: bool, columns: list[str]) -> int:
    """Check every row, a chunk at a time; stop once the import is refused beyond doubt. Rows checked.

    Each chunk is checked column by column (``_check_columns``); only the rows that check flags
    go through the row parser (``parse_submission_row``/``parse_mlp_row``), which gives every
    message, so a refused file reads as it would row by row, and a clean row's record holds the
    values that parser would give it.
    """
    is_csv = Path(name).suffix.lower() == ".csv"
    parse = parse_mlp_row if per_mlp else parse_submission_row
    checks, across, record = ((_MLP_CHECKS, _mlp_across, MLPResult) if per_mlp
                              else (_SUBMISSION_CHECKS, _submission_across, Submission))
    # A CSV export quotes cells that a spreadsheet would run (escape_formula); Parquet holds plain values.
    text_fields = [c for c in (MLP_TEXT_LIMITS if per_mlp else SUBMISSION_TEXT_LIMITS) if c in columns and is_csv]
    position = 0
    for frame in frames:
        over = len(frame) > MAX_TABLE_ROWS - position
        if over:
            frame = frame.iloc[: MAX_TABLE_ROWS - position]
        raw = _columns(frame, text_fields)
        values, flagged = _check_columns(checks, across, raw, len(frame))
        parsed: dict[int, Submission | MLPResult] = {}
        for i in np.flatnonzero(flagged).tolist():
            label = _row_label(name, position + i, is_csv)
            row = {key: column[i] for key, column in raw.items()}
            found = _add_row(batch, parse, row, label)
            if found is not None:
                parsed[i] = found
            if batch.problems.full:
                batch.problems.stopped_at = label
                return position + i + 1
        if not batch.problems:
            _keep_chunk(batch, record, values, flagged, parsed, name, position, is_csv)
        position += len(frame)
        if over:
            batch.refuse(f"{name}: more than {MAX_TABLE_ROWS:,} rows; an import takes at most that many "
                         "per file, so split it")
            return position + 1
    return position


def _columns(frame: pd.DataFrame, text_fields: Sequence[str]) -> dict[str, list]:
    """The chunk's columns as lists keyed by the stripped column names (a repeated name: the last wins).

    A column's ``tolist`` converts it at once (the same Python values as a row's dict would hold);
    the CSV text fields lose the quote ``escape_formula`` added.
    """
    raw: dict[str, list] = {}
    for i, c in enumerate(frame.columns):
        key, series = str(c).strip(), frame.iloc[:, i]
        values = series.tolist()
        if key in text_fields and series.astype(str).str.startswith(ESCAPE_QUOTE).any():
            values = [unescape_formula(v) for v in values]
        raw[key] = values
    return raw


def _keep_chunk(batch: Batch, record, values: dict[str, list], flagged: np.ndarray,
                parsed: dict[int, Submission | MLPResult], name: str, position: int, is_csv: bool) -> None:
    """Keep the chunk's records in row order: the clean rows' built from their columns, the flagged ones parsed."""
    flags = flagged.tolist()
    names = [f.name for f in fields(record)]
    built = iter([record(*row) for row in compress(zip(*(values[n] for n in names), strict=True),
                                                   [not flag for flag in flags])])
    if parsed or flagged.any():  # some rows were parsed one by one: each record takes its row's place
        kept = [(i, parsed[i] if flag else next(built)) for i, flag in enumerate(flags) if not flag or i in parsed]
        positions, records = [i for i, _ in kept], [r for _, r in kept]
    else:
        positions, records = range(len(flags)), list(built)
    if record is MLPResult:
        batch.mlp_results.extend(records)
        return
    batch.submissions.extend(records)
    origin = batch.origin
    for i, sub in zip(positions, records, strict=True):
        origin.setdefault(sub.submission_id, _row_label(name, position + i, is_csv))


def _chain(head: pd.DataFrame, rest: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    yield head
    yield from rest


def _add_row(batch: Batch, parse, row: dict, label: str) -> Submission | MLPResult | None:
    """Parse one row: its record, or None when its problems refuse the batch."""
    record, problems = parse(row)
    if not problems:
        return record
    sid = row.get("submission_id")
    where = f"{label} (submission_id {_shown(str(sid).strip())})" if not _blank(sid) else label
    for kind, problem in zip(problems.kinds, problems, strict=True):
        batch.refuse(f"{where}: {problem}", kind)
    return None


# ---------------------------------------------------------------------------
# whest run --json reports
# ---------------------------------------------------------------------------


def report_submission_id(report: dict) -> str:
    """A stable id for a report without one: the same report always maps to the same id."""
    results = report.get("results") or {}
    digest = hashlib.sha256(json.dumps(results, sort_keys=True, default=str).encode()).hexdigest()
    return f"run-{digest[:16]}"


def _check_rules(config: dict, per_mlp: list[dict], rnd) -> list[str]:
    """A report is only a score of this round if it ran under the round's rulebook."""
    problems = []
    budget = config.get("flop_budget")
    if _float_or_none(budget) != rnd.budget:
        problems.append(
            f"it was scored with flop_budget {_shown(budget) if isinstance(budget, str) else budget}, but round "
            f"{rnd.tag} has B = {rnd.budget}; re-run with that round's settings (see `whest run --help`)"
        )
    lam = _float_or_none(config.get("lambda_flops_per_second") or 0.0)
    if lam != rnd.lambda_flops_per_second:
        shown = f"{lam:g}" if lam is not None else _shown(config.get("lambda_flops_per_second"))
        problems.append(
            f"it priced residual time at lambda = {shown}, but round {rnd.tag} uses {rnd.lambda_flops_per_second:g}"
        )
    caps = (
        ("wall_time_limit_s", rnd.wall_time_limit_s, "wall_time_s"),
        ("residual_wall_time_limit_s", rnd.residual_wall_time_limit_s, "residual_wall_time_s"),
    )
    for key, round_cap, measured in caps:
        if round_cap is None:
            continue
        cap = _float_or_none(config.get(key))
        if cap is not None and cap <= round_cap:
            continue
        over = [e.get("mlp_index") for e in per_mlp if (_float_or_none(e.get(measured) or 0.0) or 0.0) > round_cap]
        if over:
            problems.append(
                f"it ran with {key} = {_shown(config.get(key))} and MLP(s) [{', '.join(map(_shown, over[:20]))}"
                f"{', ...' if len(over) > 20 else ''}] took longer than round {rnd.tag}'s cap of "
                f"{round_cap:g} s, so they would have failed under the round's rules"
            )
    return problems


def _float_or_none(value: Any) -> float | None:
    """A finite number from a report's field, else None (a report is JSON: anything can be anywhere)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _report_parts(report: Any, name: str) -> tuple[dict, dict, list[dict], list[str]]:
    """``results``, ``run_config`` and the per-MLP entries, or the problems that say it is not a report."""
    if not isinstance(report, dict) or "results" not in report:
        if isinstance(report, dict) and report.get("ok") is False:
            err = report.get("error") if isinstance(report.get("error"), dict) else {}
            return {}, {}, [], [f"{name}: the report records a failed run "
                                f"({_cut(str(err.get('code')), 80)}: {_cut(str(err.get('message')))})"]
        return {}, {}, [], [f"{name}: not a `whest run --json` report (no 'results')"]
    results, config = report.get("results") or {}, report.get("run_config") or {}
    if not isinstance(results, dict) or not isinstance(config, dict):
        return {}, {}, [], [f"{name}: not a `whest run --json` report ('results' and 'run_config' must be objects)"]
    entries = results.get("per_mlp") or []
    per_mlp = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    return results, config, per_mlp, []


def _report_round(config: dict, name: str, round_tag: str | None) -> tuple[Any, list[str]]:
    width, width_problem = _integer(config.get("width"), "run_config.width", required=True)
    depth, depth_problem = _integer(config.get("depth"), "run_config.depth", required=True)
    problems = [f"{name}: {p}" for p in (width_problem, depth_problem) if p]
    rnd = round_for_shape(width, depth) if not problems else None
    shape = f"{_shown(config.get('width'))} x {_shown(config.get('depth'))}"
    if round_tag:
        if round_tag not in ALL_ROUNDS:
            return None, [*problems, f"{name}: round is {_shown(round_tag)}; known rounds: {', '.join(ALL_ROUNDS)}"]
        wanted = get_round(round_tag)
        if rnd is None or rnd.tag != wanted.tag:
            problems.append(f"{name}: the report's MLPs are {shape}, not round {wanted.tag}'s {wanted.shape_label}")
        rnd = wanted
    if rnd is None and not problems:
        problems.append(f"{name}: no round has MLPs of {shape}")
    return rnd, problems


def parse_run_report(
    report: Any,
    name: str,
    *,
    team: str | None,
    submission_id: str | None = None,
    round_tag: str | None = None,
    flopscope_version: str | None = None,
    split: str | None = None,
) -> tuple[Submission | None, list[MLPResult], list[str]]:
    """A ``whest run --json`` report as one submission with its per-MLP results.

    Its values pass through the same row parsers as a CSV's (``parse_submission_row``,
    ``parse_mlp_row``), so a report can store nothing a table could not. At most
    MAX_COUNTED_PROBLEMS problems are returned. A report of the private or rerun
    ``split`` adds per-MLP results to the submission ``submission_id`` names (in the
    same import or stored) and no submission row: a submission's own numbers are
    its public board's, so a withheld suite can never show through them.
    """
    results, config, per_mlp, problems = _report_parts(report, name)
    if problems:
        return None, [], problems
    split = split or _store.PUBLIC
    if split != _store.PUBLIC:
        if _blank(submission_id):
            problems.append(f"{name}: a {split} report adds results to a submission: pass --id with the "
                            "submission_id of its public results (page: the submission id field)")
    elif _blank(team):
        problems.append(f"{name}: a whest run report does not name its team; pass --team NAME (or fill Team on the page)")
    for value, key in ((team, "team"), (submission_id, "submission_id")):
        problem = None if _blank(value) else _text(value, key, required=False)[1]
        if problem:
            problems.append(f"{name}: {problem}")
    if not per_mlp:
        problems.append(f"{name}: the report has no per-MLP results")
    rnd, round_problems = _report_round(config, name, round_tag)
    problems += round_problems
    if rnd is not None:
        problems += [f"{name}: {p}" for p in _check_rules(config, per_mlp, rnd)]
    if problems:
        return None, [], problems
    from whestbench.budget import score_multiplier

    sid = submission_id or report_submission_id(report)
    run_meta = report.get("run_meta") if isinstance(report.get("run_meta"), dict) else {}
    finished = run_meta.get("run_finished_at_utc")
    if _time(finished, "run_meta.run_finished_at_utc")[1]:
        return None, [], [f"{name}: run_meta.run_finished_at_utc is {_shown(finished)}, not a time"]
    mlps = []
    for position, e in enumerate(per_mlp):
        failed = is_failed(e)
        mlp, mlp_problems = parse_mlp_row({
            "submission_id": sid, "mlp_index": e.get("mlp_index"), "mlp_name": e.get("mlp_name"),
            "final_layer_mse": e.get("final_layer_mse"), "adjusted_score": e.get("adjusted_final_layer_score"),
            "flops_used": e.get("flops_used") or 0, "effective_compute": e.get("effective_compute") or 0.0,
            "failed": failed, "split": split, "failure": judge(e)[0] if failed else None,
            "meter_tampering": e.get("meter_tampering"), **_measured(e),
        })
        problems += [f"{name} results.per_mlp[{position}]: {p}" for p in mlp_problems]
        if len(problems) >= MAX_COUNTED_PROBLEMS:
            return None, [], problems[:MAX_COUNTED_PROBLEMS]
        if mlp is not None:
            multiplier = float(score_multiplier(mlp.effective_compute, rnd.budget, failed=failed))
            mlps.append(replace(mlp, multiplier=multiplier))
    if problems:
        return None, [], problems
    if split != _store.PUBLIC:
        return None, mlps, []
    dataset = config.get("dataset") if isinstance(config.get("dataset"), dict) else {}
    reported_flopscope = report_flopscope_version(report, run_meta)
    if flopscope_version and reported_flopscope and flopscope_version.strip() != reported_flopscope:
        return None, [], [f"{name}: the report says flopscope {_shown(reported_flopscope)} priced it, not "
                          f"{_shown(flopscope_version)}; leave the flopscope version out"]
    # A Whestboard run report carries its dataset's seed protocol; `whest run --json` does not, so it stays
    # unknown, as a version no report states does.
    scored_on = report.get("dataset") if isinstance(report.get("dataset"), dict) else {}
    seed = config.get("seed")
    sub, sub_problems = parse_submission_row({
        "submission_id": sid, "team": team, "round": rnd.tag, "submitted_at": finished, "status": "graded",
        "whestbench_version": report.get("whestbench_version")
        or (report.get("versions") if isinstance(report.get("versions"), dict) else {}).get("whestbench_version"),
        "flopscope_version": reported_flopscope or flopscope_version,
        "seed_protocol": scored_on.get("seed_protocol"),
        "mean_flops_used": sum(m.flops_used for m in mlps) / len(mlps),
        "final_layer_mse": results.get("final_layer_mse"),
        "adjusted_score": results.get("adjusted_final_layer_score"),
        "mean_multiplier": results.get("mean_score_multiplier"),
        "n_failed_mlps": results.get("n_failed_mlps", sum(m.failed for m in mlps)),
        "n_mlps": len(mlps),
        "mean_effective_compute": results.get("mean_effective_compute", 0.0),
        "dataset": dataset.get("path") or (f"generated (seed {seed})" if seed is not None else None),
        "estimator": config.get("estimator_path"),
        "source": "whest-run",
    })
    if sub_problems:
        return None, [], [f"{name}: {p}" for p in sub_problems]
    return sub, mlps, []


def _measured(entry: dict) -> dict:
    """What an entry recorded beside its score, under the per-MLP schema's names: the error past the final
    layer, the error code, and the times the caps hold (read by ``telemetry_of``, in any vocabulary)."""
    telemetry = telemetry_of(entry)
    flat = flat_entry(entry)
    return {"all_layers_mse": flat.get("all_layers_mse"), "per_layer_mse": flat.get("per_layer_mse"),
            "error_code": flat.get("error_code"), **{name: getattr(telemetry, name) for name in TIMING_FIELDS}}


def report_flopscope_version(report: dict, run_meta: dict) -> str | None:
    """The flopscope a run report says priced it: a Whestboard report's ``versions``, or the host record
    ``whest run --json`` (whestbench 0.16) writes in ``run_meta.host``; None when it says none."""
    versions = report.get("versions") if isinstance(report.get("versions"), dict) else {}
    host = run_meta.get("host") if isinstance(run_meta.get("host"), dict) else {}
    for value in (versions.get("flopscope_version"), host.get("flopscope_version")):
        if isinstance(value, str) and value.strip() and value.strip() != _store.UNKNOWN:
            return value.strip()
    return None


# ---------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------


def build_batch(
    uploads: Sequence[Upload],
    *,
    team: str | None = None,
    submission_id: str | None = None,
    round_tag: str | None = None,
    flopscope_version: str | None = None,
    split: str | None = None,
) -> Batch:
    """Parse and cross-check every file; ``batch.problems`` holds everything wrong (bounded).

    ``split`` is the split of every ``whest run --json`` report of the import (default public).
    """
    batch = Batch(files=[u.name for u in uploads])
    if split is not None and split not in _store.SPLITS:
        batch.refuse(f"split is {_shown(split)}; write one of {', '.join(_store.SPLITS)}", "split")
        return batch
    reports = [u for u in uploads if Path(u.name).suffix.lower() == ".json"]
    if submission_id and len(reports) > 1:
        batch.refuse("--id names one submission but several run reports were given; import them one at a time")
    for upload in uploads:
        suffix = Path(upload.name).suffix.lower()
        if len(upload.data) > config.upload_max_bytes():
            batch.refuse(f"{upload.name}: {len(upload.data) / 2**20:,.1f} MiB; an import reads at most "
                         f"{config.upload_max_bytes() / 2**20:g} MiB per file, so split it")
        elif suffix == ".json":
            _add_report(batch, upload, team=team, submission_id=submission_id, round_tag=round_tag,
                        flopscope_version=flopscope_version, split=split)
        elif suffix in TABLE_SUFFIXES:
            _add_table(batch, upload)
        else:
            batch.refuse(f"{upload.name}: unsupported file type {_shown(suffix) if suffix else '(none)'}; "
                         "give .csv, .parquet or a `whest run --json` .json report")
        if batch.problems.full:  # the files after this one are not checked
            batch.problems.stopped_at = batch.problems.stopped_at or upload.name
            break
    if not batch.problems:  # a refused batch's verdict is known; its records were not kept
        _cross_check(batch)
    return batch


def load_report_json(data: bytes, name: str) -> tuple[Any, str | None]:
    """A report's JSON, or why not: bounded in size and nesting before anything walks it recursively."""
    if len(data) > MAX_REPORT_BYTES:
        return None, (f"{name}: {len(data) / 2**20:,.1f} MiB; a `whest run --json` report is at most "
                      f"{MAX_REPORT_BYTES // 2**20} MiB (about 10 KB per MLP)")
    try:
        report = strict_json(data.decode("utf-8"))  # a repeated key (a hidden second results) is refused
    except UnicodeDecodeError as exc:
        return None, f"{name}: not valid JSON (not UTF-8 text: {exc.reason} at byte {exc.start})"
    except RecursionError:
        return None, _too_deep(name)
    except ValueError as exc:  # JSONDecodeError, or an integer of more digits than Python converts
        return None, f"{name}: not valid JSON ({_cut(str(exc))})"
    if _nests_deeper_than(report, MAX_JSON_DEPTH):
        return None, _too_deep(name)
    return report, None


def _too_deep(name: str) -> str:
    return (f"{name}: not a `whest run --json` report: its JSON nests more than {MAX_JSON_DEPTH} levels deep "
            "(a report nests about 10)")


def _nests_deeper_than(value: Any, limit: int) -> bool:
    """Without recursion: whether any object or array lies more than ``limit`` levels deep."""
    stack = [(value, 1)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _add_report(batch: Batch, upload: Upload, **options) -> None:
    """A ``.json`` file: a grader record (bare, or as AIcrowd's API wraps it) or a ``whest run --json`` report."""
    report, problem = load_report_json(upload.data, upload.name)
    if problem:
        batch.refuse(problem, "run report")
        return
    record, wrapper = unwrap(report)
    if wrapper is not None or is_record(record):
        _add_record(batch, upload.name, record, wrapper, **options)
        return
    sub, mlps, problems = parse_run_report(report, upload.name, **options)
    for message in problems:
        batch.refuse(message, "run report")
    if sub is not None:
        batch.keep(sub, upload.name)
    for mlp in mlps:
        batch.keep(mlp, upload.name)


def _add_record(batch: Batch, name: str, record: Any, wrapper: dict | None, **options) -> None:
    """A grader record: its rows (``_records.read_record``) through the row parsers, as a table's would go."""
    if wrapper is not None and isinstance(record, str):  # AIcrowd's API may give the evaluation as JSON text
        record, problem = load_report_json(record.encode("utf-8"), f"{name} (data.submission.evaluation)")
        if problem:
            batch.refuse(problem, "grader record")
            return
    if wrapper is not None and record is None:
        batch.refuse(f"{name}: AIcrowd's answer carries no evaluation (the submission has not been graded yet)",
                     "grader record")
        return
    rows = read_record(record, wrapper, name, **options)
    for message in rows.problems:
        batch.refuse(message, "grader record")
    if rows.submission is None:
        return
    sub, sub_problems = parse_submission_row(rows.submission)
    for problem in sub_problems:
        batch.refuse(f"{name}: {problem}", "grader record")
    mlps = []
    for row in rows.mlps:
        mlp, mlp_problems = parse_mlp_row(row)
        for problem in mlp_problems:
            batch.refuse(f"{name} MLP {_shown(row.get('mlp_index'))}: {problem}", "grader record")
        mlps.append(mlp)
    if batch.problems or sub is None:
        return
    batch.keep(sub, name)
    for mlp in mlps:
        batch.keep(mlp, name)
    batch.rtol[sub.submission_id] = rows.rtol
    batch.notes.extend(rows.notes)


def _cross_check(batch: Batch) -> None:
    problems = batch.problems
    counts = Counter(sub.submission_id for sub in batch.submissions)
    for sid, n in counts.items():
        if n > 1:
            problems.add(f"submission_id {_shown(sid)} appears {n} times in this import; each submission needs "
                         "its own id", "duplicate id")
    subs = {s.submission_id: s for s in batch.submissions}
    grouped: dict[str, list[MLPResult]] = {}
    keys: set[tuple[str, str, int]] = set()
    for res in batch.mlp_results:
        key = (res.submission_id, res.split, res.mlp_index)
        if key in keys:
            where = "" if res.split == _store.PUBLIC else f" ({res.split} split)"
            problems.add(f"per-MLP results list MLP {res.mlp_index} of {_shown(res.submission_id)}{where} twice",
                         "duplicate MLP")
        keys.add(key)
        grouped.setdefault(res.submission_id, []).append(res)
    for sid, results in grouped.items():
        public = [r for r in results if r.split == _store.PUBLIC]
        if sid not in subs:
            if public:  # the submission's aggregates are checked against its public MLPs
                problems.add(f"per-MLP results name submission_id {_shown(sid)}, which is not in this import's "
                             "submissions file", "unknown submission_id")
            else:  # a private or rerun suite for a stored submission: commit checks it is stored
                batch.attached.add(sid)
            continue
        where = batch.origin.get(sid, sid)
        rtol = batch.rtol.get(sid) or _source_rtol(subs[sid], public)
        for p in aggregate_problems(subs[sid], public, rtol=rtol) if public else []:
            problems.add(f"{where} (submission_id {_shown(sid)}): {p}", "aggregates")
    if problems:
        batch.drop_records()


def _source_rtol(sub: Submission, results: Sequence[MLPResult]) -> float:
    """A grader record's submission is checked to its own rounding (also when it comes back from an export);
    every other one to AGGREGATE_RTOL."""
    if sub.source != _store.RECORD_SOURCE:
        return AGGREGATE_RTOL
    return rounding_rtol([v for r in results for v in (r.final_layer_mse, r.adjusted_score)])


def aggregate_problems(sub: Submission, results: Sequence[MLPResult], *, rtol: float = AGGREGATE_RTOL) -> list[str]:
    """The submission's aggregates must be what its per-MLP results average to (to ``rtol``, relative)."""
    problems = []
    n = len(results)
    if sub.n_mlps is not None and sub.n_mlps != n:
        problems.append(f"n_mlps is {sub.n_mlps} but the per-MLP file has {n} MLPs for it")
    failed = sum(r.failed for r in results)
    if sub.n_failed_mlps is not None and sub.n_failed_mlps != failed:
        problems.append(f"n_failed_mlps is {sub.n_failed_mlps} but {failed} of its per-MLP rows are failed")
    checks = [
        ("adjusted_score", sub.adjusted_score, [r.adjusted_score for r in results]),
        ("final_layer_mse", sub.final_layer_mse, [r.final_layer_mse for r in results]),
        ("mean_multiplier", sub.mean_multiplier, [r.multiplier for r in results]),
        ("mean_flops_used", sub.mean_flops_used, [r.flops_used for r in results]),
        ("mean_effective_compute", sub.mean_effective_compute, [r.effective_compute for r in results]),
    ]
    for name, value, per in checks:
        if value is None or any(v is None for v in per):
            continue
        mean = math.fsum(per) / n
        if not math.isclose(value, mean, rel_tol=rtol, abs_tol=1e-300):
            problems.append(f"{name} is {value:.6g} but its per-MLP values average to {mean:.6g}")
    return problems


def load_batch(paths: Iterable[Path], **options) -> Batch:
    """Read files from disk; a table's ``<stem>.per_mlp.<ext>`` sibling comes along if present.

    A folder stands for the files directly in it that an import reads (``.json``, ``.csv``, ``.parquet``):
    a folder of grader records imports in one go, all or nothing, as any batch does. A file over
    ``config.upload_max_bytes()`` (``WHESTBOARD_UPLOAD_MAX_MB``) is not read at all: it is refused by its size.
    """
    paths = [p for path in map(Path, paths) for p in _folder_files(path)]
    chosen: list[Path] = []
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        chosen.append(path)
        sibling = path.with_name(path.stem + PER_MLP_SUFFIX + path.suffix)
        if path.suffix.lower() in TABLE_SUFFIXES and sibling.is_file() and sibling not in chosen and sibling not in paths:
            chosen.append(sibling)
    unique = list(dict.fromkeys(p.resolve() for p in chosen))
    oversized = [p for p in unique if p.stat().st_size > config.upload_max_bytes()]
    if oversized:
        batch = Batch(files=[str(p) for p in unique])
        for p in oversized:
            batch.refuse(f"{p}: {p.stat().st_size / 2**20:,.1f} MiB; an import reads at most "
                         f"{config.upload_max_bytes() / 2**20:g} MiB per file, so split it")
        return batch
    return build_batch([Upload(str(p), p.read_bytes()) for p in unique], **options)


def _folder_files(path: Path) -> list[Path]:
    """``[path]`` for a file; the importable files directly in a folder, by name."""
    if not path.is_dir():
        return [path]
    found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in (".json", *TABLE_SUFFIXES))
    if not found:
        raise FileNotFoundError(f"{path}: a folder with no .json, .csv or .parquet file in it to import")
    return found


def commit_batch(batch: Batch, *, url: str | None = None) -> UpsertReport:
    """Write a clean batch (all or nothing); raise ImportRejected listing the problems otherwise."""
    if batch.problems:
        raise ImportRejected(batch.problems)
    if not batch.submissions and not batch.attached:
        raise ImportRejected(["no submissions found in " + (", ".join(batch.files) or "the input")])
    missing = sorted(batch.attached - _store.stored_ids(sorted(batch.attached), url=url))
    if missing:
        raise ImportRejected(ProblemLog(
            (f"per-MLP results of the private or rerun split name submission_id {_shown(sid)}, which is neither "
             "in this import nor stored; import its submission first" for sid in missing), "unknown submission_id"))
    report = _store.upsert(batch.submissions, batch.mlp_results, url=url)
    report.notes = list(batch.notes)
    if report.changed:
        _refresh_snapshots(url)
    return report


def _refresh_snapshots(url: str | None) -> None:
    """Snapshots after a committed import, so the first page view reads arrays, not the table.

    They are a cache: a failure here is logged and the first reader rebuilds them; the import, already
    committed, still reports its rows as written.
    """
    try:
        _store.refresh_snapshots(url=url)
    except Exception as exc:  # noqa: BLE001 - any failure of a cache write, after the rows are safe
        logs.error("leaderboard.snapshot_refresh_failed", exc)


def import_files(paths: Iterable[Path], *, url: str | None = None, **options) -> UpsertReport:
    return commit_batch(load_batch(paths, **options), url=url)


def import_uploads(uploads: Sequence[Upload], *, url: str | None = None, **options) -> UpsertReport:
    return commit_batch(build_batch(uploads, **options), url=url)


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


#: Rows per streamed piece of an export.
EXPORT_CHUNK_ROWS = 5_000


def iter_submissions_csv(*, with_final: bool = False, url: str | None = None) -> Iterator[str]:
    """Every submission in the import schema as CSV text, streamed: header first, then pieces of rows.

    Floats are written exactly and formula cells neutralised (``csv_text``); memory
    follows EXPORT_CHUNK_ROWS rows, not the store, so a public download of 10,000
    submissions with a million per-MLP rows costs a worker a few MB. The public download leaves out
    the rows a final wrote (``FINAL_SOURCE``: not submissions of the board); ``with_final`` keeps them,
    for the organizer's export, whose rerun results name them (an export then imports whole).
    """
    for number, df in enumerate(_store.iter_frames(EXPORT_CHUNK_ROWS, with_final=with_final, url=url)):
        for column in TIME_FIELDS:
            df[column] = df[column].map(iso_time).astype(object)
        yield csv_text(df, SUBMISSION_TEXT_LIMITS, header=number == 0)


def iter_mlp_results_csv(*, splits: Sequence[str] | None = None, url: str | None = None) -> Iterator[str]:
    """Every per-MLP result (of ``splits``; None: all) as CSV text, streamed like ``iter_submissions_csv``.

    The public download passes ``splits=("public",)``: withheld and rerun results leave the
    server only for the organizer.
    """
    for number, df in enumerate(_store.iter_mlp_frames(EXPORT_CHUNK_ROWS, splits=splits, url=url)):
        yield csv_text(df, MLP_TEXT_LIMITS, header=number == 0)


def submissions_csv(*, url: str | None = None) -> str:
    """Every submission in the import schema, as one CSV text."""
    return "".join(iter_submissions_csv(url=url))




def iso_time(moment) -> str | None:
    """A stored time as the export writes it; None (an empty cell) for a time not recorded."""
    if moment is None or pd.isna(moment):
        return None
    return pd.Timestamp(moment).tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def export_submissions(out: Path, *, url: str | None = None, per_mlp: bool = True) -> tuple[Path, Path | None]:
    """Write the submissions CSV and, when any exist, the per-MLP sibling ``<stem>.per_mlp.csv``: the whole
    store (every split, and the rows a final wrote), so importing both files into an empty store gives
    it back."""
    out = Path(out)
    if out.suffix.lower() != ".csv":
        raise ValueError(f"{out}: export writes CSV; give a path ending in .csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_pieces(out, iter_submissions_csv(with_final=True, url=url))
    sibling = out.with_name(out.stem + PER_MLP_SUFFIX + ".csv")
    if per_mlp and _store.ids_with_mlp_results(url=url):
        _write_pieces(sibling, iter_mlp_results_csv(url=url))
        return out, sibling
    return out, None


def _write_pieces(path: Path, pieces: Iterable[str]) -> None:
    with path.open("w", newline="") as fh:
        for piece in pieces:
            fh.write(piece)


# ---------------------------------------------------------------------------
# the shipped baseline sweep
# ---------------------------------------------------------------------------


def shipped_files() -> list[Path]:
    """The sweep output shipped under data/submissions/ (submission tables only)."""

    folder = data_dir() / "submissions"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.csv") if not p.stem.endswith(PER_MLP_SUFFIX))


def seed_from_shipped(*, url: str | None = None) -> UpsertReport | None:
    """Import the shipped baselines once per store, the first time it is opened.

    Only into an empty store, and only once: an organizer who deletes a baseline
    does not see it come back, and a store that already holds submissions is left
    alone (import the file by hand there). Safe if two workers race: the loser's
    upsert finds every row unchanged.
    """
    if _store.was_seeded(url=url):
        return None
    if _store.submission_count(url=url) > 0:
        _store.mark_seeded(url=url)
        return None
    files = shipped_files()
    report = import_files(files, url=url) if files else None  # a racing worker's rows come back unchanged
    _store.mark_seeded(url=url)
    return report


