"""The leaderboard's callbacks over HTTP (no browser): private and rerun numbers only with the organizer token."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.pages.ranking_request import ranking_request
from tests.pages.served_app import app_on_fresh_store
from whestboard.compare import load_side, verdict

TOKEN = "page-organizer-token"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app on a store holding a board with private and rerun results, and the organizer token set."""
    folder = tmp_path_factory.mktemp("lb-pages")
    with app_on_fresh_store(folder, WHESTBOARD_ORGANIZER_TOKEN=TOKEN) as (http, _):
        yield http, helpers.split_board(folder / "files")


def post_callback(http, outputs, inputs, state=(), output_key=None):
    """One callback as the renderer posts it; the answer's JSON text and body."""
    out = "...".join(f"{i}.{p}" for i, p in outputs)
    payload = {"output": output_key or (f"..{out}.." if len(outputs) > 1 else out),
               "outputs": [{"id": i, "property": p} for i, p in outputs] if len(outputs) > 1
               else {"id": outputs[0][0], "property": outputs[0][1]},
               "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
               "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
               "changedPropIds": [f"{inputs[0][0]}.{inputs[0][1]}"]}
    response = http.post("/_dash-update-component", json=payload)
    assert response.status_code == 200, response.data[:500]
    return response.get_data(as_text=True), response.get_json()["response"]


BOARD_OUTPUTS = [("lb-scatter", "figure"), ("lb-highlight-index", "data"), ("lb-summary", "children"),
                 ("lb-team", "options"), ("lb-split-note", "children"), ("lb-flags", "children"),
                 ("lb-ties", "children")]


def _board(http, split: str, token: str | None):
    return post_callback(http, BOARD_OUTPUTS, [("lb-y", "value", "score"), ("lb-x", "value", "flops"),
                                       ("lb-revision", "data", 0), ("lb-split", "value", split),
                                       ("lb-token", "value", token)],
                 [("lb-round", "data", "v1-warmup"), ("lb-team", "value", None)])


def post_ranking(http, round_tag: str = "v1-warmup", split: str = "public", token: str | None = None,
                 team: str | None = None, state: dict | None = None, filter_text: str = "",
                 trigger: str | dict | None = None):
    """The ranking's callback as the renderer posts it (``ranking_request``); the answer's text, body and the
    body's rows (``ranking_rows``)."""
    key = next(k for k in http.callback_map if k.startswith("..lb-ranking-body.children"))
    payload = ranking_request(key, round_tag, split, token, team, state, filter_text, trigger)
    response = http.post("/_dash-update-component", json=payload)
    assert response.status_code == 200, response.data[:500]
    body = response.get_json()["response"]
    return response.get_data(as_text=True), body, ranking_rows(body)


def _text(component) -> str:
    """The text a component tree shows."""
    if isinstance(component, dict):
        return _text(component.get("props", {}).get("children"))
    if isinstance(component, list):
        return "".join(_text(c) for c in component)
    return "" if component is None else str(component)


def _href(component) -> str | None:
    if isinstance(component, dict):
        props = component.get("props", {})
        return props.get("href") or _href(props.get("children"))
    if isinstance(component, list):
        return next((h for h in map(_href, component) if h), None)
    return None


def ranking_rows(body) -> list[dict]:
    """The ranking table's rows as sent: per column its text, and ``COLUMN.value`` / ``COLUMN.href`` /
    ``COLUMN.title`` / ``style`` where a cell or row carries one; ``submission_id``, the row's key."""
    rows = []
    for tr in body["lb-ranking-body"]["children"]:
        row = {"style": tr["props"].get("style"), "submission_id": tr["props"].get("data-key")}
        for td in tr["props"]["children"]:
            props, col = td["props"], td["props"]["data-col"]
            row[col] = _text(td)
            for attr, name in (("data-value", "value"), ("title", "title")):
                if attr in props:
                    row[f"{col}.{name}"] = props[attr]
            if _href(td):
                row[f"{col}.href"] = _href(td)
        rows.append(row)
    return rows


def _numbers(value) -> list[float]:
    """Every number anywhere in a response, typed arrays (plotly's base64 ``bdata``) decoded too."""
    if isinstance(value, dict) and "bdata" in value and "dtype" in value:
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"])).astype(float).tolist()
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, int | float) and not isinstance(value, bool) else []


def _strings(value) -> list[str]:
    """Every text anywhere in a response (as the page shows it, JSON escapes undone)."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _strings(v)]
    if isinstance(value, list):
        return [t for v in value for t in _strings(v)]
    return [value] if isinstance(value, str) else []


def _leaks(body, private: dict) -> list[float]:
    """Every number in ``body`` that equals a private one as ``pytest.approx(secret, rel=1e-9)`` judges it
    (its default ``abs=1e-12`` included, and infinities equal only to themselves), one entry per match.
    Compared as one array against all secrets at once: a response holds thousands of numbers, and an
    ``approx`` object per pair cost most of this module's time."""
    secret = np.array([n for k, v in private.items() for n in (v if k.endswith("_mlps") else [v])], dtype=float)
    numbers = np.array(_numbers(body), dtype=float)
    with np.errstate(invalid="ignore"):
        tolerance = np.where(np.isfinite(secret), np.maximum(1e-9 * np.abs(secret), 1e-12), 0.0)
        close = np.abs(numbers[:, None] - secret[None, :]) <= tolerance
    rows, _ = np.nonzero(close | (numbers[:, None] == secret[None, :]))
    return numbers[rows].tolist()


