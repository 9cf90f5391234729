"""A round too large to send dot by dot: density bins, every team's best exactly, the frontier, zoomed dots.

The page draws a round of more than ``DOT_LIMIT`` graded submissions as server-side density plus the
dots an organizer reads. Here the limit is lowered so that a field of 1,200 imported submissions is
"large"; every expectation is computed from the store's rows by brute force, not by the page's code.
"""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qs

import numpy as np
import pytest

from tests.leaderboard import submissions_helpers as helpers
from tests.pages.served_app import app_on_fresh_store
from tests.pages.test_leaderboard_pages import post_callback, post_ranking
from whestboard.leaderboard import import_files

ROUND = "v2-phase2"
LIMIT = 300
N_SUBMISSIONS = 1_200
N_TEAMS = 40


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app over a store holding a 1,200-submission round, with the dot limit lowered to 300."""
    folder = tmp_path_factory.mktemp("lb-scale")
    with app_on_fresh_store(folder) as (http, mp):
        from components.figures import leaderboard as figs

        mp.setattr(figs, "DOT_LIMIT", LIMIT)
        import_files([helpers.write_csvs(folder / "files", _field())])
        from whestboard.leaderboard import submissions_frame

        rows = submissions_frame(round_tag=ROUND)
        yield http, rows[rows["status"] == "graded"].reset_index(drop=True)


def _field() -> list:
    """Submissions spread over four decades of FLOPs and scores, 40 teams, a few failed runs."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(N_SUBMISSIONS):
        flops = 10 ** rng.uniform(8, 12)
        score = 10 ** rng.normal(-4, 0.8)
        row, mlps = helpers.submission_row(f"s{i:05d}", f"team-{rng.integers(N_TEAMS):02d}", round_tag=ROUND,
                                           scores=(score, score * 1.5), flops=(flops, flops), minutes=int(i))
        if i % 97 == 0:
            row = {**row, "status": "failed"}
        rows.append((row, mlps))
    return rows


def _call(http, outputs, inputs, state=(), output_key=None):
    """One callback as the renderer posts it; the answer's size in bytes and body."""
    text, body = post_callback(http, outputs, inputs, state, output_key)
    return len(text.encode()), body


def _board(http):
    outputs = [("lb-scatter", "figure"), ("lb-highlight-index", "data"), ("lb-summary", "children"),
               ("lb-team", "options"), ("lb-split-note", "children"), ("lb-flags", "children"),
               ("lb-ties", "children")]
    return _call(http, outputs, [("lb-y", "value", "score"), ("lb-x", "value", "flops"), ("lb-revision", "data", 0),
                                 ("lb-split", "value", "public"), ("lb-token", "value", None)],
                 [("lb-round", "data", ROUND), ("lb-team", "value", None)])


def _zoom(http, window, index):
    key = next(k for k in http.callback_map if "lb-scatter.figure@" in k and "lb-zoom-note" in k)
    outputs = [tuple(part.split("@")[0].rsplit(".", 1)) for part in key[2:-2].split("...")]
    relayout = {"xaxis.range[0]": window[0][0], "xaxis.range[1]": window[0][1],
                "yaxis.range[0]": window[1][0], "yaxis.range[1]": window[1][1]}
    return _call(http, outputs, [("lb-zoom-request", "data", relayout)], output_key=key,
                 state=[("lb-round", "data", ROUND), ("lb-y", "value", "score"), ("lb-x", "value", "flops"),
                        ("lb-highlight-index", "data", index)])[1]


def _values(array) -> np.ndarray:
    """A plotly array as the browser reads it: a list, or base64 typed data (with its shape)."""
    if isinstance(array, dict) and "bdata" in array:
        values = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).astype(float)
        return values.reshape([int(n) for n in str(array["shape"]).split(",")]) if "shape" in array else values
    return np.asarray(array, dtype=float)


def _trace(figure: dict, prefix: str) -> dict:
    return next(t for t in figure["data"] if str(t.get("name", "")).startswith(prefix))


def _ids(trace: dict) -> list[str]:
    return [row[1] for row in trace.get("customdata") or []]


def _best_per_team(graded):
    ordered = graded.sort_values(["adjusted_score", "submitted_at", "submission_id"], kind="mergesort")
    return ordered.drop_duplicates("team").set_index("submission_id")


