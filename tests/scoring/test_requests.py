"""The typed requests at the edge: what a browser may name, and each request parsed, bounded and priced once.

Numbers are compared with what whestbench says (a round's B from ``whestbench.budget.ROUNDS``) and with
what the command line's own resolver builds (the same cache key, the same code hash), never hard-coded.
"""

from __future__ import annotations

import hashlib
import re

import pytest
from whestbench.budget import ROUNDS

from tests.conftest import HOSTILE
from whestboard import config
from whestboard.data import (
    GeneratedMLPError,
    default_samples,
    get_dataset,
    parse_shape,
    playground_work,
    truth_work,
)
from whestboard.sandbox import ingest_upload
from whestboard.scoring import (
    MAX_PLAYGROUND_UPLOADS,
    MAX_SPECS,
    MENU_ONLY,
    SERVED_HELP,
    UPLOADS_OFF,
    RunError,
    RunRequest,
    cache_key,
    job_cost,
    parse_lab_run,
    parse_playground,
    parse_sweep,
    parse_upload_run,
    quoted,
    resolve_estimator,
    rulebook_for,
    sandboxed_handle,
    served_handle,
    served_spec,
    served_specs,
)
from whestboard.store import blob_keys

pytestmark = pytest.mark.usefixtures("private_state")
SHA = "ab" * 32


def _stored_uploads() -> list[str]:
    """What the upload store holds: the shared store's keys and this machine's folder."""
    folder = config.state_dir() / "uploads"
    return blob_keys("upload") + (sorted(p.name for p in folder.iterdir()) if folder.is_dir() else [])


# --------------------------------------------------------------------------- what a browser may name


@pytest.mark.parametrize("spec, canonical", [("mean", "mean"), ("Covariance", "cov"), ("combined", "combined"),
                                             ("cumulant:3", "cumulant:3"), ("mc:1e4", "mc:1e4"),
                                             ("mc:0.5B", "mc:0.5B")])
def test_the_built_ins_are_served(spec, canonical):
    assert served_spec(spec, uploads=False) == canonical
    assert served_handle(spec, uploads=False).code_sha256 == resolve_estimator(spec).code_sha256


def test_a_path_is_refused_with_one_sentence_whatever_exists_there(tmp_path):
    """A folder with estimator.py, a .py file, an archive name, a missing path: the same words, nothing read
    and nothing copied into the upload store (the command line still takes them)."""
    folder = tmp_path / "sub"
    folder.mkdir()
    (folder / "estimator.py").write_bytes((HOSTILE / "good.py").read_bytes())
    (folder / "neighbour.txt").write_text("a neighbour")
    candidates = [str(folder), str(folder / "estimator.py"), str(HOSTILE / "good.py"), str(tmp_path / "no-such"),
                  str(tmp_path / "no-such.py"), str(tmp_path / "x.tar.gz"), "/etc", "/etc/passwd", "../../.."]
    sentences = set()
    for spec in candidates:
        with pytest.raises(RunError) as refused:
            served_spec(spec, uploads=True)
        sentences.add(str(refused.value).replace(quoted(spec), "SPEC"))
    assert sentences == {f"unknown estimator SPEC: this server runs {SERVED_HELP}; a path on the server is never "
                         "looked up for a page"}
    assert _stored_uploads() == []
    assert resolve_estimator(str(folder)).kind == "file"  # the command line's resolver is unchanged


def test_an_upload_is_served_only_where_uploads_run():
    assert served_spec(f"upload:{SHA}", uploads=True) == f"upload:{SHA}"
    with pytest.raises(RunError, match=re.escape(UPLOADS_OFF)):
        served_spec(f"upload:{SHA}", uploads=False)
    with pytest.raises(RunError, match=re.escape(MENU_ONLY)):
        served_spec(f"upload:{SHA}", uploads=False, refusal=MENU_ONLY)
    for bad in ("upload:../../etc", "upload:" + "A" * 64, f"upload:{SHA}0", "upload:"):
        with pytest.raises(RunError, match="unknown estimator"):
            served_spec(bad, uploads=True)


@pytest.mark.parametrize("junk", [None, 3, 3.5, [1], {"a": 1}, True, "x" * 201])
def test_anything_but_a_short_name_is_refused(junk):
    with pytest.raises(RunError):
        served_spec(junk, uploads=True)


