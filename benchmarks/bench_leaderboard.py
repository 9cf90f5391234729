"""How the leaderboard holds up with 10,000 submissions: response times and payload sizes.

Fills a temporary store (never the real one) with SYNTHETIC submissions, each
with per-MLP results, then drives the page through Flask's test client the
way the browser does: the page route, the board callback (scatter + ranking),
the timeline, a team highlight, an axis toggle and the CSV export. Synthetic
numbers exist only here, to load the page; nothing of them is shipped.

    .venv/bin/python benchmarks/bench_leaderboard.py [--submissions 10000] [--mlps 50] [--repeats 3]

Each submission carries ``--mlps`` public and as many private per-MLP results
(100 MLPs, as the grader scores a phase). Targets: the board callback (scatter,
ranking with its integrity flags) under 1.5 s cold and 0.2 s warm, a highlight
under 0.3 s, and no response over 2.5 MB; the organizer's private board is
timed the same way.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flask_dash import TestClientCaller  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BOARD_COLD_TARGET_S = 1.5
BOARD_TARGET_S = 0.2
TIMELINE_TARGET_S = 1.0
HIGHLIGHT_TARGET_S = 0.3
TOKEN = "benchmark-organizer-token"
PAYLOAD_TARGET_BYTES = 2_500_000
ROUND_SHARE = {"v1-warmup": 0.1, "v1-phase1": 0.2, "v2-phase2": 0.7}


def synthetic(n_subs: int, n_mlps: int, seed: int = 0):
    """Plausible-looking submissions for load only: lognormal scores around MC@B, spread over months.

    Every submission has ``n_mlps`` public and ``n_mlps`` private MLPs (its aggregates are the public
    ones'); about one in 20 is nominated.
    """
    sys.path.insert(0, str(REPO))
    from whestboard.leaderboard.store import MLPResult, Submission
    from whestboard.rules.rounds import get_round

    rng = np.random.default_rng(seed)
    teams = [f"team-{i:03d}" for i in range(300)]
    start = datetime(2026, 3, 1, tzinfo=UTC)
    subs, mlps = [], []
    rounds = rng.choice(list(ROUND_SHARE), size=n_subs, p=list(ROUND_SHARE.values()))
    for i, tag in enumerate(rounds):
        rnd = get_round(tag)
        sid = f"synthetic-{i:05d}"
        flops = np.full(2 * n_mlps, rnd.budget * 10 ** rng.uniform(-4, 0))
        failed = rng.random(2 * n_mlps) < 0.01
        mse = rnd.mc_at_bm(0.2) * 10 ** rng.normal(0, 1.2) * rng.lognormal(0, 0.5, 2 * n_mlps)
        mult = np.where(failed, 1.0, np.maximum(0.1, flops / rnd.budget))
        score = mse * mult
        public = slice(0, n_mlps)
        subs.append(Submission(
            submission_id=sid, team=str(rng.choice(teams)), round=tag,
            submitted_at=start + timedelta(minutes=int(rng.integers(0, 200_000))), status="graded",
            whestbench_version="0.16.2", flopscope_version="0.12.4", mean_flops_used=float(flops.mean()),
            final_layer_mse=float(mse[public].mean()), adjusted_score=float(score[public].mean()),
            mean_multiplier=float(mult[public].mean()), n_failed_mlps=int(failed[public].sum()), n_mlps=n_mlps,
            mean_effective_compute=float(flops[public].mean()), dataset="synthetic", source="benchmark",
            nominated=bool(rng.random() < 0.05),
        ))
        mlps += [MLPResult(sid, m % n_mlps, float(mse[m]), float(score[m]), bool(failed[m]), None, float(flops[m]),
                           float(flops[m]), float(mult[m]), None, "public" if m < n_mlps else "private",
                           "time" if failed[m] else None) for m in range(2 * n_mlps)]
    return subs, mlps


class Client(TestClientCaller):
    """The leaderboard's callbacks through the Flask test client, timed and weighed."""

    def __init__(self, app) -> None:
        super().__init__(app.server)
        self.app = app

    def registered_output(self, *parts: str) -> str:
        """The output key Dash registered (allow_duplicate outputs carry a hash suffix)."""
        return next(k for k in self.app.callback_map if all(p in k for p in parts))

    def page(self, search: str):
        return self.router("/leaderboard", search)

    def board(self, round_tag: str, y: str = "score", team: str | None = None, revision: int = 0,
              split: str = "public", token: str | None = None):
        return self.callback(
            [("lb-scatter", "figure"), ("lb-highlight-index", "data"), ("lb-ranking", "rowData"),
             ("lb-ranking", "getRowStyle"), ("lb-summary", "children"), ("lb-team", "options"),
             ("lb-split-note", "children"), ("lb-flags", "children"), ("lb-ties", "children")],
            [("lb-y", "value", y), ("lb-x", "value", "flops"), ("lb-revision", "data", revision),
             ("lb-split", "value", split), ("lb-token", "value", token)],
            [("lb-round", "data", round_tag), ("lb-team", "value", team)],
        )

    def public_private(self, round_tag: str, token: str | None):
        return self.callback(
            [("lb-pubpriv", "figure"), ("lb-pubpriv-note", "children")],
            [("lb-colour", "value", "flag"), ("lb-token", "value", token), ("lb-revision", "data", 0),
             ("lb-team", "value", None)], [("lb-round", "data", round_tag)],
        )

    def team_panel(self, round_tag: str, team: str):
        return self.callback([("lb-team-panel", "children")],
                             [("lb-team", "value", team), ("lb-revision", "data", 0), ("lb-token", "value", None)],
                             [("lb-round", "data", round_tag)])

    def timeline(self, revision: int = 0):
        return self.callback([("lb-timeline", "figure"), ("lb-timeline-index", "data")],
                             [("lb-revision", "data", revision)], [("lb-team", "value", None)])

    def highlight(self, round_tag: str, team: str, scatter_index: int, timeline_index: int):
        key = self.registered_output("lb-scatter.figure@", "lb-timeline.figure@")
        outputs = [tuple(part.split("@")[0].rsplit(".", 1)) for part in key[2:-2].split("...")]
        return self.callback(
            outputs, [("lb-team", "value", team)], output_key=key, state=[
            ("lb-round", "data", round_tag), ("lb-y", "value", "score"), ("lb-x", "value", "flops"),
            ("lb-highlight-index", "data", scatter_index), ("lb-timeline-index", "data", timeline_index)],
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=10_000)
    parser.add_argument("--mlps", type=int, default=50, help="public (and as many private) MLPs per submission")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wb-bench-lb-") as tmp:
        os.environ["WHESTBOARD_STATE_DIR"] = str(Path(tmp) / "state")
        os.environ["WHESTBOARD_DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
        os.environ["WHESTBOARD_ORGANIZER_TOKEN"] = TOKEN
        rows = run(args)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at end "
          "(other work on the machine slows every number)")
    width = max(len(r[0]) for r in rows)
    failed = False
    for label, value, unit, target in rows:
        verdict = ""
        if target is not None:
            ok = value <= target
            failed |= not ok
            verdict = f"  target {target:g}{unit}: {'ok' if ok else 'MISSED'}"
        shown = f"{value:,.0f} {unit}" if unit == "B" else f"{value:.3f} {unit}"
        print(f"{label:<{width}}  {shown:>14}{verdict}")
    return 1 if failed else 0


def run(args) -> list[tuple]:
    subs, mlps = synthetic(args.submissions, args.mlps)
    from whestboard.leaderboard import store

    started = time.perf_counter()
    store.upsert(subs, mlps)
    rows: list[tuple] = [(f"import {len(subs):,} submissions + {len(mlps):,} per-MLP rows (s)",
                          time.perf_counter() - started, "s", None)]
    started = time.perf_counter()
    import app as app_module

    rows.append(("app import (s)", time.perf_counter() - started, "s", None))
    client = Client(app_module.app)
    tag = "v2-phase2"
    n_round = sum(1 for s in subs if s.round == tag)
    t, n, _ = client.page(f"?round={tag}")
    rows += [("page route /leaderboard (s)", t, "s", None), ("payload: page route (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    t, n, body = client.board(tag)
    rows += [(f"board callback, cold ({n_round:,} dots in {tag}) (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: board (scatter + ranking + flags) (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    warm = [client.board(tag)[0] for _ in range(args.repeats)]
    rows.append((f"board callback, warm: median of {args.repeats} (s)", statistics.median(warm), "s", BOARD_TARGET_S))
    t, n, _ = client.board(tag, split="private", token=TOKEN)
    rows += [("board callback, private split (organizer), cold (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: private board (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    warm = [client.board(tag, split="private", token=TOKEN)[0] for _ in range(args.repeats)]
    rows.append((f"board callback, private split, warm: median of {args.repeats} (s)", statistics.median(warm), "s",
                 BOARD_TARGET_S))
    t, n, _ = client.public_private(tag, TOKEN)
    rows += [("public against private (organizer) (s)", t, "s", None),
             ("payload: public against private (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    t, n, _ = client.board(tag, y="mse")
    rows.append(("y axis -> MSE (s)", t, "s", BOARD_COLD_TARGET_S))
    scatter_index = body["response"]["lb-highlight-index"]["data"]
    t, n, tbody = client.timeline()
    rows += [(f"timeline callback, cold ({len(subs):,} dots) (s)", t, "s", None),
             ("payload: timeline (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    rows.append(("timeline callback, warm (s)", client.timeline()[0], "s", TIMELINE_TARGET_S))
    timeline_index = tbody["response"]["lb-timeline-index"]["data"]
    team = next(s.team for s in subs if s.round == tag)
    times = [client.highlight(tag, team, scatter_index, timeline_index) for _ in range(args.repeats)]
    rows += [(f"highlight a team (Patch): median of {args.repeats} (s)", statistics.median(t for t, _, _ in times),
              "s", HIGHLIGHT_TARGET_S),
             ("payload: highlight (bytes)", times[-1][1], "B", PAYLOAD_TARGET_BYTES)]
    t, n, _ = client.team_panel(tag, team)
    rows += [("team panel (history, failures) (s)", t, "s", None), ("payload: team panel (bytes)", n, "B", None)]
    started = time.perf_counter()
    response = client.http.get("/api/submissions.csv")
    rows += [("CSV export (s)", time.perf_counter() - started, "s", None),
             ("payload: CSV export (bytes)", len(response.data), "B", None)]
    started = time.perf_counter()
    store.upsert(subs[:1], [m for m in mlps if m.submission_id == subs[0].submission_id])
    rows.append(("re-import one unchanged submission (s)", time.perf_counter() - started, "s", None))
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
