"""The grader's own records (AIcrowd's per-submission JSON) import as they are, every number as the record states it.

The records are written by ``tests/leaderboard/aicrowd_records.py`` in the shapes the public records have
(a Phase 2 record of 100 MLPs with the public 50 scored, one with MLPs failed on time and on residual time,
a failed one, one failed only in its smoke test, a wrapped Phase 1 record with the older telemetry names
and residual time priced). Each stored number is compared with the record's own, and the public score is
recomputed from the per-MLP rows with whestbench's scoring functions, the oracle.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

import pandas as pd
import pytest
from whestbench.budget import ROUNDS, mc_at_bm, score_multiplier

from tests.leaderboard import aicrowd_records as records
from tests.leaderboard import submissions_helpers as helpers
from whestboard.cli import main
from whestboard.leaderboard import _files, _records, _store
from whestboard.rules import judge

store_url, sqlite_store, postgres_server = helpers.store_url, helpers.sqlite_store, helpers.postgres_server


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Every record written once as the generator writes it (read-only for the tests)."""
    return records.write_records(tmp_path_factory.mktemp("records"))


def _record(files, name: str) -> dict:
    document = json.loads(files[name].read_text())
    return document["data"]["submission"]["evaluation"] if "data" in document else document


def _snapshot():
    return _store.submissions_frame(), _store.mlp_frame(), _store.board_revision()


def assert_stored_as_recorded(record: dict, team: str, *, created_at: str | None = None) -> None:
    """Every stored number of the record's submission and of its scored MLPs is the record's own."""
    rnd = ROUNDS[{(1024, 16): "v2-phase2", (256, 32): "v1-phase1"}[(record["config_snapshot"]["width"],
                                                                    record["config_snapshot"]["depth"])]]
    public = record["results"]["aggregates"]["public"]
    scored = [e for e in record["results"]["per_mlp"] if "scores" in e]
    sub = _store.get_submission(str(record["submission_id"]))
    assert sub is not None and sub.team == team and sub.round == rnd.tag and sub.status == "graded"
    assert (sub.adjusted_score, sub.final_layer_mse, sub.mean_multiplier, sub.n_failed_mlps) == (
        public["score"], public["final_layer_mse"], public["mean_score_multiplier"], public["n_failed_mlps"])
    assert sub.mean_effective_compute == public["mean_effective_compute"]
    assert sub.n_mlps == len(scored) == 50
    assert sub.mean_flops_used == pytest.approx(math.fsum(e["telemetry"]["flops_used"] for e in scored) / 50,
                                                rel=1e-15)
    versions = record["runtime_environment"]
    assert (sub.whestbench_version, sub.flopscope_version) == (versions["whestbench_version"],
                                                               versions["flopscope_version"])
    assert sub.submitted_at == datetime.fromisoformat((created_at or record["started_at"]).replace("Z", "+00:00"))
    completed = record["completed_at"]
    assert sub.graded_at == (datetime.fromisoformat(completed) if completed else None)
    assert sub.source == "aicrowd" and sub.dataset == f"aicrowd:{rnd.tag}"
    # the board's MC@B of the submission is the grader's own sampling_mse of the same MLPs
    assert mc_at_bm(sub.mean_avg_variance, rnd) == pytest.approx(public["sampling_mse"], rel=1e-12)

    rows = _store.mlp_frame([sub.submission_id]).set_index("mlp_index")
    assert list(rows.index) == sorted(e["mlp_index"] for e in scored) and set(rows["split"]) == {"public"}
    for e in scored:
        row, scores, telemetry = rows.loc[e["mlp_index"]], e["scores"], e["telemetry"]
        failed = e["state"] == "failed"
        assert (row["final_layer_mse"], row["adjusted_score"], row["all_layers_mse"]) == (
            scores["final_layer_mse"], scores["adjusted_final_layer_score"], scores["all_layers_mse"])
        layers = json.loads(row["per_layer_mse"]) if isinstance(row["per_layer_mse"], str) else None
        assert layers == scores.get("per_layer_mse")
        assert (row["flops_used"], row["effective_compute"]) == (telemetry["flops_used"], telemetry["effective_compute"])
        assert row["multiplier"] == score_multiplier(telemetry["effective_compute"], rnd.flop_budget, failed=failed)
        assert bool(row["failed"]) is failed and row["mlp_name"] == e["mlp_name"]
        assert _value(row["error_code"]) == e.get("error_code")
        assert _value(row["failure"]) == (judge({**telemetry, **e})[0] if failed else None)
        new_names = "participant_predict_wall_s" in telemetry
        expected = {
            "predict_wall_s": telemetry["participant_predict_wall_s" if new_names else "wall_time_s"],
            "residual_wall_s": telemetry["residual_wall_time_s"],
            "setup_wall_s": telemetry["participant_setup_wall_s" if new_names else "setup_wall_s"],
            "kernel_wall_s": telemetry["flopscope_server_kernel_wall_s" if new_names else "flopscope_backend_time_s"],
            "overhead_wall_s": telemetry.get("flopscope_server_overhead_wall_s"),
            "comms_wall_s": telemetry.get("flopscope_server_comms_wall_s"),
        }
        stored = {k: _value(row[k]) for k in expected}
        assert stored == expected