def test_a_kept_estimator_is_named_and_runs_the_operators_file(tmp_path, monkeypatch):
    kept = tmp_path / "house.py"
    kept.write_bytes((HOSTILE / "good.py").read_bytes())
    monkeypatch.setenv("WHESTBOARD_KEPT_ESTIMATORS", str(kept))
    assert served_spec("kept:house", uploads=False) == "kept:house"
    handle = served_handle("kept:house", uploads=False)
    assert handle.code_sha256 == hashlib.sha256(kept.read_bytes()).hexdigest() == \
        sandboxed_handle(str(kept)).code_sha256  # what `score --estimator house.py` records
    with pytest.raises(RunError, match="not an estimator this server keeps: the operator keeps kept:house"):
        served_spec("kept:other", uploads=False)
    monkeypatch.delenv("WHESTBOARD_KEPT_ESTIMATORS")
    with pytest.raises(RunError, match="keeps none"):
        served_spec("kept:house", uploads=False)


def test_a_thousand_specs_are_refused_before_any_is_read(tmp_path):
    specs = [str(tmp_path / f"probe-{i}") for i in range(1000)]
    with pytest.raises(RunError, match=f"1,000 estimators in one request: at most {MAX_SPECS} are scored at once"):
        served_specs(specs, uploads=True)
    assert served_specs(["mean", "cov"], uploads=False) == ("mean", "cov")
    with pytest.raises(RunError, match="must be a list"):
        served_specs("mean", uploads=False)


# --------------------------------------------------------------------------- the playground


def test_the_issues_keep_payload_is_refused_by_the_parser():
    with pytest.raises(GeneratedMLPError, match="truth samples 1000000000000 is outside 100–100000000"):
        parse_playground({"width": 1024, "depth": 32, "seed": "1", "samples": 1e12}, uploads=True)


def test_a_playground_request_reads_back_from_its_payload_and_prices_its_uploads():
    asked = parse_playground({"width": 64, "depth": 4, "seed": "9", "samples": "30000", "mc": 300,
                              "round": "v1-warmup", "uploads": [SHA, SHA, "cd" * 32]}, uploads=True)
    assert asked.uploads == (SHA, "cd" * 32)  # each upload once
    assert parse_playground(asked.payload(), uploads=True) == asked
    budget = ROUNDS["v1-warmup"].flop_budget
    assert asked.cost == playground_work(parse_shape(64, 4, 9), 30_000, 300) + 2 * budget
    assert asked.keep_cost == truth_work(parse_shape(64, 4, 9), 30_000) == 4 * (2 * 64**2 + 128 * 64) * 30_000
    auto = parse_playground({"width": 64, "depth": 4, "seed": 9, "samples": "auto", "mc": 10}, uploads=False)
    assert auto.samples == default_samples(64, 4) and auto.samples_auto and auto.payload()["samples"] == "auto"
    assert auto.specs[-1] == "mc:10" and not auto.uploads


@pytest.mark.parametrize("change, words", [
    ({"uploads": [SHA]}, "uploaded estimators are off"),
    ({"uploads": ["../x"]}, "unknown estimator 'upload:../x'"),
    ({"uploads": "abc"}, "not a list of upload hashes"),
    ({"round": "v9"}, "round 'v9' is not one of"),
    ({"round": {"tag": "v1-warmup"}}, "is not one of"),
    ({"mc": 5}, "Monte Carlo samples 5 is outside 10–100000000"),
    ({"width": [1]}, "width"),
])
def test_a_hostile_store_value_gets_the_sentence_a_person_would(change, words):
    values = {"width": 16, "depth": 4, "seed": "1", "samples": "auto", "mc": 100, "round": None, "uploads": []}
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_playground(values | change, uploads=False)


def test_the_uploads_of_one_playground_job_are_bounded():
    many = [f"{i:064x}" for i in range(MAX_PLAYGROUND_UPLOADS + 1)]
    with pytest.raises(RunError, match=f"at most {MAX_PLAYGROUND_UPLOADS}"):
        parse_playground({"width": 16, "depth": 4, "seed": 1, "mc": 100, "uploads": many}, uploads=True)
    with pytest.raises(RunError, match="not what this page sends"):
        parse_playground(["width", 16], uploads=True)


