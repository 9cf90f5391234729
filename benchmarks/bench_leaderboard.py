"""How the leaderboard holds up with 10,000 submissions: response times and payload sizes.

Fills a temporary store (never the real one) with SYNTHETIC submissions, each
with per-MLP results, then drives the page through Flask's test client the
way the browser does: the page route, the board callback (scatter + ranking),
the timeline, a team highlight, an axis toggle and the CSV export. Synthetic
numbers exist only here, to load the page; nothing of them is shipped.

    .venv/bin/python benchmarks/bench_leaderboard.py [--submissions 10000] [--mlps 50] [--repeats 3]
    .venv/bin/python benchmarks/bench_leaderboard.py --sizes 10000,100000,500000 [--keep-state DIR]

``--keep-state DIR`` imports each size once into ``DIR/<size>`` and keeps it, so a later run with the
same DIR times only the pages (the shared figure cache is emptied first: every "cold" is cold).
The worker's start-up heap is frozen after the app is built, as gunicorn's preloading master does.

Each submission carries ``--mlps`` public and as many private per-MLP results
(100 MLPs, as the grader scores a phase). Targets: the board callback (scatter,
ranking with its integrity flags) under 1.5 s cold and 0.2 s warm, a highlight
under 0.3 s, and no response over 2.5 MB; the organizer's private board is
timed the same way.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))
from flask_dash import TestClientCaller  # noqa: E402

from tests.pages.ranking_request import ranking_request, sort_ids  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BOARD_COLD_TARGET_S = 2.0
BOARD_TARGET_S = 0.3
IMPORT_TARGET_S = 60.0
IMPORT_RSS_TARGET_MB = 1000.0
WORKER_RSS_TARGET_MB = 600.0
HIGHLIGHT_TARGET_S = 0.3
TOKEN = "benchmark-organizer-token"
PAYLOAD_TARGET_BYTES = 2_500_000
ROUND_SHARE = {"v1-warmup": 0.1, "v1-phase1": 0.2, "v2-phase2": 0.7}


def synthetic_frames(n_subs: int, n_mlps: int, mlp_submissions: int, seed: int = 0, n_teams: int = 300):
    """The same field as ``synthetic``, vectorised, as the import schema's two tables (CSV-ready frames).

    Submissions come as one table of ``n_subs`` rows; per-MLP results (``n_mlps`` public and as many
    private) only for ``mlp_submissions`` of them, spread evenly, so 500,000 submissions stay a file
    an organizer would import. Aggregates of those equal the mean of their public MLPs.
    """
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from whestboard.rules import get_round

    rng = np.random.default_rng(seed)
    tags = np.array(list(ROUND_SHARE))
    rounds = tags[rng.choice(len(tags), size=n_subs, p=list(ROUND_SHARE.values()))]
    budget = pd.Series({t: float(get_round(t).budget) for t in tags})[rounds].to_numpy()
    mc = pd.Series({t: float(get_round(t).mc_at_bm(0.2)) for t in tags})[rounds].to_numpy()
    flops = budget * 10 ** rng.uniform(-4, 0, n_subs)
    skill = mc * 10 ** rng.normal(0, 1.2, n_subs)
    mse = skill * rng.lognormal(0, 0.5, n_subs)
    mult = np.maximum(0.1, flops / budget)
    failed = rng.binomial(max(n_mlps, 1), 0.01, n_subs)
    start = np.datetime64("2026-03-01T00:00:00")
    subs = pd.DataFrame({
        "submission_id": [f"synthetic-{i:06d}" for i in range(n_subs)],
        "team": np.char.add("team-", np.char.zfill(rng.integers(0, n_teams, n_subs).astype(str), max(3, len(str(n_teams - 1))))),
        "round": rounds,
        "submitted_at": pd.to_datetime(start + rng.integers(0, 200_000, n_subs).astype("timedelta64[m]"), utc=True),
        "status": "graded", "whestbench_version": "0.16.2", "flopscope_version": "0.12.4",
        "mean_flops_used": flops, "final_layer_mse": mse, "adjusted_score": mse * mult, "mean_multiplier": mult,
        "n_failed_mlps": failed, "n_mlps": max(n_mlps, 1), "mean_effective_compute": flops, "dataset": "synthetic",
        "source": "benchmark", "nominated": rng.random(n_subs) < 0.05,
    })
    picked = np.linspace(0, n_subs - 1, min(mlp_submissions, n_subs)).astype(int) if n_mlps else np.zeros(0, int)
    per_sub = 2 * n_mlps
    sub_of = np.repeat(picked, per_sub)
    m = np.tile(np.arange(per_sub), len(picked))
    mlp_mse = skill[sub_of] * rng.lognormal(0, 0.5, sub_of.size)
    mlp_failed = rng.random(sub_of.size) < 0.01
    mlp_mult = np.where(mlp_failed, 1.0, mult[sub_of])
    mlps = pd.DataFrame({
        "submission_id": subs["submission_id"].to_numpy()[sub_of], "mlp_index": m % max(n_mlps, 1),
        "final_layer_mse": mlp_mse, "adjusted_score": mlp_mse * mlp_mult, "failed": mlp_failed,
        "flops_used": flops[sub_of], "effective_compute": flops[sub_of], "multiplier": mlp_mult,
        "split": np.where(m < n_mlps, "public", "private"), "failure": np.where(mlp_failed, "time", None),
    })
    public = mlps[mlps["split"] == "public"].groupby("submission_id", sort=False)
    for column, source in (("final_layer_mse", "final_layer_mse"), ("adjusted_score", "adjusted_score"),
                           ("mean_multiplier", "multiplier")):
        subs.loc[picked, column] = public[source].mean().reindex(subs["submission_id"].iloc[picked]).to_numpy()
    subs.loc[picked, "n_failed_mlps"] = public["failed"].sum().reindex(subs["submission_id"].iloc[picked]).to_numpy()
    return subs, mlps


def _values(array) -> np.ndarray:
    """A plotly array as the browser reads it: a list, or base64 typed data."""
    if isinstance(array, dict) and "bdata" in array:
        values = np.frombuffer(base64.b64decode(array["bdata"]), dtype=np.dtype(array["dtype"])).astype(float)
        shape = array.get("shape")
        return values.reshape([int(n) for n in str(shape).split(",")]) if shape else values
    return np.asarray(array, dtype=float)


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
            [("lb-scatter", "figure"), ("lb-highlight-index", "data"), ("lb-summary", "children"),
             ("lb-team", "options"), ("lb-split-note", "children"), ("lb-flags", "children"),
             ("lb-ties", "children")],
            [("lb-y", "value", y), ("lb-x", "value", "flops"), ("lb-revision", "data", revision),
             ("lb-split", "value", split), ("lb-token", "value", token)],
            [("lb-round", "data", round_tag), ("lb-team", "value", team)],
        )

    def ranking(self, round_tag: str, state: dict | None = None, sort: str | None = None, team: str | None = None):
        """One page of the ranking table (``sort``: a click on that column's header; ``team``: a team chosen)."""
        clicked = next((i for i in sort_ids() if i["col"] == sort), None)
        payload = ranking_request(self.registered_output("lb-ranking-body.children"), round_tag, team=team,
                                  state=state, trigger=clicked or ("lb-team" if team else None))
        return self.post(payload)

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

    def zoom(self, round_tag: str, figure: dict):
        """Drag-zoom to half a decade around the densest bin of the drawn density (the whole frame otherwise)."""
        key = self.registered_output("lb-scatter.figure@", "lb-zoom-note")
        outputs = [tuple(part.split("@")[0].rsplit(".", 1)) for part in key[2:-2].split("...")]
        x_range, y_range = figure["layout"]["xaxis"]["range"], figure["layout"]["yaxis"]["range"]
        density = next((t for t in figure["data"] if t.get("type") == "heatmap"), None)
        if density is not None:
            counts = _values(density["customdata"])
            row, col = np.unravel_index(np.argmax(counts), counts.shape)
            x_mid, y_mid = (np.log10(_values(density["x"])[col]), np.log10(_values(density["y"])[row]))
            x_range, y_range = [x_mid - 0.25, x_mid + 0.25], [y_mid - 0.25, y_mid + 0.25]
        relayout = {"xaxis.range[0]": x_range[0], "xaxis.range[1]": x_range[1],
                    "yaxis.range[0]": y_range[0], "yaxis.range[1]": y_range[1]}
        index = len(figure["data"]) - 1
        return self.callback(outputs, [("lb-scatter", "relayoutData", relayout)], output_key=key, state=[
            ("lb-round", "data", round_tag), ("lb-y", "value", "score"), ("lb-x", "value", "flops"),
            ("lb-highlight-index", "data", index)])

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
    parser.add_argument("--sizes", default=None,
                        help="comma-separated field sizes (e.g. 10000,100000,500000): each measured in fresh "
                             "processes, then one table of how every figure grows")
    parser.add_argument("--mlps", type=int, default=50, help="public (and as many private) MLPs per submission")
    parser.add_argument("--mlp-submissions", type=int, default=2_000,
                        help="how many submissions carry per-MLP results (spread over the field)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep-state", type=Path, default=None, metavar="DIR",
                        help="import each size once into DIR/<size> and keep it; a later run with the same DIR "
                             "measures only the pages (the import rows are then absent)")
    parser.add_argument("--only", choices=("import",), default=None,
                        help="measure only this stage (import: the organizer's import, not the pages)")
    parser.add_argument("--stage", choices=("import", "pages"), help=argparse.SUPPRESS)
    parser.add_argument("--files", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.stage:
        rows = _import_stage(args.files, args.only == "import") if args.stage == "import" else run(args)
        print(RESULT_MARK + json.dumps(rows))
        return 0
    sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else [args.submissions]
    results = {}
    for n in sizes:
        results[n] = measure(n, args)
        print(f"{n:,} submissions measured: {json.dumps(results[n])}", flush=True)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at end "
          "(other work on the machine slows every number)")
    return _print_table(results)


RESULT_MARK = "BENCH-ROWS "


def measure(n_subs: int, args) -> list[tuple]:
    """One field size: files written here, imported by one process, then served by a fresh one (the worker)."""
    if args.keep_state is None:
        with tempfile.TemporaryDirectory(prefix="wb-bench-lb-") as tmp:
            return _measure_in(Path(tmp), n_subs, args)
    return _measure_in(args.keep_state / str(n_subs), n_subs, args)


def _measure_in(tmp: Path, n_subs: int, args) -> list[tuple]:
    """Import into ``tmp`` unless a kept store is already there, then time the pages in a fresh process."""
    env = {**os.environ, "WHESTBOARD_STATE_DIR": str(tmp / "state"),
           "WHESTBOARD_DATABASE_URL": f"sqlite:///{tmp / 'bench.sqlite'}",
           "WHESTBOARD_ORGANIZER_TOKEN": TOKEN}
    imported = tmp / "imported"
    rows: list[tuple] = []
    if not imported.exists():
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "bench.sqlite").unlink(missing_ok=True)
        rows += _import_into(tmp, env, n_subs, args)
        imported.touch()
    if args.only == "import":
        return rows
    shutil.rmtree(tmp / "state" / "cache", ignore_errors=True)  # a kept store: every figure built afresh
    return rows + _child(env, "--stage", "pages", "--submissions", str(n_subs), "--repeats", str(args.repeats))


