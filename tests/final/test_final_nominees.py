"""A final nominating a stored submission by id, and what the final's rows leave of the public board.

A submission made from an upload run (its ``run_id`` names the run record whose package the artifact
store keeps) is nominated as ``TEAM=submission:ID``: the final reruns that package and attaches the
rerun split to the stored submission. A team nominated by file gets a row of its own holding only
the rerun split: no count, field, timeline, ranking or public export of the board may show it.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from whestbench.estimators import CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.scoring import evaluate_estimator, make_contest

from tests.conftest import state_built_once
from tests.final.participants import MEAN, SMALL_ROUND, register_round, small_round_config, write_packages
from whestboard.cli import main
from whestboard.final import SEED_PROTOCOL, FinalError, final_submission_id, nominee
from whestboard.leaderboard import (
    FINAL_SOURCE,
    MLPResult,
    Submission,
    board,
    get_submission,
    iter_mlp_results_csv,
    iter_submissions_csv,
    load_final_record,
    mlp_frame,
    round_counts,
    round_field,
    rounds_present,
    submission_count,
    submissions_frame,
    timeline_field,
    upsert,
)
from whestboard.rules import get_round, library_versions
from whestboard.sandbox import ingest_upload
from whestboard.scoring import get_run, job_spec, rulebook_for, run_upload_job
from whestboard.store import reset_engines

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning")]

SEED, N, K = 20261203, 4, 20_000
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.fixture()
def small_round(monkeypatch, private_state):
    register_round(monkeypatch, small_round_config())
    return get_round(SMALL_ROUND)


def _upload_run() -> tuple[str, str]:
    """(run id, upload sha256): the mean-propagation file uploaded and scored by the upload job."""
    upload = ingest_upload(MEAN.encode(), "estimator.py")
    ctx = SimpleNamespace(job=SimpleNamespace(spec=job_spec(upload.sha256, "v1-warmup", "0:2", team="mean")),
                          report=lambda **_: None, should_cancel=lambda: False)
    result = run_upload_job(ctx)
    assert result["ok"], result.get("error")
    return result["run_id"], upload.sha256


@pytest.fixture(scope="module")
def upload_run_store(tmp_path_factory) -> tuple[Path, str, str]:
    """(state folder, run id, upload sha256) of a store holding one upload job's run, made once for the module.

    The upload job (contract check, sandboxed scoring, both baselines) costs more than the rest of a test;
    its store comes out the same every time, so it is made once and each test takes a copy of its own."""
    state, (run_id, sha) = state_built_once(tmp_path_factory, "upload-run", _upload_run)
    return state, run_id, sha


@pytest.fixture()
def upload_run(upload_run_store, private_state) -> tuple[str, str]:
    """(run id, upload sha256): this test's store is a copy of the one the upload job scored the mean file in."""
    state, run_id, sha = upload_run_store
    reset_engines()
    shutil.copytree(state, private_state, dirs_exist_ok=True)
    return run_id, sha


def _stored_from_run(sid: str, team: str, run_id: str, *, at: datetime = T0, nominated: bool = False) -> None:
    """A public submission of the small round made from the run: its numbers, its per-MLP results, its run id."""
    report = get_run(run_id)
    results = report["results"]
    per_mlp = results["per_mlp"]
    versions = library_versions()
    upsert([Submission(
        submission_id=sid, team=team, round=SMALL_ROUND, submitted_at=at, status="graded",
        whestbench_version=versions["whestbench_version"], flopscope_version=versions.get("flopscope_version"),
        mean_flops_used=sum(float(e["flops_used"]) for e in per_mlp) / len(per_mlp),
        final_layer_mse=results["final_layer_mse"], adjusted_score=results["adjusted_final_layer_score"],
        mean_multiplier=results["mean_score_multiplier"], n_failed_mlps=results["n_failed_mlps"],
        n_mlps=len(per_mlp), estimator=report["estimator"]["label"], source="upload", run_id=run_id,
        nominated=nominated)],
        [MLPResult(submission_id=sid, mlp_index=int(e["mlp_index"]), final_layer_mse=float(e["final_layer_mse"]),
                   adjusted_score=float(e["adjusted_final_layer_score"]), flops_used=float(e["flops_used"]),
                   avg_variance=e.get("avg_variance")) for e in per_mlp])


def _final(argv_nominees: list[str], capsys) -> dict:
    argv = ["final", "--round", SMALL_ROUND, "--suite-seed", str(SEED), "--n-mlps", str(N),
            "--truth-samples", str(K), "--max-extra-mlps", "0", "--json"]
    for text in argv_nominees:
        argv += ["--submission", text]
    assert main(argv) == 0, capsys.readouterr().out
    return json.loads(capsys.readouterr().out)