@pytest.mark.parametrize("token", [None, "", "wrong"])
@pytest.mark.parametrize("split", ["public", "private", "rerun"])
def test_the_board_callback_holds_no_private_number_without_the_token(served, split, token):
    http, private = served
    text, body = _board(http, split, token)
    assert _leaks(body, private) == []
    _, ranking, rows = post_ranking(http, split=split, token=token)
    assert _leaks(ranking, private) == []
    teams = [r["team"] for r in rows if not r["team"].startswith("baseline: ")]
    assert teams == ["alpha", "beta", "gamma", "delta"]  # the public ranking (the shipped baselines rank too)
    if split != "public":
        assert f"The {split} split is shown only with the organizer token" in json.dumps(body["lb-split-note"])


def test_with_the_token_the_private_and_rerun_rankings_are_served(served):
    http, private = served
    _, body = _board(http, "private", TOKEN)
    _, _, rows = post_ranking(http, split="private", token=TOKEN)
    assert [r["team"] for r in rows] == ["gamma", "beta", "alpha", "delta"]
    assert {r["team"]: r["score_text.value"] for r in rows}["alpha"] == pytest.approx(private["alpha_private"])
    assert body["lb-split-note"]["children"] is None
    _, _, [row] = post_ranking(http, split="rerun", token=TOKEN)
    assert row["team"] == "beta" and row["score_text.value"] == pytest.approx(private["beta_rerun"])
    assert row["n_failed_mlps"] == "1 of 4 (1 time)" and row["n_failed_mlps.value"] == 1
    assert row["flags"] == "" and "flags.title" not in row  # a failed MLP is counted, never a flag


def test_each_ranking_row_links_to_its_paired_comparison_with_the_leader(served):
    http, _ = served
    _, _, rows = post_ranking(http)
    leader = next(r for r in rows if r["rank"] == "1")["submission_id"]
    linked = [r for r in rows if r.get("vs_leader.href")]
    assert len(linked) >= 4
    for row in linked:
        href = row["vs_leader.href"]
        assert row["vs_leader"].endswith("compare" if row["submission_id"] == leader else "vs #1")
        query = parse_qs(urlparse(href).query)
        assert urlparse(href).path == "/compare" and query["a"] == [f"sub:{row['submission_id']}"]
        assert query.get("b") == (None if row["submission_id"] == leader else [f"sub:{leader}"])
    other = next(r for r in linked if r["submission_id"] != leader)
    paired = verdict(load_side(f"sub:{other['submission_id']}"), load_side(f"sub:{leader}"))
    assert paired["n_shared"] > 0  # the link opens a comparison, not an error


PUBPRIV = [("lb-pubpriv", "figure"), ("lb-pubpriv-note", "children")]


def _pubpriv(http, token):
    return post_callback(http, PUBPRIV, [("lb-colour", "value", "flag"), ("lb-token", "value", token),
                                 ("lb-revision", "data", 0), ("lb-team", "value", None)],
                 [("lb-round", "data", "v1-warmup")])


def test_public_against_private_is_built_only_for_the_organizer(served):
    http, private = served
    _, body = _pubpriv(http, "wrong")
    assert _leaks(body, private) == []
    assert "Shown with the organizer token" in body["lb-pubpriv-note"]["children"]
    _, body = _pubpriv(http, TOKEN)
    points = [t for t in body["lb-pubpriv"]["figure"]["data"] if t.get("mode") == "markers" and t.get("x")]
    ys = sorted(y for t in points for y in _numbers(t["y"]))
    assert ys == pytest.approx(sorted([private[f"{t}_private"] for t in ("alpha", "beta", "gamma", "delta")]))


def test_the_team_panel_from_the_ranking_shows_history_without_private_numbers(served):
    """The click itself is chosen in the browser (tests/pages/test_leaderboard_browser.py); here the panel."""
    http, private = served
    _, _, rows = post_ranking(http)
    assert any(r["team"] == "alpha" for r in rows)  # the button the click comes from is in the table
    text, body = post_callback(http, [("lb-team-panel", "children")],
                       [("lb-team", "value", "alpha"), ("lb-revision", "data", 0), ("lb-token", "value", None)],
                       [("lb-round", "data", "v1-warmup")])
    assert _leaks(body, private) == []
    assert "Team alpha" in text and "1 graded submissions" in text
    assert "alpha: score over time and best so far" in text


def test_the_team_panel_gives_the_per_mlp_share_in_a_priced_round(served):
    http, private = served
    _, body = post_callback(http, [("lb-team-panel", "children")],
                    [("lb-team", "value", "delta"), ("lb-revision", "data", 0), ("lb-token", "value", None)],
                    [("lb-round", "data", "v1-warmup")])
    share = 1e6 / 2e10  # every one of delta's public MLPs: F = 1e6, C = 2e10
    shown = " ".join(_strings(body))
    assert (f"Instrumented share F / C of its best submission's 10 MLPs: lowest {share:.2g}, median {share:.2g}, "
            f"highest {share:.2g}.") in shown
    assert "residual arbitrage: F / C = 5e-05" in shown
    assert "overfitting" not in shown and _leaks(body, private) == []
