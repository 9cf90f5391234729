"""Band storage: resumable per MLP, atomic files, found again by the app, and the CLI around it."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from whestbench.budget import mc_flops_per_sample

from whestboard.band import _folder
from whestboard.band._baselines import BASELINE_LABELS, compute_baselines, load_baselines, unreadable_files
from whestboard.band._folder import BandFileUnreadable, compute_band, load_band, mlp_file
from whestboard.band._measure import BandError
from whestboard.band._view import convergence_view
from whestboard.cli import main as cli_main
from whestboard.data import bake, open_dataset, plan_from_args
from whestboard.scoring import RunRequest, execute, resolve_estimator, rulebook_for

REPO = Path(__file__).resolve().parents[2]
WIDTH, DEPTH = 32, 2
SEEDS = [5, 6, 7, 8]
PER_SAMPLE = mc_flops_per_sample(WIDTH, DEPTH, dtype_aware_billing=True)
BUDGET = PER_SAMPLE * 20_000


def _bake(path: Path, seeds=SEEDS, n_samples=4096) -> Path:
    bake(path, plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=n_samples,
                              seeds=seeds), explicit_seeds=True, show_progress=False)
    return path


@pytest.fixture()
def dataset(tmp_path):
    return open_dataset(_bake(tmp_path / "ds"))


@pytest.fixture(scope="module")
def pristine_band(tmp_path_factory) -> Path:
    """The dataset with its band beside it, measured once (one job) for the tests that start from a band."""
    path = _bake(tmp_path_factory.mktemp("banded") / "ds")
    compute_band(open_dataset(path), budget=BUDGET, jobs=1, show_progress=False)
    return path


@pytest.fixture()
def banded(pristine_band, tmp_path):
    """This test's own copy of the dataset and its band (file times kept), to damage, resume or redo."""
    return open_dataset(shutil.copytree(pristine_band, tmp_path / pristine_band.name))


@pytest.fixture(scope="module")
def pristine_baselines(pristine_band, tmp_path_factory) -> tuple[Path, dict, list]:
    """Every baseline scored once beside a copy of the band: the folder, what ``compute_baselines``
    returned and the progress it reported."""
    path = shutil.copytree(pristine_band, tmp_path_factory.mktemp("baselines") / pristine_band.name)
    seen = []
    results = compute_baselines(open_dataset(path), budget=BUDGET, directory=path / "band",
                                on_progress=lambda kind, done, total: seen.append((kind, done, total)))
    return path, results, seen


@pytest.fixture()
def with_baselines(pristine_baselines, tmp_path):
    """This test's own copy of the dataset, its band and its baseline files."""
    path = pristine_baselines[0]
    return open_dataset(shutil.copytree(path, tmp_path / path.name))


def test_band_is_stored_beside_the_dataset_and_loaded_back(dataset):
    report = compute_band(dataset, budget=BUDGET, jobs=2, show_progress=False)
    assert report.directory == Path(dataset.info.path) / "band"
    assert len(report.computed) == 4 and report.skipped == 0
    manifest = json.loads((report.directory / "band.json").read_text())
    assert manifest["plan"]["checkpoints"] == list(report.plan.checkpoints)
    assert manifest["stream"].startswith("numpy default_rng(SeedSequence(mlp_seed).spawn(4)[3])")
    assert manifest["plan"]["n_at_budget"] == 20_000 and manifest["whestbench_version"]
    band = load_band(dataset)
    assert band.complete and band.indices == [0, 1, 2, 3]
    for stored, fresh in zip(band.mlps, report.computed, strict=True):
        np.testing.assert_array_equal(stored.per_layer_mse_raw, fresh.per_layer_mse_raw)
        assert stored.avg_variance == dataset.truth(stored.index)[1]
        assert list(stored.flops) == [PER_SAMPLE * n for n in stored.n]
    assert not list((report.directory / "mlps").glob("*.tmp"))


