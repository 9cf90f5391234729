"""Import graded submissions (CSV, Parquet, ``whest run --json``) and export them back.

The schema is documented in docs/submissions-schema.md. Every problem found is
reported with the file and line it comes from, and nothing is written unless
the whole batch is valid: an organizer fixes the file and imports it again,
never half a leaderboard. Re-importing a submission id updates that
submission (its per-MLP rows replaced when the batch carries them).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from whestboard import submissions as store
from whestboard.rounds import ALL_ROUNDS, get_round, round_for_shape
from whestboard.submissions import MLP_RESULT_FIELDS, SUBMISSION_FIELDS, MLPResult, Submission, UpsertReport

REQUIRED_SUBMISSION_COLUMNS = ("submission_id", "team", "round", "submitted_at", "status", "whestbench_version")
GRADED_REQUIRED = ("mean_flops_used", "final_layer_mse", "adjusted_score", "mean_multiplier", "n_failed_mlps")
REQUIRED_MLP_COLUMNS = ("submission_id", "mlp_index", "final_layer_mse", "adjusted_score")
PER_MLP_SUFFIX = ".per_mlp"
MAX_ID_LENGTH = 200
#: Aggregates must equal the mean of their per-MLP values to this relative tolerance.
AGGREGATE_RTOL = 1e-6
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
#: Failure flags of a per-MLP entry in a ``whest run`` report (whestbench.scoring's own list).
FAILURE_FLAGS = ("budget_exhausted", "time_exhausted", "residual_wall_time_exhausted", "combined_budget_exhausted")


class ImportRejected(ValueError):
    """The batch had problems; nothing was imported. ``problems`` lists each one."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        head = f"{len(self.problems)} problem(s) found; nothing was imported"
        super().__init__(head + ":\n  " + "\n  ".join(self.problems))


@dataclass
class Batch:
    """Validated submissions and per-MLP results, ready to write in one transaction."""

    submissions: list[Submission] = field(default_factory=list)
    mlp_results: list[MLPResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # where each submission came from, for cross-check messages
    origin: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Upload:
    """A file's name and bytes, as the page and the HTTP API receive it."""

    name: str
    data: bytes


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


def _text(value: Any, name: str, *, required: bool, max_len: int = MAX_ID_LENGTH):
    if _blank(value):
        return None, (f"{name} is missing" if required else None)
    text = str(value).strip()
    if len(text) > max_len:
        return None, f"{name} is {len(text)} characters long; at most {max_len} are allowed"
    return text, None


def _number(value: Any, name: str, *, required: bool, minimum: float = 0.0, strict: bool = False):
    if _blank(value):
        return None, (f"{name} is missing" if required else None)
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None, f"{name} is {value!r}, not a number"
    if not math.isfinite(number):
        return None, f"{name} is {value!r}; it must be a finite number"
    if number < minimum or (strict and number == minimum):
        relation = "above" if strict else "at least"
        return None, f"{name} is {number:g}; it must be {relation} {minimum:g}"
    return number, None


def _integer(value: Any, name: str, *, required: bool, minimum: int = 0):
    number, problem = _number(value, name, required=required, minimum=minimum)
    if problem or number is None:
        return None, problem
    if number != int(number):
        return None, f"{name} is {value!r}, not a whole number"
    return int(number), None


_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}


def _boolean(value: Any, name: str):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False, None
    if isinstance(value, bool):
        return value, None
    text = str(value).strip().lower()
    if text in _TRUE:
        return True, None
    if text in _FALSE:
        return False, None
    return None, f"{name} is {value!r}; write true or false"


def parse_time(value: Any) -> datetime:
    """ISO 8601 (or a datetime); a time without zone is taken as UTC. Raises ValueError."""
    if isinstance(value, pd.Timestamp):
        value = value.to_pydatetime()
    if isinstance(value, datetime):
        moment = value
    else:
        text = str(value).strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _time(value: Any, name: str):
    if _blank(value):
        return None, f"{name} is missing"
    try:
        return parse_time(value), None
    except (TypeError, ValueError):
        return None, f"{name} is {value!r}; write an ISO 8601 time such as 2026-05-01T12:00:00Z"


# ---------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------