# --------------------------------------------------------------------------- the lab and its sweeps


def test_a_lab_run_is_the_run_the_command_line_would_make():
    asked = parse_lab_run({"dataset": "v1-warmup", "mlps": "0:3", "spec": "cov", "budget": "0.5B", "nonce": 4})
    dataset = get_dataset("v1-warmup")
    by_hand = RunRequest(dataset, [0, 1, 2], resolve_estimator("cov"),
                         rulebook_for("v1-warmup", ROUNDS["v1-warmup"].flop_budget // 2))
    assert asked.key == cache_key(by_hand)
    assert asked.cost == 3 * (ROUNDS["v1-warmup"].flop_budget // 2)
    assert parse_lab_run(asked.payload()) == asked and parse_lab_run(asked.payload()).key == asked.key


@pytest.mark.parametrize("change, words", [
    ({"spec": f"upload:{SHA}"}, MENU_ONLY),
    ({"spec": str(HOSTILE / "good.py")}, "a path on the server is never looked up"),
    ({"spec": str(HOSTILE)}, "a path on the server is never looked up"),
    ({"dataset": ["v1-warmup"]}, "is not a dataset key"),
    ({"dataset": "no-such"}, "no dataset 'no-such'"),
    ({"budget": "1e30"}, "above the most a run accepts"),
    ({"mlps": "0:100000000"}, "are not in this dataset"),
    ({"mlps": {"a": 1}}, "is not text"),
])
def test_a_hand_made_lab_job_is_refused_with_a_sentence(change, words):
    with pytest.raises((RunError, KeyError), match=re.escape(words)):
        parse_lab_run({"dataset": "v1-warmup", "mlps": "0", "spec": "mean", "budget": None} | change)
    assert _stored_uploads() == []


def test_a_sweep_is_one_run_per_estimator_and_budget_and_bounded():
    budget = ROUNDS["v1-warmup"].flop_budget
    asked = parse_sweep("v1-warmup", ["mean", "mc:0.5B"], "0.1B:1B:3", "0:2", default_ladder="1B")
    assert asked.specs == ("mean", "mc:0.5B") and asked.n_points == 6
    assert asked.budgets == (budget // 10, round(budget * 0.1 * 10 ** 0.5), budget)
    assert asked.cost == 2 * 2 * sum(asked.budgets)  # nothing stored yet: every point, two MLPs each
    assert parse_sweep("v1-warmup", ["cov"], "", "0", default_ladder="1B").budgets == (budget,)
    with pytest.raises(RunError, match="13 estimators in one request"):
        parse_sweep("v1-warmup", ["mean"] * 13, "1B", "0", default_ladder="1B")
    with pytest.raises(RunError, match=re.escape(MENU_ONLY)):
        parse_sweep("v1-warmup", ["mean", f"upload:{SHA}"], "1B", "0", default_ladder="1B")


# --------------------------------------------------------------------------- the upload job


def test_an_upload_job_is_parsed_once_and_priced_by_its_mlps_and_budget():
    upload = ingest_upload((HOSTILE / "good.py").read_bytes(), "good.py")
    asked = parse_upload_run({"upload": upload.sha256, "dataset": "v1-warmup", "mlps": "0,2", "team": "t",
                              "budget": "2B"})
    assert asked.indices == (0, 2) and asked.cost == 2 * 2 * ROUNDS["v1-warmup"].flop_budget
    assert parse_upload_run(asked.payload()) == asked and job_cost(asked.payload()) == asked.cost


@pytest.mark.parametrize("change, words", [
    ({"upload": "../../etc"}, "is not an upload's sha256"),
    ({"upload": None}, "is not an upload's sha256"),
    ({"team": "x" * 101}, "at most 100 characters"),
    ({"mlps": ["0"]}, "is not text"),
    ({"dataset": 3}, "is not a dataset key"),
])
def test_a_hand_made_upload_job_is_refused(change, words):
    with pytest.raises(RunError, match=re.escape(words)):
        parse_upload_run({"upload": SHA, "dataset": "v1-warmup", "mlps": "0"} | change)


