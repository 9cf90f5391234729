"""Soak: N users for many minutes against a local gunicorn, to tell a memory leak from warm-up.

The load test's users (loadtest.py: home, explorer, convergence, leaderboard, then a fresh lab run, with
think time) run for ``--minutes``; every ``--sample-s`` seconds the RSS, USS and open descriptors of the
master, each gunicorn worker and each job launcher are sampled. After ``--warmup-minutes`` the slope of
each series (least squares, MB per minute) is reported, over the whole post-warm-up window and over its
second half alone: a leak keeps its slope, warm-up (caches filling up to their bounds) flattens out.

    python benchmarks/bench_soak.py --users 5 --minutes 10

Prints the slopes, the requests and errors, and the lab runs checked against whestbench's FLOP counts.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]
import loadtest  # noqa: E402


def processes(master_pid: int) -> dict[str, object]:
    """``{"master": p, "worker <pid>": p, "launcher <pid>": p}`` (job processes come and go: not sampled)."""
    import psutil

    master = psutil.Process(master_pid)
    found: dict[str, object] = {"master": master}
    for worker in master.children():
        found[f"worker {worker.pid}"] = worker
        for launcher in worker.children():
            found[f"launcher {launcher.pid}"] = launcher
    return found


def sample(master_pid: int) -> dict[str, dict]:
    import psutil

    out = {}
    for name, proc in processes(master_pid).items():
        try:
            mem = proc.memory_full_info()
            out[name] = {"rss_mb": mem.rss / 2**20, "uss_mb": mem.uss / 2**20, "fds": proc.num_fds()}
        except psutil.NoSuchProcess:
            pass
    return out


def slope_per_minute(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, value) points, per minute."""
    if len(points) < 3:
        return None
    xs, ys = [p[0] / 60 for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else None


def summarise(samples: list[tuple[float, dict]], warmup_s: float, end_s: float) -> dict:
    series: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for t, snap in samples:
        for name, values in snap.items():
            for key, value in values.items():
                series[name][key].append((t, value))
    half = warmup_s + (end_s - warmup_s) / 2
    report = {}
    for name, by_key in series.items():
        row = {}
        for key, points in by_key.items():
            after = [p for p in points if p[0] >= warmup_s]
            row[key] = {"start": round(points[0][1], 1), "after_warmup": round(after[0][1], 1) if after else None,
                        "end": round(points[-1][1], 1),
                        "slope_per_min": _round(slope_per_minute(after)),
                        "slope_last_half_per_min": _round(slope_per_minute([p for p in after if p[0] >= half]))}
        report[name] = row
    return report


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", type=int, default=5)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--warmup-minutes", type=float, default=3.0)
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--think", type=float, default=1.0)
    p.add_argument("--dataset", default="v1-warmup")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--json", help="also write the summary here")
    args = p.parse_args(argv)
    if args.users > 50 or args.minutes > 60 or args.warmup_minutes >= args.minutes:
        raise SystemExit("bounded soak: at most 50 users, 60 minutes, and a warm-up shorter than the run")
    args.max_iterations, args.ramp = 10_000, 2.0

    state_dir = Path(tempfile.mkdtemp(prefix="whestboard-soak-"))
    proc, base = loadtest.start_server(args, state_dir)
    samples: list[tuple[float, dict]] = []
    rec = loadtest.Recorder()
    try:
        os.environ["WHESTBOARD_STATE_DIR"] = str(state_dir)
        os.nice(9)  # the simulated browsers yield the CPU to the server they measure
        from whestboard.data import get_dataset

        n_mlps = len(get_dataset(args.dataset).indices)
        started = time.time()
        deadline = started + args.minutes * 60
        users = [threading.Thread(target=loadtest.user_loop, args=(base, u, args, n_mlps, deadline, rec), daemon=True)
                 for u in range(args.users)]
        for user in users:
            user.start()
        while time.time() < deadline:
            samples.append((time.time() - started, sample(proc.pid)))
            time.sleep(args.sample_s)
        samples.append((time.time() - started, sample(proc.pid)))
        for user in users:
            user.join(timeout=240)
        end_s = time.time() - started
        expected = loadtest.expected_mean_propagation_flops(args.dataset, {m for _, m in rec.lab_runs})
        flop_problems, _ = loadtest.check_runs(args.dataset, rec.lab_runs, expected)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except Exception:  # noqa: BLE001 - killed below either way
            proc.kill()
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
    failed = [t for t in rec.timings if not t.ok]
    summary = {"users": args.users, "minutes": round(end_s / 60, 1), "warmup_minutes": args.warmup_minutes,
               "requests": len(rec.timings), "errors": len(failed) + len(rec.errors),
               "error_samples": (rec.errors + [f"{t.kind} {t.label} HTTP {t.status}" for t in failed])[:5],
               "lab_runs": len(rec.lab_runs), "flop_mismatches": flop_problems[:5],
               "processes": summarise(samples, args.warmup_minutes * 60, end_s)}
    print(f"soak: {args.users} users for {summary['minutes']} min, {summary['requests']} requests, "
          f"{summary['errors']} errors, {summary['lab_runs']} lab runs "
          f"({summary['lab_runs'] - len(flop_problems)} with whestbench's FLOPs)")
    print(f"slopes after {args.warmup_minutes:g} min of warm-up, per minute (whole window / its last half):")
    for name, row in summary["processes"].items():
        rss, uss, fds = row["rss_mb"], row["uss_mb"], row["fds"]
        print(f"  {name:<18} RSS {rss['after_warmup']} -> {rss['end']} MB: {rss['slope_per_min']} / "
              f"{rss['slope_last_half_per_min']} MB/min; USS {uss['slope_per_min']} / "
              f"{uss['slope_last_half_per_min']} MB/min; fds {fds['end']} ({fds['slope_per_min']}/min)")
    for line in summary["error_samples"] + summary["flop_mismatches"]:
        print("  !", line)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 1 if summary["errors"] or flop_problems else 0


if __name__ == "__main__":
    sys.exit(main())
