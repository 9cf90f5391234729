"""Every command line of the README's "Command line" section runs as written, on the embedded data.

The lines are read from README.md itself, so a line changed there is the line tested. Each runs as
``python -m whestboard`` runs it (``tests/preloaded.py``: a fork of one process that imported whestbench
once), in a working folder that stands for the checkout: a copy of ``data/`` (``band`` resumes the embedded
band there, ``bake`` writes beside it: nothing of the checkout is written), the files a reader brings
(``my_submission/``, ``estimator.py``, ``graded.csv``, a folder of the grader's ``records/``), and a state
folder of its own. ``RUN_ID`` is read from the ``runs`` line's own output, as a reader copies it; ``> FILE``
writes the command's output where a shell would.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import HOSTILE, REPO
from tests.leaderboard.aicrowd_records import write_records
from tests.leaderboard.submissions_helpers import submission_row, write_csvs

pytestmark = pytest.mark.slow
PREFIX = [".venv/bin/python", "-m", "whestboard"]


def readme_commands() -> list[list[str]]:
    """The argument lists of the README's command-line block, in order (comments dropped)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Command line", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = []
    for line in block.splitlines():
        if line.strip():
            words = shlex.split(line, comments=True)
            assert words[:3] == PREFIX, line
            commands.append(words[3:])
    return commands


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """The reader's checkout as the commands see it: the embedded data and the reader's own files."""
    work = tmp_path_factory.mktemp("readme") / "whestboard"
    shutil.copytree(REPO / "data", work / "data")
    (work / "my_submission").mkdir()
    shutil.copy(HOSTILE / "good.py", work / "my_submission" / "estimator.py")
    shutil.copy(HOSTILE / "good.py", work / "estimator.py")
    row, mlps = submission_row("readme-1", "a reader", scores=(2e-5, 3e-5), flops=(1e9, 2e9))
    write_csvs(work, [(row, mlps)], stem="graded")
    write_records(work / "records", ["333364-phase2.json"])
    return work


def test_every_readme_command_runs_as_written(preloaded, workdir, tmp_path):
    commands = readme_commands()
    assert [c[0] for c in commands] == ["bake", "datasets", "band", "paper", "score", "score", "check", "score", "compare",
                                        "runs", "compare", "import", "import", "export", "sweep"]
    env = {k: v for k, v in os.environ.items() if k not in ("WHESTBOARD_DATABASE_URL", "WHESTBOARD_PAPER_DIR")}
    # the reader's checkout is the workdir: its data/ is the embedded data the commands read and write
    env.update(WHESTBOARD_STATE_DIR=str(tmp_path / "state"), WHESTBOARD_DATA_DIR=str(workdir / "data"),
               HF_DATASETS_OFFLINE="1")
    shipped = {path: path.read_bytes() for path in (REPO / "data").rglob("*.json")}
    outputs: dict[str, list[str]] = {}
    run_id = None
    for args in commands:
        if "run:RUN_ID" in args:
            assert run_id is not None, "the runs line comes before the compare line"
            args = [a.replace("RUN_ID", run_id) for a in args]
        args, target = (args[:-2], args[-1]) if args[-2:-1] == [">"] else (args, None)
        process = preloaded.start("whestboard", *args, cwd=workdir, env=env)
        stdout, stderr = process.communicate(timeout=900)
        assert process.returncode == 0, (args, stdout[-2000:], stderr[-2000:])
        if target is not None:
            (workdir / target).write_text(stdout)
        outputs.setdefault(args[0], []).append(stdout)
        if args[0] == "runs":
            rows = stdout.splitlines()[1:-1]
            cov = [r for r in rows if r.split()[-1:] == ["cov"]]
            assert len(cov) == 1, stdout
            run_id = cov[0].split()[0]
            assert len(run_id) == 8  # as the pages show it: compare takes it

    assert (workdir / "data" / "my-warmup" / "whestboard-dataset.json").is_file()
    cov, folder, mean = (json.loads(out) for out in outputs["score"])
    assert mean["whestboard"]["estimator"]["kind"] == "mean"
    assert json.loads((workdir / "cov.json").read_text()) == cov
    assert cov["whestboard"]["estimator"]["kind"] == "cov" and len(cov["results"]["per_mlp"]) == 8
    assert folder["whestboard"]["shipped"]["mode"] == "folder" and len(folder["results"]["per_mlp"]) == 2
    assert cov["whestboard"]["run_id"].startswith(run_id)
    assert outputs["check"][0].rstrip().endswith("contract ok: Estimator loads, sets up and predicts within the rules")
    assert "limited by" in outputs["compare"][0]  # the paired verdict names what limits its interval
    compared = json.loads(outputs["compare"][1])
    assert compared["a"]["id"] == f"run:{cov['whestboard']['run_id']}" and compared["n_shared"] == 8
    assert "333364" in outputs["import"][1]
    exported = pd.read_csv(workdir / "all.csv")
    assert "readme-1" in set(exported["submission_id"])
    assert "(dry run)" in outputs["sweep"][0]
    assert not any((REPO / "data").glob("my-warmup")), "the checkout's data/ was written"
    changed = [str(p) for p, data in shipped.items() if not p.is_file() or p.read_bytes() != data]
    assert not changed, f"the commands wrote the project's own data/ (the paper's figure resumed there?): {changed[:5]}"