def test_resume_recomputes_only_missing_mlps_and_reproduces_them_bit_for_bit(banded):
    directory = Path(banded.info.path) / "band"  # measured with one job
    kept = {i: os.stat(mlp_file(directory, i)).st_mtime_ns for i in (0, 1, 3)}
    removed = json.loads(mlp_file(directory, 2).read_text())
    mlp_file(directory, 2).unlink()
    again = compute_band(banded, budget=BUDGET, jobs=2, show_progress=False)
    assert [b.index for b in again.computed] == [2] and again.skipped == 3
    for i, mtime in kept.items():
        assert os.stat(mlp_file(directory, i)).st_mtime_ns == mtime
    redone = json.loads(mlp_file(directory, 2).read_text())
    assert redone["per_layer_mse_raw"] == removed["per_layer_mse_raw"]  # one BLAS thread: same bits, any --jobs


def test_other_settings_are_refused_unless_restarted(banded):
    with pytest.raises(BandError, match="--restart"):
        compute_band(banded, budget=BUDGET, max_budget_multiple=2, show_progress=False)
    report = compute_band(banded, budget=BUDGET, max_budget_multiple=2, restart=True, show_progress=False)
    assert len(report.computed) == 4
    assert load_band(banded).plan.max_budget_multiple == 2


def test_a_file_for_another_reference_is_stale_and_recomputed(banded):
    directory = Path(banded.info.path) / "band"
    path = mlp_file(directory, 1)
    data = json.loads(path.read_text())
    data["reference_sha256"] = "0" * 64
    path.write_text(json.dumps(data))
    band = load_band(banded)
    assert band.stale == [1] and band.indices == [0, 2, 3] and not band.complete
    again = compute_band(banded, budget=BUDGET, show_progress=False)
    assert [b.index for b in again.computed] == [1]


def test_read_only_datasets_get_their_band_in_the_state_folder(dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setattr(_folder.os, "access", lambda path, mode: False)
    report = compute_band(dataset, budget=BUDGET, show_progress=False)
    assert report.directory.parent == tmp_path / "state" / "bands"
    assert report.directory.name.startswith("ds-")
    assert load_band(dataset).directory == report.directory


def test_baselines_are_the_runs_modules_numbers_and_resume_per_mlp(pristine_baselines, with_baselines):
    _scored, results, seen = pristine_baselines
    dataset = with_baselines
    directory = Path(dataset.info.path) / "band"
    assert set(results) == set(BASELINE_LABELS) and seen[-1] == (list(BASELINE_LABELS)[-1], 4, 4)
    request = RunRequest(dataset=dataset, indices=[0, 1, 2, 3], estimator=resolve_estimator("cov"),
                         rulebook=rulebook_for(None, BUDGET))
    direct = execute(request).report["results"]["per_mlp"]
    for mine, theirs in zip(results["cov"].per_mlp, direct, strict=True):
        assert mine["final_layer_mse"] == theirs["final_layer_mse"]
        assert mine["flops_used"] == theirs["flops_used"]
    summary = results["cov"].summary("final")
    assert summary["mean"] == pytest.approx(np.mean([e["final_layer_mse"] for e in direct]), rel=1e-12)
    # resumable: drop one MLP from the file, only it is scored again
    path = directory / "baselines" / "mean.json"
    data = json.loads(path.read_text())
    data["per_mlp"] = data["per_mlp"][:3]
    path.write_text(json.dumps(data))
    resumed = []
    compute_baselines(dataset, budget=BUDGET, directory=directory,
                      on_progress=lambda kind, done, total: resumed.append((kind, done, total)))
    assert resumed == [("mean", 1, 1)]
    assert len(load_baselines(dataset)["mean"].per_mlp) == 4


def test_cli_band_computes_resumes_and_reports_user_errors(tmp_path, capsys):
    path = _bake(tmp_path / "cli-ds", seeds=[1, 2])
    assert cli_main(["band", "--dataset", str(path), "--budget", str(BUDGET), "--quiet", "--no-baselines"]) == 0
    out = capsys.readouterr().out
    assert "0 MLPs already stored, 2 computed" in out and "N at budget = 20,000" in out
    assert cli_main(["band", "--dataset", str(path), "--budget", str(BUDGET), "--quiet", "--no-baselines"]) == 0
    assert "2 MLPs already stored, 0 computed" in capsys.readouterr().out
    assert cli_main(["band", "--dataset", str(path), "--quiet"]) == 2
    assert "not a round's shape; give --budget" in capsys.readouterr().err
    assert cli_main(["band", "--dataset", str(tmp_path / "missing"), "--quiet"]) == 2
    assert "no such dataset directory" in capsys.readouterr().err
    assert cli_main(["band", "--dataset", str(path), "--budget", str(BUDGET), "--max-budget-multiple", "100"]) == 2
    assert "between 1" in capsys.readouterr().err


def test_a_killed_band_resumes_without_recomputing_finished_mlps(tmp_path, preloaded):
    """``python -m whestboard band`` killed mid-run, then run again (each its own process, forked:
    tests/preloaded.py).

    The kill lands within milliseconds of the first MLP file (polled every 5 ms); an MLP at this budget
    (200,000 samples, four times the budget's 50,000) takes about 0.12 s of CPU, so the other five leave
    0.6 s for it to land mid-run. What is kept and redone does not depend on the sample count."""
    path = _bake(tmp_path / "kill-ds", seeds=[11, 12, 13, 14, 15, 16])
    args = ["band", "--dataset", str(path), "--budget", str(PER_SAMPLE * 50_000), "--jobs", "1", "--quiet",
            "--no-baselines"]
    proc = preloaded.start("whestboard", *args)
    folder = path / "band" / "mlps"
    deadline = time.time() + 120
    while not list(folder.glob("*.json")) and time.time() < deadline:
        time.sleep(0.005)
    proc.kill()
    proc.wait()
    kept = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}
    assert 0 < len(kept) < 6, "the kill should land mid-run"
    assert preloaded.start("whestboard", *args).wait(timeout=300) == 0
    assert len(list(folder.glob("*.json"))) == 6
    for name, mtime in kept.items():
        assert (folder / name).stat().st_mtime_ns == mtime
    assert not list(folder.glob("*.tmp"))