def _frontier(graded) -> set[str]:
    """Brute force: a submission no other one matches or beats on both FLOPs and score."""
    x, y = graded["mean_flops_used"].to_numpy(), graded["adjusted_score"].to_numpy()
    beaten = ((x[None, :] <= x[:, None]) & (y[None, :] <= y[:, None])
              & ((x[None, :] < x[:, None]) | (y[None, :] < y[:, None]))).any(axis=1)
    return set(graded["submission_id"][~beaten])


def _inside(graded, x_range, y_range) -> np.ndarray:
    lx, ly = np.log10(graded["mean_flops_used"].to_numpy()), np.log10(graded["adjusted_score"].to_numpy())
    return (lx >= x_range[0]) & (lx <= x_range[1]) & (ly >= y_range[0]) & (ly <= y_range[1])


def test_a_large_round_shows_every_teams_best_exactly_the_frontier_and_the_density_of_the_rest(served):
    http, graded = served
    size, body = _board(http)
    figure = body["lb-scatter"]["figure"]
    assert len(graded) > LIMIT and size < 2_500_000
    best = _best_per_team(graded)
    shown = _trace(figure, "every team's best")
    assert sorted(_ids(shown)) == sorted(best.index) and best["team"].str.startswith("team-").sum() == N_TEAMS
    for row in shown["customdata"]:  # the hover's numbers are the stored ones, exactly
        assert (row[0], row[3], row[7]) == (best.loc[row[1], "team"], best.loc[row[1], "adjusted_score"],
                                            best.loc[row[1], "mean_flops_used"])
    frontier = _trace(figure, "frontier")
    assert set(_ids(frontier)) == _frontier(graded) and len(_ids(frontier)) == len(_frontier(graded))
    layout = figure["layout"]
    inside = _inside(graded, layout["xaxis"]["range"], layout["yaxis"]["range"])
    drawn = graded["submission_id"].isin(set(best.index) | _frontier(graded)).to_numpy()
    density = next(t for t in figure["data"] if t["type"] == "heatmap")
    assert _values(density["customdata"]).sum() == (inside & ~drawn).sum()
    dots = sum(len(_values(t["x"])) for t in figure["data"] if t["type"] == "scattergl")
    assert dots < len(graded) / 2  # the field is not sent dot by dot
    assert "counted on the server" in figure["layout"]["title"]["text"]


def test_zooming_fetches_every_dot_in_the_window_and_only_those(served):
    http, graded = served
    _, body = _board(http)
    index = body["lb-highlight-index"]["data"]
    lx, ly = np.log10(graded["mean_flops_used"]), np.log10(graded["adjusted_score"])
    window = ((float(lx.median()) - 0.4, float(lx.median()) + 0.4), (float(ly.median()) - 0.4, float(ly.median()) + 0.4))
    expected = graded["submission_id"][_inside(graded, *window)]
    assert 0 < len(expected) <= LIMIT
    answer = _zoom(http, window, index)
    [operation] = answer["lb-scatter"]["figure"]["operations"]
    assert operation["location"] == ["data", index - 1]
    trace = operation["params"]["value"]
    assert sorted(_ids(trace)) == sorted(expected)
    by_id = graded.set_index("submission_id")
    assert _values(trace["x"]) == pytest.approx(by_id.loc[_ids(trace), "mean_flops_used"].to_numpy(), rel=1e-4)
    assert f"{len(expected):,} graded submissions in the zoomed window" in answer["lb-zoom-note"]["children"]
    whole = body["lb-scatter"]["figure"]["layout"]
    answer = _zoom(http, (whole["xaxis"]["range"], whole["yaxis"]["range"]), index)
    trace = answer["lb-scatter"]["figure"]["operations"][0]["params"]["value"]
    assert _ids(trace) == [] and f"at most {LIMIT:,} remain" in answer["lb-zoom-note"]["children"]


