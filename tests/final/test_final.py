"""The final evaluation end to end on a small round, against whestbench's own functions as the oracle.

Four real packages (mean propagation as a lone file, covariance propagation as a folder, the same
folder as a ``whest package`` tarball under another team, and one that raises on some MLPs) are rerun
in the sandbox on a suite baked from one seed. The suite must be ``make_contest``'s for that seed, the
ranks of the separable teams ``evaluate_estimator``'s, the copies a close group that extra MLPs
(scored for them alone) cannot separate, and an interrupted final must resume without rescoring.
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from whestbench.estimators import CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.scoring import evaluate_estimator, make_contest

from tests.final.participants import (
    FLAKY,
    MEAN,
    SMALL_ROUND,
    register_round,
    small_round_config,
    write_packages,
)
from whestboard.cli import main
from whestboard.final import (
    PAIR_RESULTS,
    FinalRequest,
    FinalSuite,
    Nominee,
    final_submission_id,
    run_final,
    standings_text,
)
from whestboard.final._final import floor_warning
from whestboard.leaderboard import load_final_record, mlp_frame
from whestboard.rules import get_round
from whestboard.scoring import rulebook_for
from whestboard.store import blob_keys, blob_meta

pytestmark = pytest.mark.slow

SEED, N, K, EXTRA = 20261202, 16, 20_000, 4
#: MLPs of the resume tests' finals: as with eight, the copies and the mean/flaky pair are each a close
#: group that takes two extra MLPs, and an interruption after 5 or 11 pairs lands inside a team's batch.
RESUME_N = 6


@pytest.fixture()
def small_round(monkeypatch, private_state):
    register_round(monkeypatch, small_round_config())
    return get_round(SMALL_ROUND)


@pytest.fixture()
def packages(tmp_path):
    return write_packages(tmp_path / "packages")


def _whestbench_suite(n: int):
    spec = rulebook_for(SMALL_ROUND).contest_spec(width=16, depth=3, n_mlps=n, n_samples=K)
    spec.seed = SEED
    return make_contest(spec)


def _flaky_class(path):
    spec = importlib.util.spec_from_file_location("flaky_participant", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Estimator


@pytest.fixture(scope="module")
def whestbench_suite():
    """whestbench's own suite for SEED (``make_contest``, N MLPs), made once for the module."""
    with pytest.MonkeyPatch.context() as patch:
        register_round(patch, small_round_config())
        return _whestbench_suite(N)


@pytest.fixture(scope="module")
def whestbench_official(whestbench_suite, tmp_path_factory) -> dict[str, dict]:
    """``evaluate_estimator``'s results on that suite for each team, made once for the module. The copies
    ship one estimator, so it is evaluated once for both."""
    flaky_file = tmp_path_factory.mktemp("oracle") / "flaky.py"
    flaky_file.write_text(FLAKY)
    covariance = evaluate_estimator(CovariancePropagationEstimator(), whestbench_suite)
    return {"covariance": covariance, "copycat": covariance,
            "mean": evaluate_estimator(MeanPropagationEstimator(), whestbench_suite),
            "flaky": evaluate_estimator(_flaky_class(flaky_file)(), whestbench_suite)}


def _stored_pairs() -> int:
    """How many (team, MLP) results the store keeps (one key each), in one query."""
    return len(blob_keys(PAIR_RESULTS))


def _scored_pairs() -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for key in blob_keys(PAIR_RESULTS):
        meta = blob_meta(PAIR_RESULTS, key)
        out.setdefault(meta["team"], set()).add(int(meta["mlp_index"]))
    return out


def test_the_suite_is_whestbenchs_for_the_seed_and_extra_mlps_continue_it(small_round, whestbench_suite):
    """The first five MLPs of whestbench's suite for the seed (the module's, of N: make_contest's MLP i
    depends on the seed and i alone) are the final's, three baked and two more extending them."""
    suite = FinalSuite(small_round, SEED, 3, K)
    suite.extend(5)
    data = whestbench_suite
    for i in range(5):
        mlp = suite.mlp(i)
        assert [np.asarray(w).tobytes() for w in mlp.weights] == [np.asarray(w).tobytes() for w in data.mlps[i].weights]
        assert mlp.seed == data.mlps[i].seed
        means, avg_variance = suite.truth(i)
        np.testing.assert_array_equal(means, np.asarray(data.all_layer_targets[i]))
        assert avg_variance == data.avg_variances[i]
    again = FinalSuite(small_round, SEED, 5, K)
    assert again.sampled == 0  # the references were kept in the store, never drawn twice


