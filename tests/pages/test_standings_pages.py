"""The standings view's callback over HTTP: standings for everyone, per-MLP views only with the token."""

from __future__ import annotations

import numpy as np
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.leaderboard.standings_helpers import final_record_from
from tests.pages.served_app import app_on_fresh_store
from tests.pages.test_leaderboard_pages import post_callback
from whestboard.leaderboard import bootstrap_standings, mlp_frame, save_final_record, suite_scores

TOKEN = "standings-organizer-token"
SUITE_SEED = 918_273_645
OUTPUTS = [("lb-final-summary", "children"), ("lb-final-figure", "figure"), ("lb-final-figure", "style"),
           ("lb-final-note", "children")]
TEAMS = {"a-1": "alpha", "b-1": "beta", "c-1": "gamma", "d-1": "delta"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app on a store with the split board and a final record built from its graded per-MLP scores."""
    folder = tmp_path_factory.mktemp("lb-standings")
    with app_on_fresh_store(folder, WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as (http, _):
        helpers.split_board(folder / "files")
        record = final_record_from(mlp_frame(list(TEAMS), splits=("public",)), TEAMS, round_tag="v1-warmup",
                                   suite_seed=SUITE_SEED)
        save_final_record(record)
        yield http, record


def _standings(http, tab: str, token: str | None, round_tag: str = "v1-warmup"):
    return post_callback(http, OUTPUTS, [("lb-standings-tab", "active_tab", tab), ("lb-token", "value", token),
                                         ("lb-revision", "data", 0), ("lb-team", "value", None)],
                         [("lb-round", "data", round_tag)])


def test_without_the_token_the_standings_and_tie_breaks_show_but_no_per_mlp_view(served):
    http, record = served
    for tab in ("rank", "wins", "fragility"):
        text, body = _standings(http, tab, None)
        assert "lb-final-refused" in text and body["lb-final-figure"]["figure"] == {}
        assert str(SUITE_SEED) not in text
        for team in TEAMS.values():
            assert team in text
    text, body = _standings(http, "shakeup", None)
    assert any(t.get("name") == "finalists" for t in body["lb-final-figure"]["figure"]["data"])
    assert str(SUITE_SEED) not in text
    for tie in record["tie_breaks"]:
        assert ", ".join(tie["teams"]) + ": paired test p" in text


def test_with_the_token_the_heatmap_is_the_bootstrap_of_the_records_suite(served):
    http, record = served
    text, body = _standings(http, "rank", TOKEN)
    assert str(SUITE_SEED) in text
    suite = suite_scores(record)
    assert len(suite.mlp_ids) == 4 and suite.n_dropped == 0  # the four public MLPs every finalist has
    expected = bootstrap_standings(suite.scores, suite.teams)
    heat = body["lb-final-figure"]["figure"]["data"][0]
    assert heat["y"] == suite.teams
    np.testing.assert_allclose(np.array(heat["z"], float), np.round(expected.rank_at_most, 4))


def test_a_round_without_a_final_says_how_to_run_one(served):
    http, _ = served
    _, body = _standings(http, "shakeup", None, round_tag="v1-phase1")
    alert = body["lb-final-summary"]["children"]["props"]
    assert alert["id"] == "lb-final-missing"
    assert "No final evaluation has been recorded for v1-phase1" in alert["children"]
    assert "python -m whestboard final --round v1-phase1" in alert["children"]
    assert "/final page" in alert["children"]
    assert body["lb-final-figure"]["style"] == {"display": "none"}