def read_table(data: bytes | Path, name: str) -> pd.DataFrame:
    """A CSV or Parquet file as strings-or-native values, with no NaN guessing."""
    suffix = Path(name).suffix.lower()
    raw = data.read_bytes() if isinstance(data, Path) else data
    if suffix in (".parquet", ".pq"):
        try:
            return pd.read_parquet(io.BytesIO(raw)).astype(object)
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise ImportRejected([f"{name}: not a readable Parquet file ({exc})"]) from None
    try:
        return pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, skipinitialspace=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ImportRejected([f"{name}: not a readable CSV file ({exc})"]) from None


def _row_label(name: str, position: int, is_csv: bool) -> str:
    # CSV: the header is line 1, so the first data row is line 2.
    return f"{name} line {position + 2}" if is_csv else f"{name} row {position + 1}"


def _column_problems(df: pd.DataFrame, name: str, required: Sequence[str], known: Sequence[str]) -> list[str]:
    problems = []
    columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in columns]
    unknown = [c for c in columns if c not in known]
    if missing:
        problems.append(f"{name}: missing column(s) {', '.join(missing)}")
    if unknown:
        problems.append(
            f"{name}: unknown column(s) {', '.join(unknown)}; the schema's columns are {', '.join(known)} "
            "(docs/submissions-schema.md)"
        )
    return problems


def is_per_mlp_table(df: pd.DataFrame) -> bool:
    return "mlp_index" in [str(c).strip() for c in df.columns]


class _RowProblems(list):
    """Every problem found in one row, so a bad row is reported whole, not first error only."""

    def __init__(self, row: dict) -> None:
        super().__init__()
        self.row = row

    def take(self, parser, key, *args, **kwargs):
        """Parse ``row[key]``; note the problem, if any, and return the value (or None)."""
        value, problem = parser(self.row.get(key), key, *args, **kwargs)
        if problem:
            self.append(problem)
        return value


def parse_submission_row(row: dict) -> tuple[Submission | None, list[str]]:
    """One submission row: the record, or every problem with it."""
    problems = _RowProblems(row)
    take = problems.take

    sid = take(_text, "submission_id", required=True)
    team = take(_text, "team", required=True)
    round_tag = take(_text, "round", required=True)
    if round_tag is not None and round_tag not in ALL_ROUNDS:
        problems.append(f"round is {round_tag!r}; known rounds: {', '.join(ALL_ROUNDS)}")
    submitted_at = take(_time, "submitted_at")
    status = take(_text, "status", required=True)
    if status is not None:
        status = status.lower()
        if status not in store.STATUSES:
            problems.append(f"status is {status!r}; write one of {', '.join(store.STATUSES)}")
    graded = status == "graded"
    values = {
        "mean_flops_used": take(_number, "mean_flops_used", required=graded),
        "final_layer_mse": take(_number, "final_layer_mse", required=graded),
        "adjusted_score": take(_number, "adjusted_score", required=graded),
        "mean_multiplier": take(_number, "mean_multiplier", required=graded, minimum=0.1 - 1e-12),
        "n_failed_mlps": take(_integer, "n_failed_mlps", required=graded),
        "n_mlps": take(_integer, "n_mlps", required=False, minimum=1),
        "mean_effective_compute": take(_number, "mean_effective_compute", required=False),
        "mean_avg_variance": take(_number, "mean_avg_variance", required=False, strict=True),
        "whestbench_version": take(_text, "whestbench_version", required=True, max_len=64),
        "flopscope_version": take(_text, "flopscope_version", required=False, max_len=64),
        "dataset": take(_text, "dataset", required=False, max_len=500),
        "estimator": take(_text, "estimator", required=False, max_len=500),
        "source": take(_text, "source", required=False, max_len=64),
    }
    n_failed, n_mlps = values["n_failed_mlps"], values["n_mlps"]
    if n_failed is not None and n_mlps is not None and n_failed > n_mlps:
        problems.append(f"n_failed_mlps ({n_failed}) exceeds n_mlps ({n_mlps})")
    if problems:
        return None, list(problems)
    return (
        Submission(submission_id=sid, team=team, round=round_tag, submitted_at=submitted_at, status=status, **values),
        [],
    )


def parse_mlp_row(row: dict) -> tuple[MLPResult | None, list[str]]:
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
    )
    if problems:
        return None, list(problems)
    return MLPResult(**result), []


