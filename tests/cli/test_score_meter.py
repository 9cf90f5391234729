"""``score`` end to end on a tampering estimator and its honest twin: the flag in JSON, in text and on the upload result.

The grader's numbers stay the grader's: ``whest run`` on the tampering file bills what the reset counter
says, and ``score --json`` reports the same FLOPs and MSEs, plus ``meter_tampering`` on every MLP.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from components.upload_panels import verdict_table
from tests.upstream import assert_same_per_mlp, make_official
from whestboard.cli import main
from whestboard.scoring import verdict_row

TAMPERING = Path(__file__).parents[1] / "sandbox" / "tampering"
BUDGET = 5_000_000
pytestmark = [pytest.mark.usefixtures("private_state"), pytest.mark.slow]


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("meter") / "ds", width=16, depth=3, n_samples=2000, seeds=[5, 6])


@pytest.fixture(scope="module")
def warmup_shaped(tmp_path_factory):
    """Two MLPs of v1-warmup's shape (256 x 8), so their reports import into that round's board."""
    return make_official(tmp_path_factory.mktemp("meter-v1") / "ds", width=256, depth=8, n_samples=2000,
                         seeds=[5, 6])


def submission(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name.removesuffix(".py")
    folder.mkdir()
    shutil.copy(TAMPERING / name, folder / "estimator.py")
    return folder


def score(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["score", *args])
    return status, capsys.readouterr().out


def rendered(component) -> str:
    return json.dumps(component.to_plotly_json(), default=lambda c: c.to_plotly_json())


def test_a_counter_reset_is_flagged_in_json_text_and_the_upload_result(capsys, official, tmp_path, preloaded):
    folder = submission(tmp_path, "counter_reset.py")
    common = ["--dataset", str(official), "--estimator", str(folder), "--budget", str(BUDGET), "--no-cache"]
    status, out = score(capsys, *common, "--json")
    assert status == 0
    ours = json.loads(out)
    per_mlp = ours["results"]["per_mlp"]
    assert len(per_mlp) == 2
    for entry in per_mlp:
        assert "counter was reset or rewritten" in entry["meter_tampering"]
        assert not entry["failed"]  # the verdict stays the grader's
    # the oracle: whest run bills the same (tampered) FLOPs and MSEs (its own process, forked: tests/preloaded.py)
    env = dict(os.environ, HF_HOME=str(tmp_path / "hf"), HF_DATASETS_OFFLINE="1")
    theirs = preloaded.start("whest", "run", "--estimator", str(folder / "estimator.py"), "--dataset",
                             str(official), "--json", "--runner", "local", "--flop-budget", str(BUDGET), env=env)
    assert assert_same_per_mlp(ours, json.loads(theirs.communicate(timeout=600)[0])) > 0
    status, text = score(capsys, *common)
    assert status == 0
    assert text.count("ok, METER TAMPERING") == 2
    assert f"meter tampering, MLP {per_mlp[0]['mlp_index']}: {per_mlp[0]['meter_tampering']}" in text
    assert "2 of 2 MLP(s) flagged: the score above is the grader's" in text
    page = rendered(verdict_table([verdict_row(e) for e in per_mlp]))
    assert "upload-meter-tampering" in page and per_mlp[0]["meter_tampering"] in page
    assert "Meter tampering seen on 2 of 2 MLP(s)" in page


def test_the_honest_twin_is_clean_everywhere(capsys, official, tmp_path):
    folder = submission(tmp_path, "counter_reset_twin.py")
    status, out = score(capsys, "--dataset", str(official), "--estimator", str(folder), "--budget", str(BUDGET),
                        "--no-cache", "--json")
    assert status == 0
    per_mlp = json.loads(out)["results"]["per_mlp"]
    assert [e["meter_tampering"] for e in per_mlp] == [None, None]
    page = rendered(verdict_table([verdict_row(e) for e in per_mlp]))
    assert "upload-meter-tampering" not in page and "meter tampering" not in page


def test_a_flagged_run_imported_to_the_leaderboard_carries_the_integrity_flag(capsys, warmup_shaped, tmp_path):
    """``score --json`` reports, imported as the board imports run reports: the tamperer is flagged, its twin not."""
    import app
    from whestboard.leaderboard import Upload, build_batch, integrity_board, mlp_frame, upsert

    app.the_app()  # the pages register with the app
    from whestboard.leaderboard import flags_text

    uploads = []
    for name in ("counter_reset.py", "counter_reset_twin.py"):
        status, out = score(capsys, "--dataset", str(warmup_shaped), "--estimator", str(submission(tmp_path, name)),
                            "--round", "v1-warmup", "--no-cache", "--json")
        assert status == 0
        uploads.append((name, out))
    sentence = json.loads(uploads[0][1])["results"]["per_mlp"][0]["meter_tampering"]
    for name, out in uploads:
        batch = build_batch([Upload(f"{name}.json", out.encode())], team=name, round_tag="v1-warmup")
        assert not batch.problems, list(batch.problems)
        upsert(batch.submissions, batch.mlp_results)
    board = integrity_board("v1-warmup").set_index("team")
    assert bool(board.loc["counter_reset.py", "meter"]) and not board.loc["counter_reset_twin.py", "meter"]
    assert board.loc["counter_reset.py", "meter_text"] == f"meter tampering on 2 of 2 MLP(s): {sentence}"
    assert board.loc["counter_reset_twin.py", "meter_text"] == ""
    assert f"⚠ meter tampering on 2 of 2 MLP(s): {sentence}" in flags_text(board.loc["counter_reset.py"].to_dict())
    stored = mlp_frame().set_index("mlp_index")
    assert stored["meter_tampering"].notna().sum() == 2  # the sentence is stored per MLP, the twin's are empty