def _import_into(tmp: Path, env: dict, n_subs: int, args) -> list[tuple]:
    """The synthetic field written as the import schema's files, imported by a fresh process."""
    subs, mlps = synthetic_frames(n_subs, args.mlps, args.mlp_submissions)
    paths = [tmp / "field.csv"]
    # Compact, as a grader's export would be (a file is at most 64 MiB): 8 significant digits, times
    # to the minute, the optional columns left out.
    subs = subs.drop(columns=["flopscope_version", "dataset", "source", "mean_effective_compute", "nominated"])
    subs.to_csv(paths[0], index=False, float_format="%.8g", date_format="%Y-%m-%dT%H:%MZ")
    if len(mlps):
        paths.append(tmp / "field.per_mlp.csv")
        mlps.to_csv(paths[1], index=False, float_format="%.10g")
    del subs, mlps
    only = ("--only", args.only) if args.only else ()
    return _child(env, "--stage", "import", *only, "--files", *map(str, paths))


def _child(env: dict, *argv: str) -> list[tuple]:
    done = subprocess.run([sys.executable, __file__, *argv], env=env, capture_output=True, text=True, check=False)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_MARK)), None)
    if done.returncode or line is None:
        raise RuntimeError(f"{argv[:2]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return [tuple(row) for row in json.loads(line[len(RESULT_MARK):])]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _import_stage(files: list[str], only_import: bool = False) -> list[tuple]:
    """The organizer's import of the written files (CSV parsed and checked, one transaction), as the CLI does it."""
    sys.path.insert(0, str(REPO))
    from whestboard.leaderboard import import_files

    started, cpu = time.perf_counter(), time.process_time()
    report = import_files([Path(files[0])])
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert report.inserted, report.summary()
    rows = [("import: CSV checked and written, one transaction (s)", elapsed, "s", IMPORT_TARGET_S),
            ("import: CPU time of the importing process (s)", cpu, "s", None),
            ("import: peak RSS of the importing process (MB)", _peak_rss_mb(), "MB", IMPORT_RSS_TARGET_MB)]
    if only_import:  # the same file again: every row compared with its stored one, none written
        started = time.perf_counter()
        again = import_files([Path(files[0])])
        assert not again.changed, again.summary()
        rows.append(("import again, every row unchanged (s)", time.perf_counter() - started, "s", IMPORT_TARGET_S))
    return rows


def _print_table(results: dict[int, list[tuple]]) -> int:
    sizes = list(results)
    labels = list(dict.fromkeys(label for rows in results.values() for label, *_ in rows))
    width = max(len(label) for label in labels)
    print(f"{'':<{width}}  " + "  ".join(f"{n:>14,}" for n in sizes)
          + ("  growth (last / first)" if len(sizes) > 1 else ""))
    failed = False
    for label in labels:
        cells, values, target, unit = [], [], None, ""
        for n in sizes:
            row = next((r for r in results[n] if r[0] == label), None)
            if row is None:
                cells.append(f"{'—':>14}")
                continue
            _, value, unit, target = row
            values.append(value)
            cells.append(f"{value:>14,.0f}" if unit in ("B", "MB") else f"{value:>14.3f}")
        verdict = ""
        if target is not None:
            ok = all(v <= target for v in values)
            failed |= not ok
            verdict = f"  target {target:g} {unit}: {'ok' if ok else 'MISSED'}"
        growth = f"  x{values[-1] / values[0]:.2f}" if len(values) > 1 and values[0] else ""
        print(f"{label:<{width}}  " + "  ".join(cells) + growth + verdict)
    return 1 if failed else 0


def run(args) -> list[tuple]:
    """The page's callbacks in this process (a fresh worker over the imported store), timed and weighed."""
    sys.path.insert(0, str(REPO))

    rows: list[tuple] = [("worker: RSS before the app (MB)", _rss_mb(), "MB", None)]
    started = time.perf_counter()
    import app as app_module

    rows.append(("app import (s)", time.perf_counter() - started, "s", None))
    client = Client(app_module.app)
    # What a served worker's heap is: gunicorn preloads the app (WHESTBOARD_PRELOAD, on by default) and
    # freezes what it loaded (gunicorn.conf.py when_ready), so no full collection walks it during a request.
    gc.freeze()
    tag = "v2-phase2"
    t, n, _ = client.page(f"?round={tag}")
    rows += [("page route /leaderboard (s)", t, "s", None), ("payload: page route (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    t, n, body = client.board(tag)
    rows += [(f"board callback ({tag}), cold (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: board (scatter + ranking + flags) (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    warm = [client.board(tag)[0] for _ in range(args.repeats)]
    rows.append((f"board callback, warm: median of {args.repeats} (s)", statistics.median(warm), "s", BOARD_TARGET_S))
    t, n, _ = client.zoom(tag, body["response"]["lb-scatter"]["figure"])
    rows += [("zoom to half a decade around the densest bin (s)", t, "s", BOARD_TARGET_S),
             ("payload: zoom (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    t, n, _ = client.board(tag, split="private", token=TOKEN)
    rows += [("board callback, private split (organizer), cold (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: private board (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    warm = [client.board(tag, split="private", token=TOKEN)[0] for _ in range(args.repeats)]
    rows.append((f"board callback, private split, warm: median of {args.repeats} (s)", statistics.median(warm), "s",
                 BOARD_TARGET_S))
    t, n, _ = client.ranking(tag)
    rows += [("ranking table: first page, cold (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: ranking page (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    times = [client.ranking(tag, sort="mean_flops_used")[0] for _ in range(args.repeats)]
    rows.append((f"ranking table: sort by FLOPs, median of {args.repeats} (s)", statistics.median(times), "s",
                 BOARD_TARGET_S))
    times = [client.ranking(tag, team="team-007")[0] for _ in range(args.repeats)]
    rows.append((f"ranking table: the page of a chosen team, median of {args.repeats} (s)", statistics.median(times),
                 "s", BOARD_TARGET_S))
    t, n, _ = client.public_private(tag, TOKEN)
    rows += [("public against private (organizer) (s)", t, "s", None),
             ("payload: public against private (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    t, n, _ = client.board(tag, y="mse")
    rows.append(("y axis -> MSE (s)", t, "s", BOARD_COLD_TARGET_S))
    scatter_index = body["response"]["lb-highlight-index"]["data"]
    t, n, tbody = client.timeline()
    rows += [("timeline callback, cold (s)", t, "s", BOARD_COLD_TARGET_S),
             ("payload: timeline (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    rows.append(("timeline callback, warm (s)", client.timeline()[0], "s", BOARD_TARGET_S))
    timeline_index = tbody["response"]["lb-timeline-index"]["data"]
    team = "team-007"
    times = [client.highlight(tag, team, scatter_index, timeline_index) for _ in range(args.repeats)]
    rows += [(f"highlight a team (Patch): median of {args.repeats} (s)", statistics.median(t for t, _, _ in times),
              "s", HIGHLIGHT_TARGET_S),
             ("payload: highlight (bytes)", times[-1][1], "B", PAYLOAD_TARGET_BYTES)]
    t, n, _ = client.team_panel(tag, team)
    rows += [("team panel (history, failures) (s)", t, "s", None),
             ("payload: team panel (bytes)", n, "B", PAYLOAD_TARGET_BYTES)]
    rows += [("worker: RSS after every callback (MB)", _rss_mb(), "MB", WORKER_RSS_TARGET_MB),
             ("worker: peak RSS (MB)", _peak_rss_mb(), "MB", WORKER_RSS_TARGET_MB)]
    started = time.perf_counter()
    response = client.http.get("/api/submissions.csv")
    rows += [("CSV export (s)", time.perf_counter() - started, "s", None),
             ("payload: CSV export (bytes)", len(response.data), "B", None)]
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