# -- damaged band files: named as unreadable, left out, recomputed ------------------------


def _truncate(path: Path) -> None:
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"garbage{", "JSONDecodeError: Expecting value"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b"\xff\xfe\x00", "UnicodeDecodeError"),
        (json.dumps({"format": "whestboard-band", "format_version": 1}).encode(), "its plan cannot be read (KeyError"),
        (json.dumps({"format": "something else"}).encode(), "not a band manifest"),
    ],
    ids=["garbage", "not-an-object", "not-text", "no-plan", "other-format"],
)
def test_an_unreadable_manifest_is_named_and_the_band_command_rewrites_it(banded, content, reason):
    directory = Path(banded.info.path) / "band"
    manifest = directory / "band.json"
    plan = json.loads(manifest.read_text())["plan"]
    folder = directory / "mlps"
    kept = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}
    manifest.write_bytes(content)
    with pytest.raises(BandFileUnreadable) as caught:
        load_band(banded)
    message = str(caught.value)
    assert message.startswith(f"{manifest} is unreadable (") and reason in message
    assert f"Re-run `python -m whestboard band --dataset {banded.info.path}` to rewrite it" in message
    assert caught.value.path == manifest and reason in caught.value.reason

    again = compute_band(banded, budget=BUDGET, show_progress=False)  # what the message says to run
    assert again.computed == [] and again.skipped == 4
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")} == kept
    assert json.loads(manifest.read_text())["plan"] == plan
    assert load_band(banded).complete


def test_an_oversized_band_file_is_refused_before_it_is_parsed(banded, monkeypatch):
    directory = Path(banded.info.path) / "band"
    monkeypatch.setattr(_folder, "MAX_FILE_BYTES", 64)
    with pytest.raises(BandFileUnreadable, match="bytes, more than any band file \\(64\\)"):
        load_band(banded)
    assert (directory / "band.json").stat().st_size > 64


