"""Folders ship what ``whest package`` ships, and the grader's import rule holds for participant files only.

Folder packaging is compared with the archive ``whest package --estimator DIR`` writes (its members,
its ignore rules, its secret filter); the import rule is exercised in a real sandbox worker: a
participant's ``import numpy`` (directly, from a shipped helper, through ``importlib`` or
``__import__``) fails as on the Phase 2 grader, while flopscope's and whestbench's own numpy keeps
working in the same process; a compiled module shipped in the submission is refused there too.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import sysconfig
import tarfile
import textwrap
from pathlib import Path

import pytest
from whestbench.packaging import package_submission
from whestbench.runner import RunnerError, RunnerErrorDetail

from whestboard.rules import environment_for, error_hint, get_round, whest_error
from whestboard.sandbox import _host, _ingest
from whestboard.sandbox._contract import check_contract
from whestboard.sandbox._host import SandboxLimits, SubmissionFiles, whest_error_of

MEAN = "from whestbench.estimators import MeanPropagationEstimator\n\n\nclass Estimator(MeanPropagationEstimator):\n"
LIMITS = SandboxLimits(memory_mb=2048, grace_s=2.0)


@pytest.fixture(autouse=True)
def warm_next():
    yield
    _host.prewarm()


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, body in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else textwrap.dedent(body).encode())
    return root


# -- folders ----------------------------------------------------------------------------------------------


def test_a_folder_ships_exactly_the_members_of_whest_packages_archive(tmp_path):
    folder = write(tmp_path / "sub", {
        "estimator.py": MEAN + "    pass\n", "tools/__init__.py": "", "tools/deep/helper.py": "X = 1\n",
        "weights.npz": b"\x00\x01", "notes.txt": "kept", "scratch.log": "ignored by .whestignore",
        ".whestignore": "*.log\n", ".env": "TOKEN=secret", "__pycache__/x.pyc": b"\x00", "old.tar.gz": b"\x1f",
    })
    archive = package_submission(folder, output_path=tmp_path / "submission.tar.gz")
    with tarfile.open(archive) as tar:
        members = sorted(m.name for m in tar.getmembers() if m.name != "manifest.json")
    assert sorted(_ingest.folder_files(folder)) == members
    assert ".env" not in members and "scratch.log" not in members and "weights.npz" in members

    upload = _ingest.ingest_folder(folder, store=tmp_path / "store")
    assert upload.kind == "folder" and upload.entry == "estimator.py"
    assert sorted(f.name for f in upload.files) == members
    assert _ingest.ingest_folder(folder, store=tmp_path / "store").sha256 == upload.sha256  # one hash per content
    (folder / "notes.txt").write_text("changed")
    assert _ingest.ingest_folder(folder, store=tmp_path / "store").sha256 != upload.sha256


def test_several_files_picked_together_are_one_folder_submission(tmp_path):
    named = [("corrector.json", b'{"shift": 1}'), ("estimator.py", (MEAN + "    pass\n").encode()),
             ("scale.py", b"F = 2\n")]
    upload = _ingest.ingest_several(named, store=tmp_path / "store")
    assert upload.kind == "folder" and sorted(f.name for f in upload.files) == ["corrector.json", "estimator.py",
                                                                                "scale.py"]
    assert upload.sha256 == _ingest.ingest_several(list(reversed(named)), store=tmp_path / "store").sha256
    with pytest.raises(_ingest.UploadError, match="none of the 2 files is estimator.py"):
        _ingest.ingest_several(named[::2], store=tmp_path / "store")
    with pytest.raises(_ingest.UploadError, match="same name"):
        _ingest.ingest_several(named + [("scale.py", b"F = 3\n")], store=tmp_path / "store")


def test_a_folder_without_estimator_py_is_refused_with_whests_reason(tmp_path):
    folder = write(tmp_path / "sub", {"main.py": MEAN + "    pass\n"})
    with pytest.raises(_ingest.UploadError, match="requires an estimator.py"):
        _ingest.ingest_folder(folder, store=tmp_path / "store")


def test_a_lone_file_names_what_it_leaves_behind_as_whest_package_does(tmp_path):
    folder = write(tmp_path / "sub", {"estimator.py": MEAN + "    pass\n", "corrector.npz": b"\x00",
                                      "tools/__init__.py": "", ".venv/x": "never shipped"})
    assert _ingest.left_behind(folder / "estimator.py") == ["corrector.npz", "tools/"]
    note = _ingest.shipped_alone_note(["corrector.npz"])
    assert note == ("shipped alone: corrector.npz next to it was not included (`whest package` would ship it with "
                    "the folder; whether the estimator needs it shows when it runs); upload the folder or a "
                    "`whest package` tarball")
    alone = write(tmp_path / "alone", {"estimator.py": MEAN + "    pass\n"})
    assert _ingest.left_behind(alone / "estimator.py") == [] and _ingest.shipped_alone_note([]) is None


# -- whest's error codes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "stage", "code"),
    [
        (ModuleNotFoundError("No module named 'numpy'", name="numpy"), "run", "ESTIMATOR_MISSING_MODULE"),
        (SyntaxError("expected ':'"), "run", "SCORING_RUNTIME_ERROR"),
        (ValueError("No BaseEstimator subclasses found in estimator.py."), "run", "SCORING_VALIDATION_ERROR"),
        (FileNotFoundError("corrector.npz"), "setup", "SETUP_ERROR"),
    ],
)
def test_whest_error_names_a_failure_as_whest_run_does(exc, stage, code):
    error = whest_error(exc, stage)
    assert error["code"] == code and error["stage"] == stage
    assert error_hint(code) != error_hint("SOMETHING_ELSE")  # each named code has a hint of its own


# -- the grader's import rule, in a real worker -------------------------------------------------------------


def contract(folder: Path, round_tag: str):
    return check_contract(SubmissionFiles(root=folder), get_round(round_tag), LIMITS, width=16, depth=2)


NUMPY_HELPER = {
    "estimator.py": MEAN + "    def predict(self, mlp, budget):\n        from helper import bump\n"
                           "        return super().predict(mlp, budget) + bump()\n",
    "helper.py": "import numpy\n\n\ndef bump():\n    return float(numpy.float32(0.0))\n",
}
NUMPY_DYNAMIC = {
    "estimator.py": "import importlib\n\nnp = importlib.import_module('numpy')\n" + MEAN + "    pass\n",
}
NUMPY_DUNDER = {"estimator.py": "np = __import__('numpy.linalg')\n" + MEAN + "    pass\n"}


@pytest.mark.parametrize(("files", "step"), [(NUMPY_HELPER, "predict"), (NUMPY_DYNAMIC, "load"),
                                              (NUMPY_DUNDER, "load")],
                         ids=["from-a-helper-in-predict", "importlib", "dunder-import"])
def test_participant_numpy_fails_under_phase2_however_it_is_imported(tmp_path, files, step):
    folder = write(tmp_path / "sub", files)
    report = contract(folder, "v2-phase2")
    failed = [s for s in report.steps if not s.ok]
    assert not report.ok and failed[0].name == step, report.steps
    message = failed[0].message
    assert ("`numpy` cannot be imported" in message if step == "load" else "No module named 'numpy'" in message), \
        message
    assert report.environment["restricted"] and "no numpy" in report.environment["rule"]
    if step == "predict":  # one is enough to show the rule is the round's: v1 graders had numpy
        assert contract(folder, "v1-warmup").ok


def test_flopscope_and_whestbench_keep_their_numpy_and_the_shipped_package_imports(tmp_path):
    folder = write(tmp_path / "sub", {
        "estimator.py": "import json\nimport flopscope.numpy as fnp\nfrom whestbench.estimators import "
                        "CovariancePropagationEstimator\nfrom tools.scale import factor\n\n\n"
                        "class Estimator(CovariancePropagationEstimator):\n"
                        "    def predict(self, mlp, budget):\n"
                        "        return fnp.multiply(super().predict(mlp, budget), factor())\n",
        "tools/__init__.py": "", "tools/scale.py": "import math\n\n\ndef factor():\n    return math.sqrt(1.0)\n",
    })
    report = contract(folder, "v2-phase2")
    assert report.ok, report.steps


def test_a_compiled_module_shipped_in_the_submission_is_refused_under_phase2(tmp_path):
    source = Path(importlib.machinery.PathFinder.find_spec("_json").origin) if \
        importlib.machinery.PathFinder.find_spec("_json") else None
    if source is None or not source.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        pytest.skip(f"no extension module to ship on this Python ({sysconfig.get_platform()})")
    folder = write(tmp_path / "sub", {"estimator.py": "import fastpath\n" + MEAN + "    pass\n"})
    shutil.copy(source, folder / f"fastpath{importlib.machinery.EXTENSION_SUFFIXES[0]}")
    report = contract(folder, "v2-phase2")
    assert not report.ok and "compiled code" in report.steps[0].message, report.steps


def test_a_sandbox_start_failure_carries_whests_error():
    error = RunnerError("setup", RunnerErrorDetail(code="SETUP_TIMEOUT", message="too slow"))
    assert whest_error_of(ValueError("wrapped")) is None
    wrapped = ValueError("setup() raised")
    wrapped.__cause__ = error
    assert whest_error_of(wrapped) == {"stage": "setup", "code": "SETUP_TIMEOUT", "message": "too slow"}
    assert environment_for("v1-phase1").restricted is False and environment_for("v2-phase2").restricted


def test_a_traceback_shows_the_participants_frames_not_the_workers(tmp_path):
    folder = write(tmp_path / "sub", {
        "estimator.py": MEAN + "    def predict(self, mlp, budget):\n        from tools import explode\n"
                               "        return explode(mlp)\n",
        "tools.py": "def explode(mlp):\n    raise KeyError(f'layer {mlp.depth} missing')\n",
    })
    report = contract(folder, "v2-phase2")
    failed = report.steps[-1]
    assert failed.name == "predict" and not failed.ok and "exception" in failed.message
    assert 'File "tools.py", line 2, in explode' in failed.traceback and "KeyError: 'layer 2 missing'" in \
        failed.traceback
    assert "worker.py" not in failed.traceback and "whestbench" not in failed.traceback


def test_after_running_a_lone_file_names_only_what_the_estimator_tried_to_open(tmp_path):
    """Before running, the note is whest package's list; after, only the files the estimator reached for."""
    from whestbench.packaging import summarize_submission

    folder = write(tmp_path / "sub", {
        "estimator.py": "from pathlib import Path\n\n" + MEAN
                        + "    def setup(self, context):\n"
                          "        self.shift = float((Path(__file__).parent / 'corrector.txt').read_text())\n",
        "corrector.txt": "0.5", "LICENSE": "MIT", "estimator_v2.py": MEAN + "    pass\n",
        ".idea/workspace.xml": "<x/>", "__pycache__/estimator.cpython-311.pyc": b"\x00",
    })
    lone = folder / "estimator.py"
    assert _ingest.left_behind(lone) == list(summarize_submission(lone).orphaned_siblings)  # whest's own list
    assert "__pycache__/" not in _ingest.left_behind(lone)
    report = check_contract(SubmissionFiles.single_file(lone), get_round("v1-warmup"), LIMITS, width=16, depth=2)
    assert not report.ok and report.steps[-1].name == "setup"
    assert report.missing_files == ["corrector.txt"]  # not LICENSE, the variant or the hidden folder
    assert _ingest.missing_files_note(report.missing_files).startswith("the estimator tried to open corrector.txt")
    whole = check_contract(SubmissionFiles(root=folder), get_round("v1-warmup"), LIMITS, width=16, depth=2)
    assert whole.ok and whole.missing_files == [], whole.steps