def _value(cell):
    """A frame's cell as the record would hold it: a missing value is None."""
    return None if cell is None or (not isinstance(cell, str) and pd.isna(cell)) else cell


def recomputed_score(record: dict) -> float:
    """The oracle: the mean over the scored MLPs of final_layer_mse x whestbench's multiplier."""
    budget = record["config_snapshot"]["flop_budget"]
    scored = [e for e in record["results"]["per_mlp"] if "scores" in e]
    return math.fsum(e["scores"]["final_layer_mse"] * score_multiplier(
        e["telemetry"]["effective_compute"], budget, failed=e["state"] == "failed") for e in scored) / len(scored)


def test_a_phase2_record_imports_every_number_as_the_grader_wrote_it(store_url, files):
    record = _record(files, "333364-phase2.json")
    report = _files.import_files([files["333364-phase2.json"]], team="alpha")
    assert report.inserted == ["333364"]  # the record's own number is the submission's id
    assert_stored_as_recorded(record, "alpha")
    # the recomputed score agrees with the record to its rounding (4 significant digits), and the import says so
    recomputed = recomputed_score(record)
    assert recomputed != record["results"]["aggregates"]["public"]["score"]  # rounded: not equal bit for bit
    assert math.isclose(recomputed, record["results"]["aggregates"]["public"]["score"], rel_tol=1e-3)
    assert report.notes[0] == (
        f"{files['333364-phase2.json']} (submission 333364): public score 5.358e-09 recomputed from its 50 scored "
        f"MLPs with whestbench.budget.score_multiplier as {recomputed:.6g}: equal to the record's rounding "
        "(4 significant digits, relative 1e-03)")
    assert "its other 50 MLPs carry no scores (the withheld split) and are not stored" in report.notes[1]
    worst = max(e["telemetry"]["participant_predict_wall_s"] for e in record["results"]["per_mlp"])
    assert f"Closest to a cap over all 100 MLPs: predict wall time {worst:.4g} of 120 s" in report.notes[1]


def test_reimporting_a_record_unchanged_keeps_one_submission_with_the_same_id(sqlite_store, files):
    path = files["333364-phase2.json"]
    assert _files.import_files([path], team="alpha").inserted == ["333364"]
    before = _snapshot()
    again = _files.import_files([path], team="alpha")
    assert (again.inserted, again.updated, again.unchanged) == ([], [], ["333364"])
    after = _snapshot()
    pd.testing.assert_frame_equal(after[0], before[0])
    pd.testing.assert_frame_equal(after[1], before[1])
    assert after[2] == before[2] and _store.submission_count() == 1
    # the same record as AIcrowd's API wraps it is the same submission: updated in place, never duplicated
    wrapped = path.with_name("wrapped.json")
    wrapped.write_text(json.dumps({"data": {"submission": {"id": "333364", "evaluation": _record(files, path.name)}}}))
    assert _files.import_files([wrapped], team="alpha").unchanged == ["333364"]
    assert _store.submission_count() == 1


