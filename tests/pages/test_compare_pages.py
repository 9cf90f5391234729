"""The compare page without a browser: what its two budget curves say before anything is swept."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("private_state")


@pytest.fixture(scope="module")
def page():
    import app

    app.the_app()  # registers the pages
    from pages import compare

    return compare


def _by_id(component) -> dict:
    """Every component with an id in a rendered tree, by id."""
    return {c.id: c for c in [component, *component._traverse()] if isinstance(getattr(c, "id", None), str)}


def test_a_ladder_with_nothing_swept_yet_is_not_no_budgets_and_draws_no_empty_table(page):
    """The README's compare example opens its curves on the default ladder with no point stored: the paired
    difference says that no budget has a pair yet (it said "no budgets chosen" beside a chosen ladder), and
    no table of headers over nothing is drawn under it."""
    body = page._curves("v1-warmup", "mean", "cov", page.CURVE_LADDER, "0:4", "score", 0)
    parts = _by_id(body)
    figure = parts["compare-curve-diff"].figure
    texts = [a.text for a in figure.layout.annotations]
    assert "no budget has a pair to draw yet" in texts and "no budgets chosen" not in texts, texts
    assert figure.layout.xaxis.range is not None  # it spans the ladder's budgets
    assert "compare-curve-table" not in parts
    assert "compare-curve-graph" in parts  # the curves themselves are still drawn


def test_the_same_estimator_on_both_sides_is_one_curve_and_says_so(page):
    """Two submissions of one estimator (the leaderboard's 'vs #1' between two mc:1B runs) open the curves on
    the same spec for A and B: the sweep holds it once, so the page draws one curve and says A − B is 0,
    where it had zipped two sides with one curve and answered 400."""
    body = page._curves("v1-warmup", "mc:1B", "mc:1B", page.CURVE_LADDER, "0:4", "score", 0)
    parts = _by_id(body)
    assert "A and B are the same estimator (mc:1B)" in parts["compare-curve-same"].children
    assert "compare-curve-graph" in parts and "not scored yet" in parts["compare-curve-missing"].children
    assert "compare-curve-diff" not in parts and "compare-curve-table" not in parts
