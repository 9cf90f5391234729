"""Baking: resumable after a kill, never recomputing or losing a finished MLP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from whestboard.cli import main
from whestboard.data import _compact
from whestboard.data._bake import BakeError, bake, plan_from_args
from whestboard.data._datasets import open_dataset

REPO = Path(__file__).resolve().parents[2]
SEEDS = "11,22,33,44,55,66,77,88"


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "whestboard", *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _bake_process(preloaded, out: Path):
    """``python -m whestboard bake`` in a process of its own (forked: tests/preloaded.py), not waited for."""
    return preloaded.start("whestboard", *_bake_args(out))


def _bake_here(out: Path) -> int:
    """The same bake in this process: a reference to compare a multi-process bake with."""
    return main(_bake_args(out))


def _bake_args(out: Path) -> list[str]:
    """Eight MLPs of 40,000 samples (two whole chunks and a partial one), about 0.08 s of CPU each: a kill
    polled for every 5 ms lands with the other seven to go, and every MLP is compared bit for bit."""
    return ["bake", "--width", "64", "--depth", "4", "--samples", "40000", "--seeds", SEEDS,
            "--out", str(out), "--quiet"]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """One uninterrupted bake in this process, the reference both multi-process bakes are compared with."""
    out = tmp_path_factory.mktemp("uninterrupted") / "whole"
    assert _bake_here(out) == 0
    return out


def test_killed_bake_resumes_to_the_uninterrupted_result(tmp_path, whole, preloaded):
    resumed = tmp_path / "resumed"
    proc = _bake_process(preloaded, resumed)
    deadline = time.time() + 120
    while not _compact.baked_indices(resumed) and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    kept = {i: os.stat(_compact.mlp_path(resumed, i)).st_mtime_ns for i in _compact.baked_indices(resumed)}
    assert 0 < len(kept) < 8, "the kill should land mid-bake"

    assert _bake_process(preloaded, resumed).wait(timeout=300) == 0
    for i, mtime in kept.items():  # finished MLPs were not recomputed
        assert os.stat(_compact.mlp_path(resumed, i)).st_mtime_ns == mtime
    a, b = open_dataset(whole), open_dataset(resumed)
    assert a.indices == b.indices == list(range(8))
    for i in a.indices:
        np.testing.assert_array_equal(a.truth(i)[0], b.truth(i)[0])
        assert a.truth(i)[1] == b.truth(i)[1]
        assert a.mlp_name(i) == b.mlp_name(i)
    assert not list((resumed / _compact.MLP_DIR).glob("*.tmp"))


def test_resume_refuses_different_arguments(tmp_path):
    out = tmp_path / "ds"
    plan = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=2, n_samples=100, seeds=None)
    bake(out, plan, show_progress=False)
    other = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=2, n_samples=200, seeds=None)
    with pytest.raises(BakeError, match="different n_samples"):
        bake(out, other, show_progress=False)


def test_round_sets_the_shape_and_fresh_seeds_are_distinct():
    plan = plan_from_args(round_tag="v2-phase2", width=None, depth=None, n_mlps=5, n_samples=10, seeds=None)
    assert (plan.width, plan.depth) == (1024, 16)
    assert len(set(plan.mlp_seeds)) == 5


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(round_tag=None, width=None, depth=None, n_mlps=2, n_samples=10, seeds=None), "--round"),
        (dict(round_tag="v1-warmup", width=None, depth=None, n_mlps=None, n_samples=10, seeds=None), "--n-mlps"),
        (dict(round_tag="v1-warmup", width=None, depth=None, n_mlps=3, n_samples=10, seeds=[1, 2]), "disagrees"),
        (dict(round_tag="v1-warmup", width=None, depth=None, n_mlps=None, n_samples=10, seeds=[1, 1]), "distinct"),
        (dict(round_tag="v1-warmup", width=None, depth=None, n_mlps=2, n_samples=0, seeds=None), "positive"),
    ],
)
def test_bad_arguments_say_what_to_change(kwargs, message):
    with pytest.raises(BakeError, match=message):
        plan_from_args(**kwargs)


def test_cli_reports_errors_without_traceback(tmp_path):
    proc = _cli("bake", "--round", "v1-warmup", "--samples", "10", "--out", str(tmp_path / "x"))
    _out, err = proc.communicate(timeout=180)
    assert proc.returncode == 2
    assert err.strip().startswith("error:") and "Traceback" not in err


def test_two_bakes_share_one_dataset(tmp_path, whole, preloaded):
    """Two processes on one folder split the MLPs between them and agree with a single bake."""
    shared = tmp_path / "shared"
    procs = [_bake_process(preloaded, shared) for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    a, b = open_dataset(shared), open_dataset(whole)
    assert a.indices == b.indices == list(range(8))
    for i in a.indices:
        np.testing.assert_array_equal(a.truth(i)[0], b.truth(i)[0])
    assert not list((shared / _compact.MLP_DIR).glob("*.claim"))


def test_stale_claim_of_a_dead_process_is_taken_over(tmp_path):
    from whestboard.data._bake import claim

    plan = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=2, n_samples=64, seeds=None)
    out = tmp_path / "ds"
    bake(out, plan, show_progress=False)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = _compact.mlp_path(out, 0).with_suffix(".claim")
    stale.write_text(f"{dead.pid}@{__import__('socket').gethostname()}")
    with claim(out, 0) as mine:
        assert mine
    with claim(out, 1) as first, claim(out, 1) as second:
        assert first and not second
