"""Participant-shaped submissions: ``score --json`` and ``whest run --json`` agree on each, field by field or code.

The corpus is what real submissions look like: a folder whose ``setup()`` reads a data file next to
``estimator.py``, a package with submodules (also as the tarball ``whest package`` writes), a numpy
import, a module that does not exist, a syntax error and a file without an estimator class. Each runs
through Whestboard's sandbox and through whestbench's own CLI on the same files; a run that fails
before scoring must carry whest's error code and message, a run that scores must equal it on every
per-MLP field that does not measure time.
"""

from __future__ import annotations

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
from whestbench.packaging import package_submission

from tests.upstream import assert_same_per_mlp, make_official
from whestboard.cli import main

BUDGET = 5_000_000
pytestmark = [pytest.mark.usefixtures("private_state"), pytest.mark.slow]

DATA_FOLDER = {
    "estimator.py": """
        import json
        from pathlib import Path

        from whestbench.estimators import MeanPropagationEstimator


        class Estimator(MeanPropagationEstimator):
            def setup(self, context):
                self.shift = json.loads((Path(__file__).parent / "corrector.json").read_text())["shift"]

            def predict(self, mlp, budget):
                return super().predict(mlp, budget) + self.shift
        """,
    "corrector.json": '{"shift": 0.0125}',
}
PACKAGE = {
    "estimator.py": """
        from whestbench.estimators import CovariancePropagationEstimator

        from tools import offsets
        from tools.scale import factor


        class Estimator(CovariancePropagationEstimator):
            def predict(self, mlp, budget):
                return super().predict(mlp, budget) * factor() + offsets.OFFSET
        """,
    "tools/__init__.py": "",
    "tools/scale.py": "def factor():\n    return 0.97\n",
    "tools/offsets.py": "OFFSET = 0.003\n",
}
NUMPY = {
    "estimator.py": """
        import numpy as _np
        from whestbench.estimators import MeanPropagationEstimator


        class Estimator(MeanPropagationEstimator):
            def predict(self, mlp, budget):
                return super().predict(mlp, budget) + float(_np.float32(0.001))
        """,
}
MISSING = {"estimator.py": "import whest\nfrom whestbench import BaseEstimator\n\n\nclass Estimator(BaseEstimator):\n"
                           "    def predict(self, mlp, budget):\n        return None\n"}
SYNTAX = {"estimator.py": "from whestbench import BaseEstimator\n\nclass Estimator(BaseEstimator)\n    pass\n"}
NO_CLASS = {"estimator.py": "from whestbench.estimators import MeanPropagationEstimator as Estimator\n"}
CORPUS = {"data-folder": DATA_FOLDER, "package": PACKAGE, "numpy": NUMPY, "missing-module": MISSING,
          "syntax-error": SYNTAX, "no-class": NO_CLASS}
V1_FLAGS = ["--lambda-flops-per-second", "1e11", "--no-residual-wall-time-limit", "--wall-time-limit", "60"]
#: Per-MLP fields that do not depend on how long anything took (v1 prices residual time into the score).
UNTIMED_V1 = ("mlp_index", "mlp_name", "flops_used", "final_layer_mse", "all_layers_mse", "per_layer_mse",
              "budget_exhausted", "time_exhausted", "error_code")


def write_folder(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return root


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("corpus") / "ds", width=16, depth=3, n_samples=2000,
                         seeds=[5, 6, 7])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("submissions")
    folders = {name: write_folder(root / name, files) for name, files in CORPUS.items()}
    lone = root / "lone"  # what the grader gets from `whest package --estimator data-folder/estimator.py`
    lone.mkdir()
    shutil.copy(folders["data-folder"] / "estimator.py", lone / "estimator.py")
    folders["lone"] = lone
    return folders


@pytest.fixture(scope="module")
def whest_reports(official, corpus, preloaded, tmp_path_factory) -> dict[str, tuple[int, dict]]:
    """``whest run --json`` on each submission's estimator.py, all started at once, each its own process
    (forked from one that imported whestbench: tests/preloaded.py)."""
    hf = tmp_path_factory.mktemp("hf")
    jobs = {name: [str(corpus[name] / "estimator.py"), "--flop-budget", str(BUDGET)] for name in corpus
            if name != "numpy"}
    jobs["numpy-v1"] = [str(corpus["numpy"] / "estimator.py"), "--flop-budget", "68000000000", *V1_FLAGS]
    running = {name: preloaded.start("whest", "run", "--estimator", args[0], "--dataset", str(official),
                                     "--json", "--runner", "local", *args[1:],
                                     env=dict(os.environ, HF_HOME=str(hf / name), HF_DATASETS_OFFLINE="1"))
               for name, args in jobs.items()}
    reports = {}
    for name, proc in running.items():
        out, err = proc.communicate(timeout=600)
        assert out.strip(), f"whest run printed nothing for {name}: {err[-2000:]}"
        reports[name] = (proc.returncode, json.loads(out))
    return reports