def _whestbench_suite():
    spec = rulebook_for(SMALL_ROUND).contest_spec(width=16, depth=3, n_mlps=N, n_samples=K)
    spec.seed = SEED
    return make_contest(spec)


def test_a_submission_made_from_an_upload_run_is_nominated_by_id(small_round, upload_run, tmp_path, capsys):
    run_id, sha = upload_run
    _stored_from_run("mean-1", "mean", run_id)
    assert nominee("mean=submission:mean-1").spec == f"upload:{sha}"  # the run's package, not the label
    packages = write_packages(tmp_path / "packages")
    printed = _final(["mean=submission:mean-1", f"covariance={packages['covariance']}"], capsys)

    # the rerun split is attached to the stored submission; its public results are untouched
    rerun = mlp_frame(["mean-1"], splits=["rerun"])
    assert sorted(rerun["mlp_index"]) == list(range(N))
    assert len(mlp_frame(["mean-1"], splits=["public"])) == 2
    assert get_submission(final_submission_id(SMALL_ROUND, "mean")) is None
    assert get_submission("mean-1").nominated  # the rerun board ranks nominated submissions only
    record = load_final_record(SMALL_ROUND)
    assert {"team": "mean", "spec": f"upload:{sha}", "submission_id": "mean-1"} in record["nominees"]

    # and it scores what whestbench's evaluate_estimator gives the same estimator on the same suite
    data = _whestbench_suite()
    rows = {row["team"]: row for row in printed["standings"]}
    official = {team: evaluate_estimator(estimator, data) for team, estimator in (
        ("mean", MeanPropagationEstimator()), ("covariance", CovariancePropagationEstimator()))}
    for team, results in official.items():
        assert rows[team]["score"] == pytest.approx(results["adjusted_final_layer_score"], rel=1e-9)
    assert rerun["adjusted_score"].tolist() == pytest.approx(
        [m["adjusted_final_layer_score"] for m in official["mean"]["per_mlp"]], rel=1e-9)

    # the team nominated by file has a row of its own, priced like any submission
    own = get_submission(final_submission_id(SMALL_ROUND, "covariance"))
    versions = library_versions()
    assert own.source == FINAL_SOURCE and own.adjusted_score is None
    assert (own.whestbench_version, own.flopscope_version) == (versions["whestbench_version"],
                                                               versions.get("flopscope_version"))
    assert own.seed_protocol and own.seed_protocol in SEED_PROTOCOL


def test_a_stored_submission_without_a_package_is_refused_naming_what_to_nominate(small_round, capsys):
    upsert([Submission(submission_id="imported-1", team="alpha", round=SMALL_ROUND, submitted_at=T0,
                       status="graded", whestbench_version="0.16.2", adjusted_score=1e-4, final_layer_mse=1e-4,
                       mean_flops_used=1.0, mean_multiplier=1.0, n_failed_mlps=0, estimator="alpha.py")])
    upsert([Submission(submission_id="gone-1", team="beta", round=SMALL_ROUND, submitted_at=T0, status="graded",
                       whestbench_version="0.16.2", adjusted_score=1e-4, final_layer_mse=1e-4, mean_flops_used=1.0,
                       mean_multiplier=1.0, n_failed_mlps=0, run_id="no-such-run", source="upload")])
    with pytest.raises(FinalError, match=r"no package for submission imported-1: it was imported from a file .*"
                                         r"nominate its package instead: alpha=PATH"):
        nominee("alpha=submission:imported-1")
    with pytest.raises(FinalError, match=r"no package for submission gone-1: the run it was scored as gives no package "
                                         r"\(no run 'no-such-run'.*"
                                         r"nominate its package instead: beta=PATH"):
        nominee("beta=submission:gone-1")
    argv = ["final", "--round", SMALL_ROUND, "--suite-seed", "1", "--n-mlps", "2",
            "--submission", "alpha=submission:imported-1", "--json"]
    assert main(argv) == 2
    assert "alpha=PATH" in json.loads(capsys.readouterr().out)["error"]["message"]
    assert load_final_record(SMALL_ROUND) is None


