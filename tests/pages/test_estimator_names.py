"""One name per estimator: a cumulant variant reads the same in the lab's menu, the convergence legend and the
convergence page's note on missing baselines (the playground's table: tests/scoring/test_playground.py)."""

from __future__ import annotations

import pytest

from whestboard.band import BASELINE_LABELS
from whestboard.scoring import CUMULANT_KINDS, builtin_choices


@pytest.fixture(scope="module")
def convergence():
    import app

    app.the_app()  # registers the pages
    from pages import convergence

    return convergence


def _text(component) -> str:
    parts, stack = [], [component]
    while stack:
        node = stack.pop(0)
        if isinstance(node, str):
            parts.append(node)
        elif isinstance(node, (list, tuple)):
            stack[:0] = list(node)
        elif getattr(node, "children", None) is not None:
            stack.insert(0, node.children)
    return "".join(parts)


def test_the_lab_menu_and_the_legend_name_each_variant_alike():
    menu = {c["value"]: c["label"] for c in builtin_choices()}
    banded = [spec for spec in CUMULANT_KINDS if spec in BASELINE_LABELS]
    assert banded
    for spec in banded:
        assert BASELINE_LABELS[spec] == menu[spec], spec


def test_the_missing_baselines_note_names_them_as_the_legend_does(convergence):
    """It lowered the whole name: "cumulant propagation, k = 3 (base, factored third cumulant)" beside a legend
    of "K = 3 (BASE, ...)"."""
    missing = ["cumulant:3", "cumulant:3:simple"]
    text = _text(convergence._baseline_panel(missing))
    for spec in missing:
        assert BASELINE_LABELS[spec] in text, text
    assert "k = 3" not in text
