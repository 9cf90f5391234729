"""With ``--json``, every failure of ``score``, ``check`` and ``compare``, at any stage, is one JSON object.

A script that reads stdout gets ``{"ok": false, "error": {"stage", "code", "message", "hint"}}`` whether the
command line was wrong, an input did not exist, a package was refused, or the command itself broke; the
exit status stays the one the text mode gives.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from whestboard.cli import main

pytestmark = pytest.mark.usefixtures("private_state")
ESTIMATOR = b"from whestbench import BaseEstimator\n\n\nclass Estimator(BaseEstimator):\n    pass\n"


def refused_tarball(path):
    """A tarball whose manifest names a file it does not contain: whestbench's validate_package refuses it."""
    manifest = {"schema_version": "1.0", "api_version": "2.0", "entrypoint": {"module": "estimator"},
                "files": [{"name": "estimator.py", "sha256": hashlib.sha256(ESTIMATOR).hexdigest()},
                          {"name": "helper.py", "sha256": "0" * 64}]}
    with tarfile.open(path, "w:gz") as tar:
        for name, body in {"estimator.py": ESTIMATOR, "manifest.json": json.dumps(manifest).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def one_json_failure(capsys, argv: list[str]) -> tuple[int, dict]:
    capsys.readouterr()
    status = main(argv)
    out = capsys.readouterr().out
    payload = json.loads(out)  # exactly one object: json.loads refuses anything after it
    assert payload["ok"] is False and status != 0
    assert set(payload["error"]) >= {"stage", "code", "message", "hint"} and payload["error"]["message"]
    return status, payload["error"]


@pytest.mark.parametrize("command", [["score", "--dataset", "x", "--estimator", "mean"], ["check", "--estimator", "x.py"],
                                     ["compare", "a", "b"]])
def test_a_wrong_command_line_is_a_json_usage_error(capsys, command):
    status, error = one_json_failure(capsys, [*command, "--json", "--no-such-flag"])
    assert status == 2 and error["code"] == "USAGE_ERROR" and "--no-such-flag" in error["message"]


def test_missing_inputs_are_json_input_errors(capsys, tmp_path):
    status, error = one_json_failure(capsys, ["score", "--dataset", str(tmp_path / "nowhere"), "--estimator", "mean",
                                              "--json"])
    assert status == 2 and error["code"] == "INPUT_ERROR" and error["stage"] == "score"
    status, error = one_json_failure(capsys, ["check", "--estimator", str(tmp_path / "absent.py"), "--json"])
    assert status == 2 and error["code"] == "INPUT_ERROR" and "absent.py" in error["message"]
    status, error = one_json_failure(capsys, ["compare", "run:nope", "run:neither", "--json"])
    assert status == 2 and error["code"] == "INPUT_ERROR" and error["stage"] == "compare"


def test_a_refused_package_is_a_json_packaging_error_with_whestbenchs_message(capsys, tmp_path):
    from whestbench.validation import validate_package

    tarball = refused_tarball(tmp_path / "submission.tar.gz")
    issue = validate_package(tarball).issues[0]
    status, error = one_json_failure(capsys, ["check", "--estimator", str(tarball), "--json"])
    assert error["code"] == "PACKAGING_VALIDATION_ERROR" and issue.message in error["message"]
    from tests.upstream import make_official

    dataset = make_official(tmp_path / "ds", width=8, depth=2, n_samples=200, seeds=[1])
    status, error = one_json_failure(capsys, ["score", "--dataset", str(dataset), "--estimator", str(tarball),
                                              "--json"])
    assert status == 2 and error["code"] == "PACKAGING_VALIDATION_ERROR" and issue.message in error["message"]


def test_text_mode_still_prints_one_line_and_no_json(capsys, tmp_path):
    capsys.readouterr()
    assert main(["check", "--estimator", str(tmp_path / "absent.py")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and "absent.py" in captured.err
