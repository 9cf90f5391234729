"""A run is named by its id or by the start of it the pages show, never by a start two runs share."""

from __future__ import annotations

import json

import pytest

from tests.upstream import make_official
from whestboard.cli import main
from whestboard.data import open_dataset
from whestboard.scoring import _run_records, resolve_estimator, rulebook_for
from whestboard.scoring._inputs import RunError
from whestboard.scoring._runs import RunRequest, run_and_record

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture
def twins(tmp_path, monkeypatch) -> list[str]:
    """Two runs whose ids share their first 8 characters (ids are random: made so here)."""
    dataset = open_dataset(make_official(tmp_path / "ds", seeds=[7, 8, 9, 10]))
    ids = iter(["abcdef12" + "0" * 24, "abcdef12" + "1" * 24])
    monkeypatch.setattr(_run_records.uuid, "uuid4", lambda: type("U", (), {"hex": next(ids)})())
    return [run_and_record(RunRequest(dataset, None, resolve_estimator(kind), rulebook_for(None)),
                           use_cache=False).run_id for kind in ("mean", "cov")]


def test_a_shared_start_is_refused_naming_the_runs_and_a_longer_one_names_one(twins, capsys):
    assert _run_records.resolve_run_id(twins[0]) == twins[0]
    assert _run_records.resolve_run_id("abcdef120") == twins[0] and _run_records.resolve_run_id("ABCDEF121") == twins[1]
    with pytest.raises(RunError, match=r"run id 'abcdef12' is the start of 2 runs \(abcdef12"):
        _run_records.resolve_run_id("abcdef12")
    assert _run_records.resolve_run_id("abcde") is None  # shorter than the pages show: never a guess
    assert _run_records.resolve_run_id("not-hex!") is None and _run_records.resolve_run_id("ffffffff") is None
    assert main(["compare", "run:abcdef12", "run:abcdef121"]) == 2
    err = capsys.readouterr().err
    assert "run id 'abcdef12' is the start of 2 runs" in err and "give more of the id" in err
    assert main(["compare", "run:abcdef120", "run:abcdef121", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_shared"] == 4
