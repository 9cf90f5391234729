"""``python -m whestboard compare`` prints the comparison the core computes, from ids or report files."""

from __future__ import annotations

import json

import pytest

from tests.upstream import make_official
from whestboard.cli import main
from whestboard.compare import anatomy_inputs, anatomy_of, load_side, verdict
from whestboard.data import open_dataset
from whestboard.scoring import RunRequest, resolve_estimator, rulebook_for, run_and_record, whest_shaped

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return open_dataset(make_official(tmp_path_factory.mktemp("cli-cmp") / "ds", seeds=[7, 8, 9, 10]))


@pytest.fixture
def two_runs(dataset):
    return [run_and_record(RunRequest(dataset, None, resolve_estimator(kind), rulebook_for(None)))
            for kind in ("mean", "cov")]


def _json(capsys, *argv) -> dict:
    assert main(["compare", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_is_the_core_verdict_for_prefixed_and_bare_ids(capsys, two_runs):
    a, b = (r.run_id for r in two_runs)
    expected = verdict(load_side(f"run:{a}"), load_side(f"run:{b}"))
    assert _json(capsys, f"run:{a}", f"run:{b}") == json.loads(json.dumps(expected))
    assert _json(capsys, a, b)["score"] == expected["score"]


def test_two_score_json_reports_compare_like_their_runs(capsys, two_runs, tmp_path):
    paths = []
    for outcome, name in zip(two_runs, ("mean.json", "cov.json"), strict=True):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(whest_shaped(outcome.report)))
    from_files = _json(capsys, *map(str, paths))
    from_ids = _json(capsys, *(f"run:{r.run_id}" for r in two_runs))
    for key in ("score", "final_layer_mse", "n_shared", "per_mlp"):
        assert from_files[key] == from_ids[key]


def test_anatomy_flag_adds_the_anatomy_of_the_stored_predictions(capsys, two_runs, dataset):
    a, b = (load_side(f"run:{r.run_id}") for r in two_runs)
    out = _json(capsys, a.side_id, b.side_id, "--anatomy")
    assert out["anatomy"] == json.loads(json.dumps(anatomy_of(anatomy_inputs(a, b, dataset))))


def test_human_output_names_the_verdict_and_never_what_limits_an_interval_it_does_not_give(capsys, two_runs):
    """On 4 shared MLPs a paired test cannot reach 95%: no verdict, no interval, so nothing limits one."""
    assert main(["compare", *(f"run:{r.run_id}" for r in two_runs)]) == 0
    text = capsys.readouterr().out
    assert "4 shared MLPs" in text and "sign-flip p" in text
    assert "No verdict on score" in text and "No 95% interval on 4 shared MLP(s)" in text
    assert "limited by" not in text and "MLPs needed" not in text


@pytest.mark.parametrize(("argv", "message"), [
    (["nothing-here", "run:abc"], "neither a file, a run id nor a submission id"),
    (["run:abc", "run:def"], "no run 'abc'"),
])
def test_mistakes_are_one_line_errors(capsys, argv, message):
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_the_eight_characters_the_pages_show_name_the_run_and_runs_lists_them(capsys, two_runs):
    """The pages show run ids cut to 8 characters: compare takes them, and ``runs`` lists them."""
    a, b = (r.run_id for r in two_runs)
    expected = _json(capsys, f"run:{a}", f"run:{b}")
    assert _json(capsys, f"run:{a[:8]}", f"run:{b[:8]}") == expected
    assert _json(capsys, a[:8], b[:8])["score"] == expected["score"]
    assert main(["runs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[:3] == ["run", "created", "(UTC)"]
    rows = {line.split()[0]: line for line in listed[1:-1]}
    assert a[:8] in rows and b[:8] in rows and rows[a[:8]].endswith("  mean") and rows[b[:8]].endswith("  cov")
    assert listed[-1].startswith("2 run(s); compare two with `python -m whestboard compare run:")
    assert main(["runs", "--json", "--limit", "1"]) == 0
    [newest] = json.loads(capsys.readouterr().out)
    assert newest["run_id"] in (a, b) and len(newest["run_id"]) == 32



def test_the_runs_of_a_budget_curve_are_told_apart_by_their_budget(capsys):
    """A budget sweep records one run per budget: the same estimator on the same MLPs. ``runs`` and compare's
    menu named them alike ("cov · lab run … · v1-warmup · 4 MLPs") with different scores; both now say B."""
    from whestboard.compare import candidates
    from whestboard.data import get_dataset
    from whestboard.store import sci

    warmup = get_dataset("v1-warmup")
    budgets = (warmup.info.round.budget, 10**9)
    runs = {b: run_and_record(RunRequest(warmup, [0], resolve_estimator("mean"), rulebook_for("v1-warmup", b)))
            for b in budgets}
    assert main(["runs", "--dataset", "v1-warmup"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0].split()[5:7] == ["budget", "B"]
    rows = {line.split()[0]: line.split() for line in listed[1:-1]}
    for budget, outcome in runs.items():
        assert rows[outcome.run_id[:8]][5] == sci(budget)
    labels = {c["id"]: c["label"] for c in candidates() if c["kind"] == "run"}
    assert f" · B = {sci(10**9)} · " in labels[f"run:{runs[10**9].run_id}"]
    assert " · B = " not in labels[f"run:{runs[budgets[0]].run_id}"]  # the round's own B goes without saying