def test_mlps_failed_on_time_and_on_residual_time_keep_the_graders_codes(sqlite_store, files):
    record = _record(files, "333412-failures.json")
    _files.import_files([files["333412-failures.json"]], team="beta")
    assert_stored_as_recorded(record, "beta")
    rows = _store.mlp_frame(["333412"])
    failed = rows[rows["failed"]].sort_values("failure")
    assert list(failed["failure"]) == ["residual", "time"]
    assert list(failed["error_code"]) == ["RESIDUAL_WALL_TIME_EXHAUSTED", "WALL_TIME_EXHAUSTED"]
    assert list(failed["predict_wall_s"].round(2))[1] == 121.84 and list(failed["residual_wall_s"])[0] == 0.4127
    assert list(failed["multiplier"]) == [1.0, 1.0]
    assert _store.get_submission("333412").n_failed_mlps == 2 == record["results"]["aggregates"]["public"]["n_failed_mlps"]


def test_a_wrapped_phase1_record_with_the_older_names_and_priced_residual_time(store_url, files):
    document = json.loads(files["324969-phase1-wrapped.json"].read_text())
    record = document["data"]["submission"]["evaluation"]
    report = _files.import_files([files["324969-phase1-wrapped.json"]], team="gamma")
    assert report.inserted == ["324969"] and record["completed_at"] is None
    assert_stored_as_recorded(record, "gamma", created_at=document["data"]["submission"]["createdAt"])
    # priced: C = F + 1e11 R, and the multiplier whestbench gives it; at full precision the check is 1e-6
    rows = _store.mlp_frame(["324969"])
    assert (rows["effective_compute"] > rows["flops_used"]).all()
    assert (rows["effective_compute"] - rows["flops_used"]).to_numpy() == pytest.approx(
        1e11 * rows["residual_wall_s"].to_numpy(), rel=1e-9)
    assert rows["per_layer_mse"].isna().all()  # the record has none: not stored, never made up
    assert report.notes[0].endswith("equal to relative 1e-06 (the record is at full precision)")
    assert math.isclose(recomputed_score(record), record["results"]["aggregates"]["public"]["score"], rel_tol=1e-12)


def test_the_evaluation_as_json_text_and_the_wrappers_team(sqlite_store, files, tmp_path):
    """AIcrowd's API may give the evaluation as text; a wrapper that names the team needs no --team."""
    document = json.loads(files["324969-phase1-wrapped.json"].read_text())
    evaluation = document["data"]["submission"]["evaluation"]
    document["data"]["submission"].update(evaluation=json.dumps(evaluation), team={"name": "dpsk"})
    path = tmp_path / "as-text.json"
    path.write_text(json.dumps(document))
    assert _files.import_files([path]).inserted == ["324969"]
    assert_stored_as_recorded(evaluation, "dpsk", created_at=document["data"]["submission"]["createdAt"])
    with pytest.raises(_files.ImportRejected, match="the record is team 'dpsk''s, not 'other''s"):
        _files.import_files([path], team="other")


@pytest.mark.parametrize(("name", "message"), [
    ("333363-failed.json", "333363-failed.json (submission 333363): the grader failed it with "
                           "SUBMISSION_VALIDATION_ERROR: Prohibited file in submission: "
                           "vendor/numpy/_core/_multiarray_umath.so; a failed submission has no score, so nothing "
                           "was imported"),
    ("333489-smoke-failed.json", "333489-smoke-failed.json (submission 333489): it failed in the grader's smoke "
                                 "test, before any MLP was scored: FLOPSCOPE_SERVER_ERROR (the record's own error "
                                 "is empty); a failed submission has no score, so nothing was imported"),
])
def test_a_failed_record_is_refused_with_its_code_and_the_store_is_left_as_it_was(sqlite_store, files, name, message):
    _files.import_files([files["333364-phase2.json"]], team="alpha")
    before = _snapshot()
    with pytest.raises(_files.ImportRejected) as refused:
        _files.import_files([files[name]], team="alpha")
    assert refused.value.problems == [f"{files[name].parent}/{message}"]
    after = _snapshot()
    pd.testing.assert_frame_equal(after[0], before[0])
    pd.testing.assert_frame_equal(after[1], before[1])
    assert after[2] == before[2]