def test_the_timeline_is_not_drawn_until_it_scrolls_into_view(served):
    """An organizer's change before the scroll draws nothing either."""
    http, _ = served
    outputs = [{"id": "lb-timeline", "property": "figure"}, {"id": "lb-timeline-index", "property": "data"}]
    payload = {"output": "..lb-timeline.figure...lb-timeline-index.data..", "outputs": outputs,
               "inputs": [{"id": "lb-timeline-wanted", "property": "data", "value": None},
                          {"id": "lb-revision", "property": "data", "value": 3}],
               "state": [{"id": "lb-team", "property": "value", "value": None}],
               "changedPropIds": ["lb-revision.data"]}
    answer = http.post("/_dash-update-component", json=payload)
    assert answer.status_code in (200, 204)  # 204: Dash's answer when every output is no_update
    assert "lb-timeline" not in (answer.get_json(silent=True) or {}).get("response", {})


def test_the_timeline_of_a_large_field_bins_every_submission_and_keeps_each_teams_best(served):
    http, graded = served
    size, body = _call(http, [("lb-timeline", "figure"), ("lb-timeline-index", "data")],
                       [("lb-timeline-wanted", "data", 1), ("lb-revision", "data", 0)], [("lb-team", "value", None)])
    figure = body["lb-timeline"]["figure"]
    from whestboard.leaderboard import submissions_frame

    everything = submissions_frame()
    n_graded = int((everything["status"] == "graded").sum())
    density = next(t for t in figure["data"] if t["type"] == "heatmap")
    assert _values(density["customdata"]).sum() == n_graded and size < 2_500_000
    bests = _trace(figure, "every team's best per round")
    per_round = everything[everything["status"] == "graded"].groupby("round")["team"].nunique().sum()
    assert len(_ids(bests)) == per_round
    assert json.dumps(figure).count("record so far") >= 1
    from whestboard.leaderboard import mlp_variance, with_mc_reference

    graded = with_mc_reference(everything[everything["status"] == "graded"], mlp_variance())
    graded = graded[np.isfinite(graded["vs_mc"]) & (graded["vs_mc"] > 0)]
    expected_bests, expected_records = set(), set()
    for _, rows in graded.groupby(["round", "team"]):  # by brute force: the highest, then earliest, then lowest id
        top = rows[rows["vs_mc"] == rows["vs_mc"].max()]
        expected_bests.add(min(zip(top["submitted_at"], top["submission_id"], strict=True))[1])
    for _, rows in graded.groupby("round"):
        record = -np.inf
        for _moment, sid, value in sorted(zip(rows["submitted_at"], rows["submission_id"], rows["vs_mc"], strict=True)):
            if value > record:
                expected_records.add(sid)
                record = value
    assert set(_ids(bests)) == expected_bests
    records = [t for t in figure["data"] if str(t.get("name", "")).endswith("record so far")]
    assert {sid for t in records for sid in _ids(t)} == expected_records


def _ranked(graded):
    """Every team's best in the public ranking's order, by brute force: score, then time, then id."""
    return _best_per_team(graded).reset_index()


SORT_FLOPS = {"type": "lb-ranking-sort", "col": "mean_flops_used"}


def test_the_ranking_is_sorted_and_paged_on_the_server_one_page_per_answer(served):
    http, graded = served
    ranked = _ranked(graded)
    n = len(ranked)
    assert n > 25 + 1  # more teams than one page
    text, body, rows = post_ranking(http, ROUND)
    assert [r["submission_id"] for r in rows] == ranked["submission_id"].tolist()[:25]
    ranks = [int(r["rank"]) for r in rows]
    assert ranks[0] == 1 and ranks == sorted(ranks)  # tied teams share a rank
    assert body["lb-ranking-pager"]["children"] == f"page 1 of 2 · teams 1–25 of {n}"
    assert body["lb-ranking-prev"]["disabled"] and not body["lb-ranking-next"]["disabled"]
    assert len(rows) == 25 and len(text.encode()) < 25 * 4_000  # one page of rows, whatever the field

    _, body, rows = post_ranking(http, ROUND, trigger=SORT_FLOPS)  # a header click: ascending
    state = body["lb-ranking-state"]["data"]
    assert state == {"sort": "mean_flops_used", "descending": False, "page": 1, "filter": ""}
    by_flops = ranked.sort_values("mean_flops_used", kind="mergesort")["submission_id"].tolist()
    assert [r["submission_id"] for r in rows] == by_flops[:25]
    assert [r["mean_flops_used.value"] for r in rows] == sorted(r["mean_flops_used.value"] for r in rows)
    header = body['{"col":"mean_flops_used","type":"lb-ranking-sort"}']["children"]
    assert header == "Mean FLOPs ▲" and body['{"col":"rank","type":"lb-ranking-sort"}']["children"] == "#"

    _, body, rows = post_ranking(http, ROUND, state=state, trigger=SORT_FLOPS)  # again: descending
    state = body["lb-ranking-state"]["data"]
    assert state["descending"] and [r["submission_id"] for r in rows] == by_flops[::-1][:25]
    _, body, rows = post_ranking(http, ROUND, state=state, trigger="lb-ranking-next")
    assert body["lb-ranking-state"]["data"]["page"] == 2
    assert [r["submission_id"] for r in rows] == by_flops[::-1][25:]
    assert body["lb-ranking-pager"]["children"] == f"page 2 of 2 · teams 26–{n} of {n}"
    assert body["lb-ranking-next"]["disabled"] and not body["lb-ranking-prev"]["disabled"]