def _add_table(batch: Batch, df: pd.DataFrame, name: str) -> None:
    is_csv = Path(name).suffix.lower() == ".csv"
    df = df.rename(columns=lambda c: str(c).strip())
    per_mlp = is_per_mlp_table(df)
    required, known = (
        (REQUIRED_MLP_COLUMNS, MLP_RESULT_FIELDS) if per_mlp else (REQUIRED_SUBMISSION_COLUMNS, SUBMISSION_FIELDS)
    )
    column_problems = _column_problems(df, name, required, known)
    if column_problems:
        batch.problems += column_problems
        return
    if df.empty:
        batch.problems.append(f"{name}: no rows")
        return
    parse = parse_mlp_row if per_mlp else parse_submission_row
    for position, row in enumerate(df.to_dict("records")):
        label = _row_label(name, position, is_csv)
        record, problems = parse(row)
        if problems:
            sid = row.get("submission_id")
            where = f"{label} (submission_id {str(sid).strip()!r})" if not _blank(sid) else label
            batch.problems += [f"{where}: {p}" for p in problems]
        elif per_mlp:
            batch.mlp_results.append(record)
        else:
            batch.submissions.append(record)
            batch.origin.setdefault(record.submission_id, label)


# ---------------------------------------------------------------------------
# whest run --json reports
# ---------------------------------------------------------------------------


def report_submission_id(report: dict) -> str:
    """A stable id for a report without one: the same report always maps to the same id."""
    results = report.get("results") or {}
    digest = hashlib.sha256(json.dumps(results, sort_keys=True, default=str).encode()).hexdigest()
    return f"run-{digest[:16]}"


def _failed_entry(entry: dict) -> bool:
    """whestbench.scoring's definition: an error code or any exhaustion flag."""
    return bool(entry.get("error_code")) or any(bool(entry.get(k)) for k in FAILURE_FLAGS)


def _check_rules(config: dict, per_mlp: list[dict], rnd) -> list[str]:
    """A report is only a score of this round if it ran under the round's rulebook."""
    problems = []
    budget = config.get("flop_budget")
    if budget is None or int(budget) != rnd.budget:
        problems.append(
            f"it was scored with flop_budget {budget}, but round {rnd.tag} has B = {rnd.budget}; "
            "re-run with that round's settings (see `whest run --help`)"
        )
    lam = float(config.get("lambda_flops_per_second") or 0.0)
    if lam != rnd.lambda_flops_per_second:
        problems.append(
            f"it priced residual time at lambda = {lam:g}, but round {rnd.tag} uses {rnd.lambda_flops_per_second:g}"
        )
    caps = (
        ("wall_time_limit_s", rnd.wall_time_limit_s, "wall_time_s"),
        ("residual_wall_time_limit_s", rnd.residual_wall_time_limit_s, "residual_wall_time_s"),
    )
    for key, round_cap, measured in caps:
        if round_cap is None:
            continue
        cap = config.get(key)
        if cap is not None and float(cap) <= round_cap:
            continue
        over = [e.get("mlp_index") for e in per_mlp if float(e.get(measured) or 0.0) > round_cap]
        if over:
            problems.append(
                f"it ran with {key} = {cap} and MLP(s) {over} took longer than round {rnd.tag}'s cap of "
                f"{round_cap:g} s, so they would have failed under the round's rules"
            )
    return problems


