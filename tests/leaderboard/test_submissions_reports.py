"""A real ``whest run --json`` report (``run_report``: tests/leaderboard/conftest.py) imports as it is; the
command line imports and exports."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import traceback
from pathlib import Path

import pandas as pd
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.submissions_helpers import submission_row, write_csvs
from whestboard.cli import main
from whestboard.leaderboard import _files, _store

sqlite_store = helpers.sqlite_store


def test_whest_run_report_imports_as_it_is(sqlite_store, run_report):
    from whestbench.budget import ROUNDS, score_multiplier

    report = json.loads(run_report.read_text())
    results = report["results"]
    imported = _files.import_files([run_report], team="gamma")
    assert len(imported.inserted) == 1
    sid = imported.inserted[0]
    sub = _store.get_submission(sid)
    budget = ROUNDS["v2-phase2"].flop_budget
    assert report["run_config"]["flop_budget"] == budget
    assert sub.round == "v2-phase2" and sub.team == "gamma" and sub.source == "whest-run"
    assert sub.adjusted_score == results["adjusted_final_layer_score"]
    assert sub.final_layer_mse == results["final_layer_mse"]
    assert sub.mean_multiplier == results["mean_score_multiplier"]
    assert sub.n_failed_mlps == results["n_failed_mlps"]
    assert sub.mean_effective_compute == results["mean_effective_compute"]
    assert sub.whestbench_version == report["whestbench_version"]
    per_mlp = results["per_mlp"]
    assert sub.mean_flops_used == sum(e["flops_used"] for e in per_mlp) / len(per_mlp)
    assert sub.submitted_at.isoformat() == report["run_meta"]["run_finished_at_utc"]
    rows = _store.mlp_frame([sid]).set_index("mlp_index")
    for e in per_mlp:
        row = rows.loc[e["mlp_index"]]
        assert row["adjusted_score"] == e["adjusted_final_layer_score"]
        assert row["final_layer_mse"] == e["final_layer_mse"]
        assert row["mlp_name"] == e["mlp_name"]
        assert row["multiplier"] == score_multiplier(e["effective_compute"], budget, failed=False)
    again = _files.import_files([run_report], team="gamma")
    assert again.unchanged == [sid] and _store.submission_count() == 1


def test_run_report_needs_a_team_and_the_rounds_rules(sqlite_store, run_report, tmp_path):
    with pytest.raises(_files.ImportRejected, match="does not name its team"):
        _files.import_files([run_report])
    report = json.loads(run_report.read_text())
    report["run_config"]["flop_budget"] = 68_000_000_000
    bad = tmp_path / "wrong-budget.json"
    bad.write_text(json.dumps(report))
    with pytest.raises(_files.ImportRejected, match=r"flop_budget 68000000000, but round v2-phase2 has B = 2199023255552"):
        _files.import_files([bad], team="gamma")
    assert _store.submission_count() == 0


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    """``python -m whestboard ARGS`` under ``env``, run in this process (each CLI process would spend two
    seconds importing whestbench); an exception escaping the CLI is a traceback on stderr, exit 1, as it
    would be in its own process."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for name in {*os.environ, *env}:
            if name not in env:
                mp.delenv(name)
            elif os.environ.get(name) != env[name]:
                mp.setenv(name, env[name])
        try:
            status = main(list(args))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except Exception:  # noqa: BLE001 - what the interpreter would print
            traceback.print_exc()
            status = 1
    return subprocess.CompletedProcess(["whestboard", *args], status, out.getvalue(), err.getvalue())