def test_another_teams_submission_is_refused_naming_both_teams_and_what_to_write(small_round, upload_run, capsys):
    """Each team designates one submission of its own: ``TEAM=submission:ID`` of another team's is refused
    before anything runs, the sentence naming the stored team, the team written and the line to write."""
    run_id, _sha = upload_run
    _stored_from_run("mean-1", "mean", run_id)
    with pytest.raises(FinalError) as refused:
        nominee("alpha=submission:mean-1")
    said = str(refused.value)
    assert "is team 'mean''s, not 'alpha''s" in said and "write mean=submission:mean-1" in said
    assert nominee("mean=submission:mean-1").submission_id == "mean-1"  # its own team's nomination is taken
    argv = ["final", "--round", SMALL_ROUND, "--suite-seed", "1", "--n-mlps", "2",
            "--submission", "alpha=submission:mean-1", "--json"]
    assert main(argv) == 2
    assert "write mean=submission:mean-1" in json.loads(capsys.readouterr().out)["error"]["message"]
    assert load_final_record(SMALL_ROUND) is None and not get_submission("mean-1").nominated


def _public_state(team: str) -> dict:
    """Everything the public board shows or counts of the small round (and the store's public exports)."""
    view = board(SMALL_ROUND, "public", organizer=False, team=team)
    return {
        "per_team": view.per_team, "summary": view.summary, "rows": view.rows, "leader": view.leader_id,
        "ties": view.ties, "flagged": view.flagged, "priced": view.priced, "teams": view.teams,
        "team_unknown": view.team_unknown, "table": view.table,
        "counts": round_counts(SMALL_ROUND), "n": submission_count(), "rounds": rounds_present(),
        "field": round_field(SMALL_ROUND), "timeline": timeline_field(),
        "round_frame": submissions_frame(round_tag=SMALL_ROUND), "team_frame": submissions_frame(team=team),
        "export": "".join(iter_submissions_csv()), "public_mlps": "".join(iter_mlp_results_csv(splits=("public",))),
    }


def test_a_finals_rows_leave_the_public_board_exactly_as_it_was(small_round, upload_run, tmp_path, capsys):
    run_id, _sha = upload_run
    _stored_from_run("mean-1", "mean", run_id, nominated=True)  # designated by its team before the final
    _stored_from_run("mean-2", "other", run_id, at=T0.replace(hour=13))
    packages = write_packages(tmp_path / "packages")
    before = {team: _public_state(team) for team in ("mean", "covariance")}
    assert before["covariance"]["team_unknown"]
    _final(["mean=submission:mean-1", f"covariance={packages['covariance']}", f"flaky={packages['flaky']}"], capsys)
    for team in ("mean", "covariance"):
        after = _public_state(team)
        assert after.keys() == before[team].keys()
        for key, was in before[team].items():
            if isinstance(was, pd.DataFrame):
                pd.testing.assert_frame_equal(after[key], was, obj=key)
            else:
                assert after[key] == was, key
    # the rerun split's board (the organizer's) does show them
    rerun = board(SMALL_ROUND, "rerun", organizer=True)
    assert set(rerun.table["submission_id"]) == {"mean-1", final_submission_id(SMALL_ROUND, "covariance"),
                                                  final_submission_id(SMALL_ROUND, "flaky")}


def test_a_store_that_had_a_final_round_trips_through_export_and_import(small_round, upload_run, tmp_path, capsys,
                                                                         monkeypatch):
    """The organizer's export keeps the final's own rows and every rerun result; importing it into an
    empty store gives the same rows and results back, still off the public board."""
    from whestboard.leaderboard import export_submissions, import_files

    run_id, _sha = upload_run
    _stored_from_run("mean-1", "mean", run_id, nominated=True)
    packages = write_packages(tmp_path / "packages")
    _final(["mean=submission:mean-1", f"covariance={packages['covariance']}"], capsys)
    ids = ["mean-1", final_submission_id(SMALL_ROUND, "covariance")]

    def stored() -> tuple[pd.DataFrame, pd.DataFrame]:
        rows = submissions_frame(ids=ids)
        mlps = mlp_frame(ids, splits=["public", "rerun"]).sort_values(["submission_id", "split", "mlp_index"],
                                                                       ignore_index=True)
        return rows, mlps

    rows, mlps = stored()
    assert set(mlps["split"]) == {"public", "rerun"} and (rows["source"] == FINAL_SOURCE).sum() == 1
    public_before = _public_state("mean")
    out, sibling = export_submissions(tmp_path / "export" / "all.csv")
    assert sibling is not None

    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "elsewhere"))
    reset_engines()
    assert submission_count() == 0
    report = import_files([out, sibling])  # raises, listing the problems, when it refuses anything
    assert sorted(report.inserted) == sorted(ids)
    rows_back, mlps_back = stored()
    pd.testing.assert_frame_equal(rows_back, rows)
    pd.testing.assert_frame_equal(mlps_back, mlps)
    public_after = _public_state("mean")  # the final's own row stays off the public board and its exports
    for key, was in public_before.items():
        if isinstance(was, pd.DataFrame):
            pd.testing.assert_frame_equal(public_after[key], was, obj=key)
        else:
            assert public_after[key] == was, key