def test_the_filter_and_a_chosen_team_pick_the_rows_and_the_page_and_the_team_is_highlighted(served):
    http, graded = served
    ranked = _ranked(graded)
    _, body, rows = post_ranking(http, ROUND, filter_text="TEAM-0", trigger="lb-ranking-filter")
    expected = ranked[ranked["team"].str.lower().str.contains("team-0", regex=False)
                      | ranked["submission_id"].str.lower().str.contains("team-0", regex=False)]
    assert [r["team"] for r in rows] == expected["team"].tolist() and len(rows) == 10
    assert body["lb-ranking-pager"]["children"].endswith(f"of 10 (filtered from {len(ranked)})")
    assert body["lb-ranking-state"]["data"]["filter"] == "TEAM-0"

    team = ranked["team"].iloc[30]  # on the second page
    _, body, rows = post_ranking(http, ROUND, team=team, trigger="lb-team")
    assert body["lb-ranking-state"]["data"]["page"] == 2
    marked = [r["team"] for r in rows if r["style"]]
    assert marked == [team] and next(r for r in rows if r["style"])["style"]["backgroundColor"] == "#fde2e2"


def test_the_rankings_sort_page_and_filter_go_in_the_address_and_come_back_from_it(served):
    http, _ = served
    from pages import leaderboard as page

    key = next(k for k in http.callback_map if k.startswith("..lb-address.data"))
    state = {"sort": "vs_mc", "descending": True, "page": 2, "filter": "team"}
    payload = {"output": key,
               "outputs": [{"id": "lb-address", "property": "data"},
                           [{"id": {"type": "lb-round-link", "round": ROUND}, "property": "href"}]],
               "inputs": [{"id": i, "property": p, "value": v} for i, p, v in (
                   ("lb-team", "value", None), ("lb-y", "value", "score"), ("lb-x", "value", "flops"),
                   ("lb-split", "value", "public"), ("lb-standings-tab", "active_tab", "shakeup"),
                   ("lb-ranking-state", "data", state), ("lb-colour", "value", "spend"))],
               "state": [{"id": "lb-round", "property": "data", "value": ROUND},
                         [{"id": {"type": "lb-round-link", "round": ROUND}, "property": "id",
                           "value": {"type": "lb-round-link", "round": ROUND}}]],
               "changedPropIds": ["lb-ranking-state.data"]}
    answer = http.post("/_dash-update-component", json=payload).get_json()["response"]
    address = answer["lb-address"]["data"]
    assert address == f"?round={ROUND}&sort=-vs_mc&page=2&filter=team"
    link = answer['{"round":"v2-phase2","type":"lb-round-link"}']["href"]
    assert link == f"/leaderboard?round={ROUND}&sort=-vs_mc&filter=team"  # another round starts at its page 1

    query = {k: v[0] for k, v in parse_qs(address[1:]).items()}
    layout = page.layout(**query)
    found = {}

    def walk(node):
        if hasattr(node, "id") and node.id in ("lb-ranking-state", "lb-ranking-filter"):
            found[node.id] = node
        children = getattr(node, "children", None)
        for child in children if isinstance(children, list | tuple) else [children]:
            if child is not None and not isinstance(child, str | int | float):
                walk(child)

    walk(layout)
    assert found["lb-ranking-state"].data == state and found["lb-ranking-filter"].value == "team"
