"""How the leaderboard holds up with 10,000 submissions: response times and payload sizes.

Fills a temporary store (never the real one) with SYNTHETIC submissions, each
with per-MLP results, then drives the page through Flask's test client the
way the browser does: the page route, the board callback (scatter + ranking),
the timeline, a team highlight, an axis toggle and the CSV export. Synthetic
numbers exist only here, to load the page; nothing of them is shipped.

    .venv/bin/python benchmarks/bench_leaderboard.py [--submissions 10000] [--mlps 50] [--repeats 3]

Targets: a warm board callback under 1 s, a highlight under 0.3 s, and no
response over 2.5 MB.
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
BOARD_TARGET_S = 1.0
HIGHLIGHT_TARGET_S = 0.3
PAYLOAD_TARGET_BYTES = 2_500_000
ROUND_SHARE = {"v1-warmup": 0.1, "v1-phase1": 0.2, "v2-phase2": 0.7}


def synthetic(n_subs: int, n_mlps: int, seed: int = 0):
    """Plausible-looking submissions for load only: lognormal scores around MC@B, spread over months."""
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
        flops = np.full(n_mlps, rnd.budget * 10 ** rng.uniform(-4, 0))
        failed = rng.random(n_mlps) < 0.01
        mse = rnd.mc_at_bm(0.2) * 10 ** rng.normal(0, 1.2) * rng.lognormal(0, 0.5, n_mlps)
        mult = np.where(failed, 1.0, np.maximum(0.1, flops / rnd.budget))
        score = mse * mult
        subs.append(Submission(
            submission_id=sid, team=str(rng.choice(teams)), round=tag,
            submitted_at=start + timedelta(minutes=int(rng.integers(0, 200_000))), status="graded",
            whestbench_version="0.16.2", flopscope_version="0.12.4", mean_flops_used=float(flops.mean()),
            final_layer_mse=float(mse.mean()), adjusted_score=float(score.mean()), mean_multiplier=float(mult.mean()),
            n_failed_mlps=int(failed.sum()), n_mlps=n_mlps, mean_effective_compute=float(flops.mean()),
            dataset="synthetic", source="benchmark",
        ))
        mlps += [MLPResult(sid, m, float(mse[m]), float(score[m]), bool(failed[m]), None, float(flops[m]),
                           float(flops[m]), float(mult[m]), None) for m in range(n_mlps)]
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

    def board(self, round_tag: str, y: str = "score", team: str | None = None, revision: int = 0):
        return self.callback(
            [("lb-scatter", "figure"), ("lb-highlight-index", "data"), ("lb-ranking", "rowData"),
             ("lb-ranking", "getRowStyle"), ("lb-summary", "children"), ("lb-team", "options")],
            [("lb-y", "value", y), ("lb-x", "value", "flops"), ("lb-revision", "data", revision)],
            [("lb-round", "data", round_tag), ("lb-team", "value", team)],
        )

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
    parser.add_argument("--mlps", type=int, default=50, help="per-MLP results per submission")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wb-bench-lb-") as tmp:
        os.environ["WHESTBOARD_STATE_DIR"] = str(Path(tmp) / "state")
        os.environ["WHESTBOARD_DATABASE_URL"] = f"sqlite:///{Path(tmp) / 'bench.sqlite'}"
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
    rows += [(f"board callback, cold ({n_round:,} dots in {tag}) (s)", t, "s", None),
             ("payload: board (scatter + ranking) (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    warm = [client.board(tag)[0] for _ in range(args.repeats)]
    rows.append((f"board callback, warm: median of {args.repeats} (s)", statistics.median(warm), "s", BOARD_TARGET_S))
    t, n, _ = client.board(tag, y="mse")
    rows.append(("y axis -> MSE (s)", t, "s", BOARD_TARGET_S))
    scatter_index = body["response"]["lb-highlight-index"]["data"]
    t, n, tbody = client.timeline()
    rows += [(f"timeline callback, cold ({len(subs):,} dots) (s)", t, "s", None),
             ("payload: timeline (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    rows.append(("timeline callback, warm (s)", client.timeline()[0], "s", BOARD_TARGET_S))
    timeline_index = tbody["response"]["lb-timeline-index"]["data"]
    team = next(s.team for s in subs if s.round == tag)
    times = [client.highlight(tag, team, scatter_index, timeline_index) for _ in range(args.repeats)]
    rows += [(f"highlight a team (Patch): median of {args.repeats} (s)", statistics.median(t for t, _, _ in times),
              "s", HIGHLIGHT_TARGET_S),
             ("payload: highlight (bytes)", times[-1][1], "B", PAYLOAD_TARGET_BYTES)]
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
