"""The column-at-a-time check of an import gives what the row parser gives, record for record and word for word.

The reference here reads the same file row by row through ``parse_submission_row`` /
``parse_mlp_row`` (the checks every message comes from), as the import did before it
checked a chunk's columns at once; the import must keep exactly the same records and
report exactly the same problems, in the same order, with the same counts.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row
from whestboard.leaderboard import _files, _store

postgres_server, store_url, sqlite_store = helpers.postgres_server, helpers.store_url, helpers.sqlite_store


def _row_by_row(path: Path) -> _files.Batch:
    """The reference: every row of one table parsed on its own, as the import once did."""
    data = path.read_bytes()
    is_csv = path.suffix == ".csv"
    batch = _files.Batch(files=[str(path)])
    frames = list(_files._table_frames(data, str(path)))
    names = [str(c).strip() for c in frames[0].columns]
    per_mlp = "mlp_index" in names
    parse = _files.parse_mlp_row if per_mlp else _files.parse_submission_row
    limits = _store.MLP_TEXT_LIMITS if per_mlp else _store.SUBMISSION_TEXT_LIMITS
    position = 0
    for frame in frames:
        for values in frame.itertuples(index=False, name=None):
            row = dict(zip(names, values, strict=True))
            for key in limits:
                if key in row and is_csv:
                    row[key] = _files.unescape_formula(row[key])
            label = _files._row_label(str(path), position, is_csv)
            position += 1
            record, problems = parse(row)
            if not problems:
                batch.keep(record, label)
                continue
            sid = row.get("submission_id")
            where = f"{label} (submission_id {_files._shown(str(sid).strip())})" if not _files._blank(sid) else label
            for kind, problem in zip(problems.kinds, problems, strict=True):
                batch.refuse(f"{where}: {problem}", kind)
            if batch.problems.full:
                batch.problems.stopped_at = label
                return batch
    return batch


def _by_columns(path: Path) -> _files.Batch:
    batch = _files.Batch(files=[str(path)])
    _files._add_table(batch, _files.Upload(str(path), path.read_bytes()))
    return batch


def _same_outcome(path: Path) -> _files.Batch:
    expected, got = _row_by_row(path), _by_columns(path)
    assert got.problems.shown == expected.problems.shown
    assert dict(got.problems.counts) == dict(expected.problems.counts)
    assert (got.problems.total, got.problems.stopped_at) == (expected.problems.total, expected.problems.stopped_at)
    assert got.submissions == expected.submissions
    assert got.mlp_results == expected.mlp_results
    assert got.origin == expected.origin
    return got


def _good_submissions() -> list[dict]:
    """Valid rows that exercise every conversion: case, spaces, escapes, number spellings, time zones, blanks."""
    rows = []
    for i, (team, when, nominated) in enumerate([
        ("alpha", "2026-05-01T12:00:00Z", "true"), (" beta ", "2026-05-01 13:30:00+02:00", "YES"),
        ("'=cmd", "2026-05-01T12:00:00.123456", "0"), ("'s-Hertogenbosch", "2026-05-02T00:00Z", ""),
        ("Ωmega", "2026-05-03", "f"), ("alpha", "2026-05-01T12:00:00Z", "T"),
    ]):
        row, _ = submission_row(f"good-{i}", team, minutes=i, nominated=nominated)
        row["submitted_at"] = when
        rows.append(row)
    rows[1]["status"] = " Graded"
    rows[2]["mean_flops_used"] = "1_000"
    rows[2]["n_mlps"] = "2.0"
    rows[3]["mean_multiplier"] = "0.1"
    rows[4]["final_layer_mse"] = " 3e-5 "
    rows[5]["round"] = "v2-phase2"
    return rows


def _bad_submissions() -> list[dict]:
    """One row per kind of problem the row parser reports, several in some rows."""
    changes = [
        {"adjusted_score": "lots"}, {"final_layer_mse": "-1"}, {"mean_flops_used": "inf"}, {"final_layer_mse": "nan"},
        {"mean_multiplier": "0.05"}, {"n_mlps": "2.5"}, {"n_mlps": "0"}, {"n_failed_mlps": "3"},
        {"nominated": "maybe"}, {"round": "v9-nope"}, {"status": "pending"}, {"team": ""}, {"submission_id": ""},
        {"submitted_at": "yesterday"}, {"submitted_at": ""}, {"team": "a\tb"}, {"dataset": "x" * 600},
        {"adjusted_score": ""}, {"whestbench_version": "  "}, {"mean_avg_variance": "0"},
        {"team": "", "adjusted_score": "x", "round": "nope"}, {"n_failed_mlps": "1e400"},
    ]
    rows = []
    for i, change in enumerate(changes):
        row, _ = submission_row(f"bad-{i}", "gamma", minutes=i)
        rows.append({**row, **change})
    return rows


def _failed_status_row() -> dict:
    row, _ = submission_row("failed-1", "delta")
    row.update(status="FAILED", mean_flops_used="", final_layer_mse="", adjusted_score="", mean_multiplier="",
               n_failed_mlps="")
    return row


def _write(folder: Path, rows: list[dict], name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    frame = pd.DataFrame(rows).astype(str).replace("nan", "")
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_valid_rows_give_the_row_parsers_records(tmp_path, suffix):
    numbers_only = _write(tmp_path, _good_submissions(), "good" + suffix)  # every number column read at once
    assert len(_same_outcome(numbers_only).submissions) == 6
    with_blanks = _write(tmp_path, [*_good_submissions(), _failed_status_row()], "blanks" + suffix)
    batch = _same_outcome(with_blanks)  # blank numbers: their columns parsed value by value
    assert batch.submissions[-1].status == "failed" and batch.submissions[-1].adjusted_score is None


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_bad_rows_give_the_row_parsers_messages(tmp_path, suffix):
    rows = _bad_submissions()
    mixed = [*_good_submissions()[:3], *rows, _failed_status_row()]
    batch = _same_outcome(_write(tmp_path, mixed, "bad" + suffix))
    assert batch.problems.total >= len(rows) and not batch.submissions
    label = "line" if suffix == ".csv" else "row"
    assert any(f"{label} {5 if suffix == '.csv' else 4} (submission_id 'bad-0'): adjusted_score is 'lots'" in p
               for p in batch.problems.shown)


def test_a_parquet_file_of_native_values_gives_the_row_parsers_outcome(tmp_path):
    """Parquet holds numbers, booleans and times as themselves (and nulls), not text."""
    rows = [submission_row(f"n-{i}", f"team-{i % 3}", minutes=i)[0] for i in range(8)]
    frame = pd.DataFrame(rows)
    frame["submitted_at"] = pd.to_datetime(frame["submitted_at"], utc=True)
    frame["nominated"] = [True, False] * 4
    good = tmp_path / "native.parquet"
    frame.to_parquet(good)
    assert len(_same_outcome(good).submissions) == 8
    frame.loc[2, "adjusted_score"] = np.nan
    frame.loc[5, "n_mlps"] = 0
    frame["flopscope_version"] = [None, "0.12.4"] * 4
    bad = tmp_path / "native-bad.parquet"
    frame.to_parquet(bad)
    assert _same_outcome(bad).problems.total == 2


def _mlp_rows() -> list[dict]:
    _, mlps = submission_row("m-1", "alpha", scores=(1e-5, 2e-5, 3e-5), failed=(False, True, False),
                             flops=(1e9, 2e9, 3e9))
    mlps[1].update(failure="time", split="private")
    mlps[2].update(split=" PUBLIC ", mlp_name="'+mlp", avg_variance="0.5", failed="no")
    return mlps


def test_per_mlp_rows_give_the_row_parsers_records_and_messages(tmp_path):
    good = _mlp_rows()
    assert len(_same_outcome(_write(tmp_path, good, "good.per_mlp.csv")).mlp_results) == 3
    changes = [{"failure": "time", "failed": "false"}, {"split": "secret"}, {"failure": "boredom", "failed": "true"},
               {"mlp_index": "-1"}, {"mlp_index": "1.5"}, {"final_layer_mse": ""}, {"multiplier": "0.01"},
               {"avg_variance": "0"}, {"failed": "2"}, {"submission_id": ""}, {"meter_tampering": "a\x00b"}]
    bad = [{**good[0], **change, "mlp_index": str(10 + i) if "mlp_index" not in change else change["mlp_index"]}
           for i, change in enumerate(changes)]
    batch = _same_outcome(_write(tmp_path, [*good, *bad], "bad.per_mlp.csv"))
    assert batch.problems.total >= len(changes)


def test_a_flood_of_problems_stops_where_the_row_parser_stops(tmp_path, monkeypatch):
    # the stop (the 1,000th problem, row 1,499) falls inside a chunk (its 45th row), after 15 whole chunks
    monkeypatch.setattr(_files, "CHUNK_ROWS", 97)
    rows = [{**submission_row(f"f-{i}", "eps", minutes=i)[0], "adjusted_score": "x" if i % 3 else "1e-5"}
            for i in range(1_700)]
    batch = _same_outcome(_write(tmp_path, rows, "flood.csv"))
    assert batch.problems.full and batch.problems.stopped_at.endswith("flood.csv line 1501")


def _field_csv(n: int) -> bytes:
    """``n`` valid submissions (many chunks of CHUNK_ROWS), numbers written as ``%.10g``.

    Written line by line rather than through ``DataFrame.to_csv(float_format=...)``, which formats each
    number through pandas' formatter: the same bytes at a quarter of the cost.
    """
    mean_flops, mses, scores = np.linspace(1e6, 1e9, n), np.geomspace(1e-6, 1e-3, n), np.geomspace(1e-7, 1e-4, n)
    header = ("submission_id,team,round,submitted_at,status,whestbench_version,mean_flops_used,final_layer_mse,"
              "adjusted_score,mean_multiplier,n_failed_mlps,n_mlps")
    lines = [f"s-{i},team-{i % 97},v2-phase2,2026-05-01T12:00:00Z,graded,0.16.2,{flops:.10g},{mse:.10g},{score:.10g},"
             "0.1,0,100" for i, (flops, mse, score) in enumerate(zip(mean_flops.tolist(), mses.tolist(),
                                                                       scores.tolist(), strict=True))]
    return ("\n".join([header, *lines]) + "\n").encode()


def _last_row_broken(csv: bytes) -> bytes:
    """The same file with the last row's ``submitted_at`` (the only time in it) replaced by ``soon``."""
    head, last = csv.rstrip(b"\n").rsplit(b"\n", 1)
    assert last.count(b"2026-05-01T12:00:00Z") == 1
    return head + b"\n" + last.replace(b"2026-05-01T12:00:00Z", b"soon") + b"\n"