def test_final_end_to_end(small_round, packages, whestbench_suite, whestbench_official, capsys):
    argv = ["final", "--round", SMALL_ROUND, "--suite-seed", str(SEED), "--n-mlps", str(N),
            "--truth-samples", str(K), "--max-extra-mlps", str(EXTRA), "--json"]
    for team, path in packages.items():
        argv += ["--submission", f"{team}={path}"]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    record = load_final_record(SMALL_ROUND)
    assert printed["standings"] == record["standings"] and printed["tie_breaks"] == record["tie_breaks"]
    rows = {row["team"]: row for row in record["standings"]}

    # the copies are close, extra MLPs continue the suite, their results are identical: a shared rank
    (tie,) = record["tie_breaks"]
    assert sorted(tie["teams"]) == ["copycat", "covariance"]
    assert tie["p_value"] == 1.0 and tie["extra_mlps"] == EXTRA and tie["decided_by"] == "shared"
    (pair,) = tie["pairs"]
    assert pair["p_values"] == {"score": 1.0} and pair["decided_by"] == "shared" and pair["n_mlps"] == N + EXTRA
    assert pair["reason"].startswith("identical results")  # the same computation: no criterion to try
    assert rows["copycat"]["rank"] == rows["covariance"]["rank"] == 1

    # only the tied teams were rerun on the extra MLPs, each pair scored once
    extra = set(range(N, N + EXTRA))
    scored = _scored_pairs()
    assert scored["copycat"] == scored["covariance"] == set(range(N)) | extra
    assert scored["mean"] == scored["flaky"] == set(range(N))
    assert record["scorings"] == {"scored": 4 * N + 2 * EXTRA, "reused": 0}

    # the separable teams rank where whestbench's evaluate_estimator puts them on the same suite
    data, official = whestbench_suite, whestbench_official
    order = sorted(official, key=lambda t: official[t]["adjusted_final_layer_score"])
    for team in ("mean", "flaky"):
        assert rows[team]["rank"] == order.index(team) + 1
    for team, results in official.items():
        assert rows[team]["score"] == pytest.approx(results["adjusted_final_layer_score"], rel=1e-9)
        assert rows[team]["all_layer_mse"] == pytest.approx(results["all_layers_mse"], rel=1e-6)
        assert rows[team]["n_failed_mlps"] == results["n_failed_mlps"]
    assert 0 < rows["flaky"]["n_failed_mlps"] < N  # it fails on some MLPs, not all

    # the noise floor is stated, and the per-MLP scores are the base suite's
    mean_var = float(np.mean(data.avg_variances))
    assert record["noise"]["noise_floor"] == pytest.approx(mean_var / K)
    assert record["per_mlp"]["mlp_ids"] == list(range(N))
    assert record["per_mlp"]["scores"]["mean"] == pytest.approx(
        [m["adjusted_final_layer_score"] for m in official["mean"]["per_mlp"]], rel=1e-9)

    # the rerun split holds every scored pair
    frame = mlp_frame([final_submission_id(SMALL_ROUND, t) for t in packages], splits=["rerun"])
    assert len(frame) == 4 * N + 2 * EXTRA


class Interrupted(Exception):
    """What the test raises mid-final, as a crash or a Ctrl-C would stop it."""


def test_an_interrupted_final_resumes_without_rescoring(small_round, packages):
    nominees = tuple(Nominee(team, str(path)) for team, path in packages.items())
    request = FinalRequest(SMALL_ROUND, nominees, SEED + 1, RESUME_N, K, 2)
    seen = {"scored": 0}

    def stop_after(limit):
        def progress(_done, _total, label):
            if " on MLP " in label:
                seen["scored"] += 1
                if seen["scored"] == limit:
                    raise Interrupted(label)
        return progress

    with pytest.raises(Interrupted):
        run_final(request, on_progress=stop_after(11))
    assert sum(len(v) for v in _scored_pairs().values()) == 11  # kept as they finished
    assert load_final_record(SMALL_ROUND) is None
    resumed = run_final(request)
    total = sum(row["n_mlps"] + row["extra_mlps_scored"] for row in resumed["standings"])
    assert resumed["scorings"] == {"scored": total - 11, "reused": 11}
    assert sum(len(v) for v in _scored_pairs().values()) == total
    again = run_final(request)
    assert again["scorings"] == {"scored": 0, "reused": total}
    assert again["standings"] == resumed["standings"]
    report = standings_text(again)
    assert all(team in report for team in packages) and "scored 0 (submission, MLP) pairs" in report


def test_a_floor_too_coarse_for_the_best_mse_is_warned_with_the_samples_that_would_do():
    assert floor_warning(1e-7, 1e-5, 1000) is None
    warning = floor_warning(1e-6, 1e-6, 1000)
    suggested = int(warning.rsplit(" ", 1)[1].replace(",", ""))
    assert floor_warning(1e-6 * 1000 / suggested, 1e-6, suggested) is None


@pytest.mark.parametrize("argv, says", [
    (["--round", "no-such-round"], "unknown round"),
    (["--submission", "a=x.py", "--submission", "a=y.py"], "named twice: a"),
    (["--submission", "nameless.py"], "write TEAM=PATH"),
    (["--submission", "a=notes.txt"], "is not a .tar.gz"),
    (["--n-mlps", "0"], "--n-mlps 0 is outside"),
])
def test_a_final_asked_wrongly_names_what_to_change(small_round, capsys, argv, says):
    base = {"--round": SMALL_ROUND, "--suite-seed": "1", "--n-mlps": "4"}
    args = ["final"]
    for flag, value in base.items():
        if flag not in argv:
            args += [flag, value]
    args += argv if "--submission" in argv else argv + ["--submission", "a=x.py"]
    assert main(args + ["--json"]) == 2
    assert says in json.loads(capsys.readouterr().out)["error"]["message"]


