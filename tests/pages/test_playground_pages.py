"""The playground page without a browser: links, controls, the URL it writes and what one response weighs."""

from __future__ import annotations

import json

import plotly
import pytest

from whestboard.data import cached_truth, parse_shape

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture(scope="module")
def page():
    import app

    app.the_app()  # registers the pages
    from pages import playground

    return playground


def test_a_link_is_read_and_its_mistakes_named(page):
    values, problems = page._from_link("64", "8", "12345", "30000", "300", "v1-warmup")
    assert values == {"width": 64, "depth": 8, "seed": 12345, "samples": "30000", "mc": 300, "round": "v1-warmup"}
    assert problems == []
    values, problems = page._from_link("2", None, None, "5", None, "v9")
    assert (values["width"], values["depth"], values["seed"]) == (page.DEFAULT_WIDTH, page.DEFAULT_DEPTH,
                                                                   page.DEFAULT_SEED)
    assert problems[0].startswith("The link's width 2 is outside 4–1024")
    assert problems[1].startswith("The link's truth samples 5 is outside 100–100000000")
    assert problems[2].startswith("The link names round 'v9'")


def test_the_url_holds_every_choice_and_reads_back_the_same(page):
    mc_position = page.panels.MC_CHOICES.index(3000)
    asked = page._asked(256, 8, "4611686018427387911", "30000", mc_position, "v2-phase2", [])
    search = page._search(asked)
    assert search == "?width=256&depth=8&seed=4611686018427387911&samples=30000&mc=3000&round=v2-phase2"
    query = dict(part.split("=") for part in search[1:].split("&"))
    values, problems = page._from_link(query["width"], query["depth"], query["seed"], query["samples"],
                                       query["mc"], query["round"])
    assert not problems and values["seed"] == 2**62 + 7
    assert page._search(page._asked(16, 4, "7", "auto", page.panels.mc_position(1000), "auto", None)) == \
        "?width=16&depth=4&seed=7"


def test_one_response_stays_under_two_megabytes_at_competition_width(page):
    """The heaviest render a quick callback sends (256 x 8; wider shapes come back binned the same way)."""
    asked = page._asked(256, 8, "5", "auto", page.panels.mc_position(1000), "auto", [])
    rendered = page._render(page.play(asked.shape, asked.samples, asked.specs, asked.rulebook))
    size = len(json.dumps(rendered.to_plotly_json(), cls=plotly.utils.PlotlyJSONEncoder))
    assert size < 2 * 1024 * 1024, size


def test_a_bad_control_is_a_sentence_in_the_page(page):
    outputs = page._plan(8, 4, "not a seed", "auto", 4, "auto", [])
    alert = outputs[5]
    assert "seed 'not a seed' is not a number" in alert.children
    assert outputs[1] == [] and outputs[4] is True  # nothing drawn, nothing to keep


def test_a_large_shape_is_handed_to_the_background(page):
    outputs = page._plan(1024, 16, "3", "auto", 4, "auto", [])
    assert outputs[3] == {"params": outputs[2]} and outputs[1].id == "pg-waiting"
    assert cached_truth(parse_shape(1024, 16, 3), 10_000) is None  # nothing sampled here


def test_a_links_sample_count_between_the_sliders_stops_is_kept(page):
    values, problems = page._from_link("8", "4", "3", None, "500", None)
    assert values["mc"] == 500 and not problems
    at = page.panels.mc_position(500)
    assert page.panels.MC_CHOICES[at] != 500  # between the stops: the slider alone could not say it
    asked = page._asked(8, 4, "3", "auto", at, "auto", [], values["mc"])
    assert asked.mc == 500 and "mc=500" in page._search(asked)
    assert page._mc_readout(at, 500) == "500 samples per prediction"
    search, rendered = page._plan(8, 4, "3", "auto", at, "auto", [], 500)[:2]
    assert "mc=500" in search and "Monte Carlo, 500 samples" in json.dumps(rendered.to_plotly_json(),
                                                                            cls=plotly.utils.PlotlyJSONEncoder)
    moved = page._asked(8, 4, "3", "auto", at + 1, "auto", [], values["mc"])
    assert moved.mc == page.panels.MC_CHOICES[at + 1]  # the slider moved: its stop holds