def test_a_large_import_is_all_or_nothing(store_url, tmp_path):
    n = 2 * _files.CHUNK_ROWS + 5
    csv = _field_csv(n)
    bad = tmp_path / "bad.csv"
    bad.write_bytes(_last_row_broken(csv))
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([bad], url=store_url)
    assert err.value.problems == [f"{bad.resolve()} line {n + 1} (submission_id 's-{n - 1}'): submitted_at is "
                                  "'soon'; write an ISO 8601 time such as 2026-05-01T12:00:00Z"]
    assert _store.submission_count(url=store_url) == 0
    good = tmp_path / "good.csv"
    good.write_bytes(csv)
    assert len(_files.import_files([good], url=store_url).inserted) == n
    stored = _store.submissions_frame(url=store_url).set_index("submission_id")
    header, *lines = csv.decode().splitlines()
    probed = tmp_path / "probed.csv"  # the rows compared, parsed by the row parser (the reference)
    probed.write_text("\n".join([header, lines[0], lines[n // 2], lines[-1]]) + "\n")
    expected = _row_by_row(probed).submissions
    assert len(stored) == n and len(expected) == 3
    for sub in expected:
        row = stored.loc[sub.submission_id]
        assert (row["team"], row["adjusted_score"], row["mean_flops_used"]) == (
            sub.team, sub.adjusted_score, sub.mean_flops_used)
        assert pd.Timestamp(row["submitted_at"]) == pd.Timestamp(sub.submitted_at)
    assert _files.import_files([good], url=store_url).unchanged == [line.split(",", 1)[0] for line in lines]