def in_submission(error: dict, folder: Path) -> dict:
    """whest's error with files named as in the submission (whest names them by their path on disk)."""
    return {**error, "message": error["message"].replace(f"{folder}/", "")}


def score_json(capsys, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    status = main(["score", *args, "--json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err


@pytest.mark.parametrize("name", ["data-folder", "package"])
def test_a_folder_scores_as_whest_run_scores_it(capsys, official, corpus, whest_reports, name):
    status, ours, _ = score_json(capsys, "--dataset", str(official), "--estimator", str(corpus[name]),
                                 "--budget", str(BUDGET))
    whest_status, theirs = whest_reports[name]
    assert status == whest_status == 0
    assert assert_same_per_mlp(ours, theirs) > 36
    assert ours["results"]["n_failed_mlps"] == 0
    shipped = ours["whestboard"]["shipped"]
    assert shipped["mode"] == "folder" and shipped["left_behind"] == []
    assert sorted(shipped["files"]) == sorted(CORPUS[name])


def test_a_whest_package_tarball_of_the_package_scores_as_its_folder(capsys, official, corpus, whest_reports,
                                                                      tmp_path):
    tarball = package_submission(corpus["package"], output_path=tmp_path / "submission.tar.gz")
    status, ours, _ = score_json(capsys, "--dataset", str(official), "--estimator", str(tarball),
                                 "--budget", str(BUDGET))
    assert status == 0 and ours["whestboard"]["shipped"]["mode"] == "archive"
    assert sorted(ours["whestboard"]["shipped"]["files"]) == sorted(CORPUS["package"])
    assert assert_same_per_mlp(ours, whest_reports["package"][1]) > 36


def test_a_lone_file_fails_as_the_grader_would_and_names_what_it_left_behind(capsys, official, corpus,
                                                                               whest_reports):
    status, ours, err = score_json(capsys, "--dataset", str(official), "--estimator",
                                   str(corpus["data-folder"] / "estimator.py"), "--budget", str(BUDGET))
    whest_status, theirs = whest_reports["lone"]
    assert status == whest_status == 1 and ours["ok"] is theirs["ok"] is False
    assert ours["error"] == in_submission(theirs["error"], corpus["lone"])  # SETUP_ERROR: no corrector.json
    assert ours["error"]["code"] == "SETUP_ERROR" and "corrector.json" in ours["error"]["message"]
    shipped = ours["whestboard"]["shipped"]
    assert shipped["mode"] == "file" and shipped["left_behind"] == ["corrector.json"]
    assert shipped["note"].startswith("shipped alone: corrector.json next to it was not included")
    assert shipped["tried_to_open"] == ["corrector.json"]  # after running: what setup() reached for
    assert shipped["missing_note"].startswith("the estimator tried to open corrector.json")
    assert "upload the folder or a `whest package` tarball" in err


@pytest.mark.parametrize("name", ["missing-module", "syntax-error", "no-class"])
def test_failures_before_scoring_carry_whest_runs_code_and_message(capsys, official, corpus, whest_reports, name):
    status, ours, _ = score_json(capsys, "--dataset", str(official), "--estimator", str(corpus[name]),
                                 "--budget", str(BUDGET))
    whest_status, theirs = whest_reports[name]
    assert status == whest_status == 1
    assert set(ours) >= {"ok", "error", "whestbench_version"} and ours["ok"] is False
    assert ours["whestbench_version"] == theirs["whestbench_version"]
    assert ours["error"] == in_submission(theirs["error"], corpus[name])


def test_numpy_fails_under_phase2_rules_with_the_graders_reason(capsys, official, corpus):
    status, ours, _ = score_json(capsys, "--dataset", str(official), "--estimator", str(corpus["numpy"]),
                                 "--round", "v2-phase2", "--budget", str(BUDGET))
    assert status == 1 and ours["ok"] is False
    assert ours["error"]["code"] == "ESTIMATOR_MISSING_MODULE"
    assert "couldn't import `numpy`" in ours["error"]["message"]
    rule = ours["whestboard"]["grader_environment"]
    assert rule["round_tag"] == "v2-phase2" and rule["restricted"] and "no numpy" in rule["rule"]


def test_numpy_scores_under_v1_rules_as_whest_run_scores_it(capsys, official, corpus, whest_reports):
    status, ours, _ = score_json(capsys, "--dataset", str(official), "--estimator", str(corpus["numpy"]),
                                 "--round", "v1-warmup")
    whest_status, theirs = whest_reports["numpy-v1"]
    assert status == whest_status == 0 and ours["results"]["n_failed_mlps"] == 0
    assert assert_same_per_mlp(ours, theirs, UNTIMED_V1) >= 3 * 8
    rule = ours["whestboard"]["grader_environment"]
    assert rule["round_tag"] == "v1-warmup" and not rule["restricted"]