@pytest.mark.parametrize(
    "mangle, reason",
    [
        (lambda text: text[: len(text) // 2], "JSONDecodeError"),
        (lambda text: json.dumps({**json.loads(text), "index": 2}), "holds the band of MLP 2, not of MLP 1"),
        (lambda text: json.dumps({**json.loads(text), "per_layer_mse_raw": [[0.1]]}), "arrays of mismatched shapes"),
        (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "n"}), "KeyError: 'n'"),
        (lambda text: json.dumps({**json.loads(text), "avg_variance": "NaN"}), "non-finite MSE or variance"),
    ],
    ids=["truncated", "another-mlp", "mismatched-shapes", "missing-field", "nan"],
)
def test_an_unreadable_mlp_band_file_is_reported_as_unreadable_and_recomputed(banded, private_state, mangle, reason):
    directory = Path(banded.info.path) / "band"
    path = mlp_file(directory, 1)
    good = path.read_text()
    path.write_text(mangle(good))
    band = load_band(banded)
    assert band.stale == [] and list(band.unreadable) == [1]
    assert band.unreadable[1].startswith(f"{path}: ") and reason in band.unreadable[1]
    assert band.indices == [0, 2, 3] and not band.complete

    view = convergence_view(banded, runs=[])
    notes = " ".join(view.notes)
    assert f"1 stored band file(s) are unreadable and left out: {band.unreadable[1]}" in notes
    assert f"Re-run `python -m whestboard band --dataset {banded.info.path}` to recompute them" in notes
    assert "another reference" not in notes
    assert view.has_band and view.band_n_mlps == 3  # the other MLPs' band is still drawn

    again = compute_band(banded, budget=BUDGET, show_progress=False)
    assert [b.index for b in again.computed] == [1]
    assert json.loads(path.read_text())["per_layer_mse_raw"] == json.loads(good)["per_layer_mse_raw"]
    assert load_band(banded).complete


def test_a_file_for_another_reference_is_still_reported_as_such(banded, private_state):
    directory = Path(banded.info.path) / "band"
    path = mlp_file(directory, 3)
    path.write_text(json.dumps({**json.loads(path.read_text()), "reference_sha256": "0" * 64}))
    notes = " ".join(convergence_view(banded, runs=[]).notes)
    assert "1 stored band file(s) were measured against another reference" in notes and "unreadable" not in notes


def test_a_damaged_dataset_mlp_is_left_out_of_the_band_and_said_so(banded, private_state):
    directory = Path(banded.info.path) / "band"
    record = Path(banded.info.path) / "mlps" / "00002.npz"
    _truncate(record)
    damaged = open_dataset(banded.info.path)
    band = load_band(damaged)
    assert band.indices == [0, 1, 3] and band.complete and band.stale == [] and band.unreadable == {}
    again = compute_band(damaged, budget=BUDGET, show_progress=False)
    assert again.computed == [] and again.skipped == 3
    assert mlp_file(directory, 2).is_file()  # the band file of the damaged MLP is kept, not rewritten

    view = convergence_view(damaged, runs=[])
    assert view.n_mlps == 3 and view.band_n_mlps == 3
    assert view.sigma2["final"] == pytest.approx(np.mean([banded.truth(i)[1] for i in (0, 1, 3)]), rel=1e-15)
    notes = " ".join(view.notes)
    assert f"{record}: the archive is truncated or corrupt (BadZipFile" in notes and "3 of 4 MLPs" in notes
    assert "python -m whestboard bake" in notes


def test_an_unreadable_baseline_file_is_ignored_named_and_rewritten(with_baselines, private_state):
    banded = with_baselines
    directory = Path(banded.info.path) / "band"
    path = directory / "baselines" / "mean.json"
    path.write_text('{"per_mlp": [{"mlp_index": 0, "final_layer_mse": "lots"}]}')
    assert set(load_baselines(banded)) == set(BASELINE_LABELS) - {"mean"}
    assert list(unreadable_files(banded)) == [str(path)]
    assert "per_mlp is not a list of entries" in unreadable_files(banded)[str(path)]
    notes = " ".join(convergence_view(banded, runs=[]).notes)
    assert f"Baseline file(s) unreadable and ignored: {path}: per_mlp is not a list" in notes
    seen = []
    compute_baselines(banded, budget=BUDGET, directory=directory,
                      on_progress=lambda kind, done, total: seen.append((kind, done, total)))
    assert seen[-1] == ("mean", 4, 4) and {kind for kind, _, _ in seen} == {"mean"}
    assert set(load_baselines(banded)) == set(BASELINE_LABELS) and unreadable_files(banded) == {}