def test_a_folder_of_records_imports_all_or_nothing(sqlite_store, files, tmp_path, capsys):
    good = tmp_path / "good"
    records.write_records(good, ["333364-phase2.json", "333412-failures.json", "324969-phase1-wrapped.json"])
    assert main(["import", str(good), "--team", "alpha"]) == 0
    assert sorted(_store.submissions_frame()["submission_id"]) == ["324969", "333364", "333412"]
    mixed = tmp_path / "mixed"
    records.write_records(mixed, ["333364-phase2.json", "333489-smoke-failed.json"])
    (mixed / "333364-phase2.json").write_text(json.dumps({**_record(files, "333364-phase2.json"),
                                                          "submission_id": 333999}))
    before = _snapshot()
    capsys.readouterr()
    assert main(["import", str(mixed), "--team", "alpha"]) == 2  # an input error, as for any refused import
    assert "333489-smoke-failed.json (submission 333489): it failed in the grader's smoke test" in \
        capsys.readouterr().err
    assert _store.get_submission("333999") is None  # the good record of the folder was not written either
    pd.testing.assert_frame_equal(_snapshot()[0], before[0])


def test_the_command_line_prints_what_it_checked(sqlite_store, files, capsys):
    assert main(["import", str(files["333364-phase2.json"]), "--team", "alpha", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "valid: 1 submissions, 50 per-MLP results (dry run)" in out and "equal to the record's rounding" in out
    assert _store.submission_count() == 0
    assert main(["import", str(files["333364-phase2.json"]), "--team", "alpha"]) == 0
    out = capsys.readouterr().out
    assert "imported 1 submissions (1 added, 0 updated, 0 unchanged), 50 per-MLP results" in out
    assert "public score 5.358e-09 recomputed from its 50 scored MLPs" in out
    assert main(["import", str(files["333364-phase2.json"])]) == 2
    assert "a grader record does not name its team; pass --team NAME" in capsys.readouterr().err


@pytest.mark.parametrize(("change", "problem"), [
    (lambda r: r["config_snapshot"].update(flop_budget=1e12),
     "it was graded with flop_budget 1000000000000.0, but round v2-phase2 has B = 2199023255552"),
    (lambda r: r["config_snapshot"].update(width=512), "no round has MLPs of 512 x 16"),
    (lambda r: r["results"]["aggregates"]["public"].update(score=6.1e-9),
     "was refused"),  # the aggregate check, to the record's rounding
    (lambda r: r["results"]["per_mlp"][_first_scored(r)]["scores"].update(adjusted_final_layer_score=9e-9),
     "is not final_layer_mse x score_multiplier(C, B)"),
    (lambda r: r.update(state="running"), "the record's state is 'running', not 'completed'"),
])
def test_a_record_that_is_not_a_score_of_its_round_is_refused(sqlite_store, files, tmp_path, change, problem):
    record = _record(files, "333364-phase2.json")
    change(record)
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(record))
    with pytest.raises(_files.ImportRejected) as refused:
        _files.import_files([path], team="alpha")
    text = str(refused.value)
    if problem == "was refused":  # a stated score its MLPs do not give, beyond the rounding
        assert ("its public score 6.1e-09 is not what its 50 scored MLPs give: the mean of final_layer_mse x "
                "score_multiplier(C, B) (whestbench.budget) is 5.35787e-09, further than to the record's rounding "
                "(4 significant digits, relative 1e-03)") in text
    else:
        assert problem in text
    assert _store.submission_count() == 0


def _first_scored(record: dict) -> int:
    return next(i for i, e in enumerate(record["results"]["per_mlp"]) if "scores" in e)


def test_an_export_of_a_record_reimports_unchanged_and_checks_to_its_rounding(sqlite_store, files, tmp_path):
    """The stored rounded scores come back from the CSV export; the aggregate check holds them to the record's
    rounding (a 1e-6 check would refuse them), and only records get that tolerance."""
    _files.import_files([files["333364-phase2.json"], files["324969-phase1-wrapped.json"]], team="alpha")
    before = _snapshot()
    out, sibling = _files.export_submissions(tmp_path / "out" / "all.csv")
    assert sibling is not None
    assert _files.import_files([out]).unchanged == ["324969", "333364"]
    assert _snapshot()[2] == before[2]
    table = pd.read_csv(out, dtype=str, keep_default_na=False)
    table.loc[table["submission_id"] == "333364", "source"] = "sweep"
    table.to_csv(out, index=False)
    with pytest.raises(_files.ImportRejected, match="adjusted_score is 5.358e-09 but its per-MLP values average"):
        _files.import_files([out])


def test_rounding_tolerance_follows_the_digits_written():
    assert _records.significant_digits(5.394e-09) == 4 and _records.significant_digits(0.25) == 2
    assert _records.significant_digits(6.469470189211361e-07) == 16
    assert _records.rounding_rtol([5.394e-09, 2.1e-08, 0.2495]) == pytest.approx(1e-3)
    assert _records.rounding_rtol([6.469470189211361e-07]) == _records.AGGREGATE_RTOL


def test_the_graders_versions_price_the_board_and_a_mix_is_warned_about(sqlite_store, files, tmp_path):
    """Records graded under different flopscopes rank on one board: the board says which versions priced what."""
    from whestboard.leaderboard import _view

    _files.import_files([files["333364-phase2.json"]], team="alpha")
    assert _view.versions_warning("v2-phase2", "public", organizer=False) is None
    later = _record(files, "333412-failures.json")
    later["runtime_environment"].update(whestbench_version="0.16.2", flopscope_version="0.12.4")
    path = tmp_path / "later.json"
    path.write_text(json.dumps(later))
    _files.import_files([path], team="beta")
    warning = _view.versions_warning("v2-phase2", "public", organizer=False)
    assert warning is not None
    assert "whestbench 0.16.1 · flopscope 0.12.1: 1 submission" in warning
    assert "whestbench 0.16.2 · flopscope 0.12.4: 1 submission" in warning


def test_a_tables_times_and_per_layer_mses_are_checked_like_every_column(sqlite_store, tmp_path):
    """The per-MLP schema's new columns in a CSV: stored as given; a bad cell refused with its line, the column
    check and the row parser agreeing (every other row's record is what the row parser gives)."""
    row, mlps = helpers.submission_row("t-1", "alpha", round_tag="v2-phase2")
    mlps[0].update(per_layer_mse="[1e-10, 2.5e-9]", predict_wall_s=75.0, residual_wall_s=0.33, error_code="")
    mlps[1].update(per_layer_mse="", predict_wall_s=118.2, residual_wall_s=0.1, error_code="")
    path = helpers.write_csvs(tmp_path / "good", [(row, mlps)])
    _files.import_files([path])
    stored = _store.mlp_frame(["t-1"]).set_index("mlp_index")
    assert stored.loc[0, "per_layer_mse"] == "[1e-10,2.5e-09]" and json.loads(stored.loc[0, "per_layer_mse"]) == [
        1e-10, 2.5e-9]
    assert list(stored["predict_wall_s"]) == [75.0, 118.2] and list(stored["residual_wall_s"]) == [0.33, 0.1]
    from whestboard.leaderboard import stored_margins

    wall = next(m for m in stored_margins(stored.reset_index(), "v2-phase2").margins if m.key == "wall")
    assert (wall.worst, wall.state) == (118.2, "edge")
    for bad, problem in (
            ("[1e-10, 'x']", "per_layer_mse is \"[1e-10, 'x']\"; write a JSON array of numbers, one per layer"),
            ("[1e-10, -2]", "per_layer_mse[1] is -2; it must be at least 0"),
            ("{}", "per_layer_mse is a JSON object; write a JSON array of 1 to 64 numbers, one per layer")):
        mlps[1]["per_layer_mse"] = bad
        path = helpers.write_csvs(tmp_path / "bad", [(row, mlps)])
        with pytest.raises(_files.ImportRejected) as refused:
            _files.import_files([path])
        assert refused.value.problems == [f"{path.with_name('subs.per_mlp.csv')} line 3 (submission_id 't-1'): "
                                          f"{problem}"]