KILLED_RUN = """
import sys
from tests.final.participants import small_round_config
from whestbench.budget import ROUNDS
from whestboard.rules import ALL_ROUNDS, Round
cfg = small_round_config()
ROUNDS[cfg.tag] = cfg
ALL_ROUNDS[cfg.tag] = Round(cfg)
from whestboard.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_final_killed_mid_run_resumes_where_it_stopped(small_round, packages, private_state, preloaded):
    """SIGKILL, not an exception: the job's process is gone, its row says running; the resume takes it over.

    The command is a process of its own, forked from one that imported whestboard already
    (tests/preloaded.py); its sandbox fork server and workers die with it, as they would with a killed CLI.
    """
    import os
    import time

    argv = ["final", "--round", SMALL_ROUND, "--suite-seed", str(SEED + 2), "--n-mlps", str(RESUME_N),
            "--truth-samples", str(K), "--max-extra-mlps", "2"]
    for team, path in packages.items():
        argv += ["--submission", f"{team}={path}"]
    proc = preloaded.start("python", KILLED_RUN, *argv, env=dict(os.environ, WHESTBOARD_STATE_DIR=str(private_state)))
    deadline = time.time() + 240
    while _stored_pairs() < 5 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.kill()
    proc.wait()
    kept = sum(len(v) for v in _scored_pairs().values())
    assert 5 <= kept < len(packages) * RESUME_N, "the run was killed mid-way"
    resumed = run_final(FinalRequest(SMALL_ROUND, tuple(Nominee(t, str(p)) for t, p in packages.items()),
                                     SEED + 2, RESUME_N, K, 2))
    total = sum(row["n_mlps"] + row["extra_mlps_scored"] for row in resumed["standings"])
    assert resumed["scorings"] == {"scored": total - kept, "reused": kept}
    assert sum(len(v) for v in _scored_pairs().values()) == total


COV = '''"""Covariance propagation."""
from whestbench.estimators import CovariancePropagationEstimator


class Estimator(CovariancePropagationEstimator):
    pass
'''
COV_FLAKY = '''"""Covariance propagation that raises on every MLP whose seed is odd."""
from whestbench.estimators import CovariancePropagationEstimator


class Estimator(CovariancePropagationEstimator):
    def predict(self, mlp, budget):
        if mlp.seed % 2 == 1:
            raise RuntimeError("this estimator fails on some MLPs")
        return super().predict(mlp, budget)
'''
ISSUE_SEED = 20261201


def test_the_organizers_small_phase2_final_ranks_by_score_and_shares_only_the_copies(private_state, tmp_path, capsys):
    """The command an organizer tries before the real run: 3 MLPs of Phase 2, two copies of covariance
    propagation, mean propagation (about 20x worse on every MLP) and covariance propagation failing on one
    MLP. The copies share rank 1, the 20x gap is decided on 3 MLPs, the failing team is never tied with
    another: fourth, provisional when the allowed extra MLPs cannot settle it against mean propagation."""
    files = {"alpha": COV, "beta": COV, "gamma": MEAN, "delta": COV_FLAKY}
    argv = ["final", "--round", "v2-phase2", "--suite-seed", str(ISSUE_SEED), "--n-mlps", "3",
            "--truth-samples", "16384", "--max-extra-mlps", "2", "--json"]
    for team, code in files.items():
        (tmp_path / f"{team}.py").write_text(code)
        argv += ["--submission", f"{team}={tmp_path / f'{team}.py'}"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    rows = {row["team"]: row for row in record["standings"]}
    assert [row["team"] for row in record["standings"]][2:] == ["gamma", "delta"]
    assert {t: rows[t]["rank"] for t in files} == {"alpha": 1, "beta": 1, "gamma": 3, "delta": 4}
    suite = FinalSuite(get_round("v2-phase2"), ISSUE_SEED, 3, 16384)  # its references are kept: nothing drawn
    assert rows["delta"]["n_failed_mlps"] == sum(suite.mlp(i).seed % 2 for i in range(3)) == 1
    pairs = {(p["upper"], p["lower"]): p for p in record["pairs"]}
    copies = pairs[tuple(sorted(("alpha", "beta")))]
    assert copies["decided_by"] == "shared" and copies["n_mlps"] == 5
    gap = pairs[next(k for k in pairs if k[1] == "gamma")]
    assert gap["decided_by"] == "score" and gap["n_mlps"] == 3 and gap["p_value"] < 0.05 and gap["ratio"] > 10
    failing = pairs["gamma", "delta"]
    assert failing["decided_by"] in ("score", "extra_mlps", "unresolved")
    assert rows["delta"]["provisional"] == (failing["decided_by"] == "unresolved")
    if failing["decided_by"] == "unresolved":
        assert failing["reason"].startswith(f"unresolved at {failing['n_mlps']} MLPs; about ")
    for pair in record["pairs"]:
        assert {"test", "p_value", "n_mlps", "decided_by", "reason"} <= set(pair)