def parse_run_report(
    report: Any,
    name: str,
    *,
    team: str | None,
    submission_id: str | None = None,
    round_tag: str | None = None,
    flopscope_version: str | None = None,
) -> tuple[Submission | None, list[MLPResult], list[str]]:
    """A ``whest run --json`` report as one submission with its per-MLP results."""
    if not isinstance(report, dict) or "results" not in report:
        if isinstance(report, dict) and report.get("ok") is False:
            err = report.get("error") or {}
            return None, [], [f"{name}: the report records a failed run ({err.get('code')}: {err.get('message')})"]
        return None, [], [f"{name}: not a `whest run --json` report (no 'results')"]
    results, config = report.get("results") or {}, report.get("run_config") or {}
    per_mlp = [e for e in results.get("per_mlp") or [] if isinstance(e, dict)]
    problems: list[str] = []
    if not team:
        problems.append(f"{name}: a whest run report does not name its team; pass --team NAME (or fill Team on the page)")
    if not per_mlp:
        problems.append(f"{name}: the report has no per-MLP results")
    rnd = round_for_shape(config.get("width", 0), config.get("depth", 0))
    if round_tag:
        wanted = get_round(round_tag)
        if rnd is None or rnd.tag != wanted.tag:
            problems.append(f"{name}: the report's MLPs are {config.get('width')} x {config.get('depth')}, "
                            f"not round {wanted.tag}'s {wanted.shape_label}")
        rnd = wanted
    if rnd is None:
        problems.append(f"{name}: no round has MLPs of {config.get('width')} x {config.get('depth')}")
    else:
        problems += [f"{name}: {p}" for p in _check_rules(config, per_mlp, rnd)]
    if problems:
        return None, [], problems
    from whestbench.budget import score_multiplier

    sid = submission_id or report_submission_id(report)
    finished = (report.get("run_meta") or {}).get("run_finished_at_utc")
    try:
        submitted_at = parse_time(finished)
    except (TypeError, ValueError):
        return None, [], [f"{name}: run_meta.run_finished_at_utc is {finished!r}, not a time"]
    mlps = []
    for e in per_mlp:
        failed = _failed_entry(e)
        compute = float(e.get("effective_compute") or 0.0)
        mlps.append(
            MLPResult(
                submission_id=sid,
                mlp_index=int(e["mlp_index"]),
                mlp_name=e.get("mlp_name"),
                final_layer_mse=float(e["final_layer_mse"]),
                adjusted_score=float(e["adjusted_final_layer_score"]),
                flops_used=float(e.get("flops_used") or 0),
                effective_compute=compute,
                multiplier=float(score_multiplier(compute, rnd.budget, failed=failed)),
                failed=failed,
            )
        )
    dataset = (config.get("dataset") or {}).get("path") if isinstance(config.get("dataset"), dict) else None
    # A Whestboard run report carries both versions; `whest run --json` only whestbench's.
    versions = report.get("versions") if isinstance(report.get("versions"), dict) else {}
    sub = Submission(
        submission_id=sid,
        team=team,
        round=rnd.tag,
        submitted_at=submitted_at,
        status="graded",
        whestbench_version=str(report.get("whestbench_version") or versions.get("whestbench_version") or "unknown"),
        flopscope_version=flopscope_version or versions.get("flopscope_version"),
        mean_flops_used=sum(m.flops_used for m in mlps) / len(mlps),
        final_layer_mse=float(results["final_layer_mse"]),
        adjusted_score=float(results["adjusted_final_layer_score"]),
        mean_multiplier=float(results["mean_score_multiplier"]),
        n_failed_mlps=int(results.get("n_failed_mlps", sum(m.failed for m in mlps))),
        n_mlps=len(mlps),
        mean_effective_compute=float(results.get("mean_effective_compute", 0.0)),
        dataset=dataset or (f"generated (seed {config.get('seed')})" if config.get("seed") is not None else None),
        estimator=config.get("estimator_path"),
        source="whest-run",
    )
    return sub, mlps, []


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
) -> Batch:
    """Parse and cross-check every file; ``batch.problems`` lists everything wrong."""
    batch = Batch(files=[u.name for u in uploads])
    reports = [u for u in uploads if Path(u.name).suffix.lower() == ".json"]
    if submission_id and len(reports) > 1:
        batch.problems.append("--id names one submission but several run reports were given; import them one at a time")
    for upload in uploads:
        suffix = Path(upload.name).suffix.lower()
        if suffix == ".json":
            _add_report(batch, upload, team=team, submission_id=submission_id, round_tag=round_tag,
                        flopscope_version=flopscope_version)
        elif suffix in TABLE_SUFFIXES:
            try:
                _add_table(batch, read_table(upload.data, upload.name), upload.name)
            except ImportRejected as exc:
                batch.problems += exc.problems
        else:
            batch.problems.append(f"{upload.name}: unsupported file type {suffix or '(none)'}; "
                                  "give .csv, .parquet or a `whest run --json` .json report")
    _cross_check(batch)
    return batch