def test_command_line_import_and_export(tmp_path):
    env = dict(os.environ, WHESTBOARD_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.sqlite'}",
               WHESTBOARD_STATE_DIR=str(tmp_path / "state"))
    good = write_csvs(tmp_path / "good", [submission_row("c-1", "alpha"), submission_row("c-2", "beta")])
    bad_row, _ = submission_row("c-3", "gamma")
    bad_row["status"] = "pending"
    bad = tmp_path / "bad.csv"
    pd.DataFrame([bad_row]).to_csv(bad, index=False)

    refused = _cli("import", str(good), str(bad), env=env)
    assert refused.returncode == 2
    assert "nothing was imported" in refused.stderr
    assert "bad.csv line 2 (submission_id 'c-3'): status is 'pending'" in refused.stderr

    done = _cli("import", str(good), env=env)
    assert done.returncode == 0, done.stderr
    assert "2 added, 0 updated, 0 unchanged" in done.stdout
    assert "0 added, 0 updated, 2 unchanged" in _cli("import", str(good), env=env).stdout

    out = tmp_path / "export" / "all.csv"
    exported = _cli("export", "--out", str(out), env=env)
    assert exported.returncode == 0, exported.stderr
    table = pd.read_csv(out)
    assert sorted(table["submission_id"]) == ["c-1", "c-2"]
    assert (tmp_path / "export" / "all.per_mlp.csv").is_file()


# ---------------------------------------------------------------------------
# hostile reports: each refused with a message, nothing stored
# ---------------------------------------------------------------------------


def _mutated(run_report: Path, tmp_path: Path, change) -> Path:
    report = json.loads(run_report.read_text())
    change(report)
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(report))
    return path


def _set(path: str, value):
    def change(report):
        *parents, last = path.split(".")
        node = report
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return change


HOSTILE_REPORTS = [
    ("results", ["x"], "not a `whest run --json` report ('results' and 'run_config' must be objects)"),
    ("run_config.width", "wide", "run_config.width is 'wide', not a number"),
    ("run_config.flop_budget", ["x"], "it was scored with flop_budget ['x'], but round v2-phase2 has B = "),
    ("results.per_mlp.0.mlp_index", {"a": 1}, "results.per_mlp[0]: mlp_index is a JSON object, not a number"),
    ("results.per_mlp.1.final_layer_mse", None, "results.per_mlp[1]: final_layer_mse is missing"),
    ("results.per_mlp.1.mlp_name", "x\x00y", "results.per_mlp[1]: mlp_name contains the control character U+0000"),
    ("run_config.estimator_path", "e" * 501, "estimator is 501 characters long; at most 500 are allowed"),
    ("run_meta.run_finished_at_utc", "9" * 10_000, "run_meta.run_finished_at_utc is '9999"),
    ("results.mean_score_multiplier", "lots", "mean_multiplier is 'lots', not a number"),
]


@pytest.mark.parametrize(("path", "value", "message"), HOSTILE_REPORTS, ids=[h[0] for h in HOSTILE_REPORTS])
def test_a_malformed_report_is_refused_with_a_message(sqlite_store, run_report, tmp_path, path, value, message):
    bad = _mutated(run_report, tmp_path, _set(path, value))
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([bad], team="gamma")
    assert any(message in p for p in err.value.problems), err.value.problems
    assert all(len(p) < 400 for p in err.value.problems)
    assert _store.submission_count() == 0


def test_a_reports_team_and_id_follow_the_text_rules(sqlite_store, run_report):
    with pytest.raises(_files.ImportRejected, match="team contains the control character U\\+001B"):
        _files.import_files([run_report], team="\x1b[2Jgamma")
    with pytest.raises(_files.ImportRejected, match="submission_id is 201 characters long"):
        _files.import_files([run_report], team="gamma", submission_id="i" * 201)
    assert _store.submission_count() == 0


@pytest.mark.parametrize(("body", "message"), [
    (b"[" * 10_000 + b"]" * 10_000, "its JSON nests more than 64 levels deep"),
    (b'{"results": ' + b"[" * 100 + b"]" * 100 + b"}", "its JSON nests more than 64 levels deep"),
    (b'{"results": ' + b"1" * 5_000 + b"}", "not valid JSON (Exceeds the limit (4300 digits)"),
    (b"\xff\xfe{}", "not valid JSON (not UTF-8 text: invalid start byte at byte 0)"),
    (b'{"ok": false, "error": {"code": "' + b"C" * 5_000 + b'"}}', "the report records a failed run (CCCC"),
])
def test_json_that_is_no_report_is_refused(sqlite_store, tmp_path, body, message):
    path = tmp_path / "odd.json"
    path.write_bytes(body)
    with pytest.raises(_files.ImportRejected) as err:
        _files.import_files([path], team="gamma")
    [problem] = err.value.problems
    assert message in problem and len(problem) < 600
    assert _store.submission_count() == 0


