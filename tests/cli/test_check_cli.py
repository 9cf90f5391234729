"""``python -m whestboard check``: folders, the round's import rule and whest's error codes, from the command line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from whestboard.cli import main
from whestboard.sandbox import prewarm

pytestmark = pytest.mark.usefixtures("private_state")


@pytest.fixture(autouse=True)
def warm_next():
    yield
    prewarm()  # the next test's worker imports its libraries meanwhile

NUMPY_ESTIMATOR = """
    import numpy as _np
    from whestbench.estimators import MeanPropagationEstimator


    class Estimator(MeanPropagationEstimator):
        def predict(self, mlp, budget):
            return super().predict(mlp, budget) + float(_np.float32(0.0))
    """
DATA_ESTIMATOR = """
    import json
    from pathlib import Path

    from whestbench.estimators import MeanPropagationEstimator


    class Estimator(MeanPropagationEstimator):
        def setup(self, context):
            self.shift = json.loads((Path(__file__).parent / "corrector.json").read_text())["shift"]
    """


def folder(tmp_path: Path, source: str, **extra: str) -> Path:
    root = tmp_path / "submission"
    root.mkdir()
    (root / "estimator.py").write_text(textwrap.dedent(source).lstrip())
    for name, text in extra.items():
        (root / name).write_text(text)
    return root


def check_json(capsys, *args: str) -> tuple[int, dict, str]:
    capsys.readouterr()
    status = main(["check", *args, "--json"])
    captured = capsys.readouterr()
    return status, json.loads(captured.out), captured.err


def test_numpy_fails_the_phase2_contract_with_whests_code_and_passes_v1(capsys, tmp_path):
    root = folder(tmp_path, NUMPY_ESTIMATOR)
    status, report, _ = check_json(capsys, "--estimator", str(root), "--round", "v2-phase2")
    assert status == 1 and not report["ok"]
    assert report["error"]["code"] == "ESTIMATOR_MISSING_MODULE" and report["steps"][0]["name"] == "load"
    assert "couldn't import `numpy`" in report["error"]["message"]  # whest's own, as `whest run --json` gives it
    assert report["steps"][0]["message"] == ("`numpy` cannot be imported: under v2-phase2 rules participant code may "
                                             "import only the standard library, flopscope and whestbench, as on the "
                                             "grader, which has no numpy.")
    assert report["steps"][0]["fix"].startswith("Use flopscope.numpy instead") and "helper" not in \
        report["steps"][0]["fix"]
    assert "worker.py" not in (report["steps"][0]["traceback"] or "")  # the participant's frames only
    assert "import numpy as _np" in report["steps"][0]["traceback"]
    assert report["environment"]["round_tag"] == "v2-phase2" and report["environment"]["restricted"]

    status, report, _ = check_json(capsys, "--estimator", str(root), "--round", "v1-warmup")
    assert status == 0 and report["ok"] and not report["environment"]["restricted"]


def test_a_folder_ships_its_data_file_and_a_lone_file_says_what_it_left(capsys, tmp_path):
    root = folder(tmp_path, DATA_ESTIMATOR, **{"corrector.json": '{"shift": 0.5}'})
    status, report, _ = check_json(capsys, "--estimator", str(root))
    assert status == 0 and report["ok"], report["steps"]

    status, report, err = check_json(capsys, "--estimator", str(root / "estimator.py"))
    assert status == 1 and report["error"]["code"] == "SETUP_ERROR"
    assert "corrector.json" in report["error"]["message"]
    assert report["shipped_note"].startswith("shipped alone: corrector.json next to it was not included")
    assert "upload the folder or a `whest package` tarball" in err


def test_human_output_names_the_code_the_fix_and_the_rule(capsys, tmp_path):
    root = folder(tmp_path, "import whest\n" + textwrap.dedent(NUMPY_ESTIMATOR).replace("import numpy as _np\n", ""))
    capsys.readouterr()
    assert main(["check", "--estimator", str(root)]) == 1
    out = capsys.readouterr().out
    assert "code: ESTIMATOR_MISSING_MODULE" in out and "`whest` cannot be imported: no installed package" in out
    assert "fix: If it is one of your own modules, ship it with estimator.py" in out and "imports: v2-phase2" in out
    assert out.count("cannot be imported") == 1  # said once: the last line names the step and the code
    assert out.rstrip().endswith("contract failed at load (ESTIMATOR_MISSING_MODULE)")


def test_a_numpy_import_under_phase2_is_said_once_with_the_advice_that_applies(capsys, tmp_path):
    """The issue's try: one message, no advice about helper modules (numpy is a package the grader lacks)."""
    root = folder(tmp_path, NUMPY_ESTIMATOR)
    capsys.readouterr()
    assert main(["check", "--estimator", str(root), "--round", "v2-phase2"]) == 1
    out = capsys.readouterr().out
    assert out.count("numpy` cannot be imported") == 1 and "couldn't import" not in out
    assert "fix: Use flopscope.numpy instead: `import flopscope.numpy as fnp`" in out and "helper" not in out