def _add_report(batch: Batch, upload: Upload, **options) -> None:
    try:
        report = json.loads(upload.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        batch.problems.append(f"{upload.name}: not valid JSON ({exc})")
        return
    sub, mlps, problems = parse_run_report(report, upload.name, **options)
    batch.problems += problems
    if sub is not None:
        batch.submissions.append(sub)
        batch.mlp_results += mlps
        batch.origin.setdefault(sub.submission_id, upload.name)


def _cross_check(batch: Batch) -> None:
    counts: dict[str, int] = {}
    for sub in batch.submissions:
        counts[sub.submission_id] = counts.get(sub.submission_id, 0) + 1
    batch.problems += [
        f"submission_id {sid!r} appears {n} times in this import; each submission needs its own id"
        for sid, n in counts.items() if n > 1
    ]
    subs = {s.submission_id: s for s in batch.submissions}
    grouped: dict[str, list[MLPResult]] = {}
    keys: set[tuple[str, int]] = set()
    for res in batch.mlp_results:
        if (res.submission_id, res.mlp_index) in keys:
            batch.problems.append(f"per-MLP results list MLP {res.mlp_index} of {res.submission_id!r} twice")
        keys.add((res.submission_id, res.mlp_index))
        grouped.setdefault(res.submission_id, []).append(res)
    for sid, results in grouped.items():
        if sid not in subs:
            batch.problems.append(
                f"per-MLP results name submission_id {sid!r}, which is not in this import's submissions file"
            )
            continue
        where = batch.origin.get(sid, sid)
        batch.problems += [f"{where} (submission_id {sid!r}): {p}" for p in aggregate_problems(subs[sid], results)]


def aggregate_problems(sub: Submission, results: Sequence[MLPResult]) -> list[str]:
    """The submission's aggregates must be what its per-MLP results average to."""
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
        if not math.isclose(value, mean, rel_tol=AGGREGATE_RTOL, abs_tol=1e-300):
            problems.append(f"{name} is {value:.6g} but its per-MLP values average to {mean:.6g}")
    return problems


def load(paths: Iterable[Path], **options) -> Batch:
    """Read files from disk; a table's ``<stem>.per_mlp.<ext>`` sibling comes along if present."""
    chosen: list[Path] = []
    for path in map(Path, paths):
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file")
        chosen.append(path)
        sibling = path.with_name(path.stem + PER_MLP_SUFFIX + path.suffix)
        if path.suffix.lower() in TABLE_SUFFIXES and sibling.is_file() and sibling not in chosen and sibling not in paths:
            chosen.append(sibling)
    unique = list(dict.fromkeys(p.resolve() for p in chosen))
    return build_batch([Upload(str(p), p.read_bytes()) for p in unique], **options)


def commit(batch: Batch, *, url: str | None = None) -> UpsertReport:
    """Write a clean batch (all or nothing); raise ImportRejected listing every problem otherwise."""
    if batch.problems:
        raise ImportRejected(batch.problems)
    if not batch.submissions:
        raise ImportRejected(["no submissions found in " + (", ".join(batch.files) or "the input")])
    return store.upsert(batch.submissions, batch.mlp_results, url=url)


def import_files(paths: Iterable[Path], *, url: str | None = None, **options) -> UpsertReport:
    return commit(load(paths, **options), url=url)


def import_uploads(uploads: Sequence[Upload], *, url: str | None = None, **options) -> UpsertReport:
    return commit(build_batch(uploads, **options), url=url)


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


def submissions_csv(*, url: str | None = None) -> str:
    """Every submission in the import schema, as CSV text (floats written exactly)."""
    df = store.frame(url=url)
    df["submitted_at"] = df["submitted_at"].map(_iso)
    return df.to_csv(index=False, float_format=None)


def mlp_results_csv(*, url: str | None = None) -> str:
    return store.mlp_frame(url=url).to_csv(index=False)


def _iso(moment) -> str:
    return pd.Timestamp(moment).tz_convert("UTC").strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def export(out: Path, *, url: str | None = None, per_mlp: bool = True) -> tuple[Path, Path | None]:
    """Write the submissions CSV and, when any exist, the per-MLP sibling ``<stem>.per_mlp.csv``."""
    out = Path(out)
    if out.suffix.lower() != ".csv":
        raise ValueError(f"{out}: export writes CSV; give a path ending in .csv")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(submissions_csv(url=url))
    sibling = out.with_name(out.stem + PER_MLP_SUFFIX + ".csv")
    if per_mlp and store.ids_with_mlp_results(url=url):
        sibling.write_text(mlp_results_csv(url=url))
        return out, sibling
    return out, None


# ---------------------------------------------------------------------------
# the shipped baseline sweep
# ---------------------------------------------------------------------------


def shipped_files() -> list[Path]:
    """The sweep output shipped under data/submissions/ (submission tables only)."""
    from whestboard.registry import data_dir

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
    if store.was_seeded(url=url):
        return None
    if store.count(url=url) > 0:
        store.mark_seeded(url=url)
        return None
    files = shipped_files()
    report = None
    if files:
        from sqlalchemy.exc import IntegrityError

        try:
            report = import_files(files, url=url)
        except IntegrityError:
            # Another worker inserted the same ids a moment earlier: now they are unchanged.
            report = import_files(files, url=url)
    store.mark_seeded(url=url)
    return report


def now_utc() -> datetime:
    return datetime.now(UTC)