def test_a_report_over_the_size_limit_is_refused_unparsed(sqlite_store, tmp_path):
    path = tmp_path / "huge.json"
    path.write_bytes(b"[" + b"{}," * (_files.MAX_REPORT_BYTES // 3) + b"{}]")
    with pytest.raises(_files.ImportRejected, match=r"huge.json: 8.0 MiB; a `whest run --json` report is at most 8 MiB"):
        _files.import_files([path], team="gamma")


def test_command_line_refuses_hostile_files_without_a_traceback(tmp_path):
    env = dict(os.environ, WHESTBOARD_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.sqlite'}",
               WHESTBOARD_STATE_DIR=str(tmp_path / "state"))
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 10_000 + b"]" * 10_000)
    refused = _cli("import", str(deep), "--team", "gamma", env=env)
    assert refused.returncode == 2
    assert "Traceback" not in refused.stderr
    assert f"{deep}: not a `whest run --json` report: its JSON nests more than 64 levels deep" in refused.stderr
    flood = tmp_path / "flood.csv"
    flood.write_text("submission_id,team,round,submitted_at,status,whestbench_version\n" + ",,,,,\n" * 200_000)
    refused = _cli("import", str(flood), env=env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "at least 1,00" in refused.stderr and len(refused.stderr) < 20_000
    assert "… and " in refused.stderr and "(all problems by field: submission_id " in refused.stderr


# ---------------------------------------------------------------------------
# a whole report assigned to a split
# ---------------------------------------------------------------------------


def test_a_private_report_adds_its_mlps_to_the_submission_it_names(sqlite_store, run_report, tmp_path):
    from whestboard.rules import judge

    _files.import_files([run_report], team="gamma", submission_id="g-1")
    board = _store.get_submission("g-1")
    with pytest.raises(_files.ImportRejected, match="a private report adds results to a submission: pass --id"):
        _files.import_files([run_report], team="gamma", split="private")
    with pytest.raises(_files.ImportRejected, match="split is 'hidden'; write one of public, private, rerun"):
        _files.import_files([run_report], submission_id="g-1", split="hidden")
    with pytest.raises(_files.ImportRejected, match="'nobody', which is neither in this import nor stored"):
        _files.import_files([run_report], submission_id="nobody", split="private")

    # one MLP of the withheld run went over budget: its kind comes from the one failure vocabulary
    failing = _mutated(run_report, tmp_path, _set("results.per_mlp.1.budget_exhausted", True))
    entry = json.loads(failing.read_text())["results"]["per_mlp"][1]
    assert _files.import_files([failing], submission_id="g-1", split="private").updated == ["g-1"]
    assert _files.import_files([failing], submission_id="g-1", split="private").unchanged == ["g-1"]
    assert _store.get_submission("g-1") == board  # the board's numbers are the public ones, untouched
    rows = _store.mlp_frame(["g-1"]).set_index(["split", "mlp_index"])
    assert rows.index.get_level_values("split").value_counts().to_dict() == {"public": 2, "private": 2}
    private = rows.loc["private"]
    report = json.loads(run_report.read_text())
    assert private["adjusted_score"].tolist() == [e["adjusted_final_layer_score"] for e in report["results"]["per_mlp"]]
    assert private["failed"].tolist() == [False, True]
    assert private["failure"].tolist()[1] == judge(entry)[0] == "budget"
    assert _store.submission_count() == 1


def test_command_line_assigns_a_split_to_a_report(run_report, tmp_path):
    env = dict(os.environ, WHESTBOARD_DATABASE_URL=f"sqlite:///{tmp_path / 'cli.sqlite'}",
               WHESTBOARD_STATE_DIR=str(tmp_path / "state"))
    assert _cli("import", str(run_report), "--team", "gamma", "--id", "g-1", env=env).returncode == 0
    done = _cli("import", str(run_report), "--id", "g-1", "--split", "rerun", env=env)
    assert done.returncode == 0, done.stderr
    assert "0 added, 1 updated, 0 unchanged), 2 per-MLP results (rerun 2)" in done.stdout
