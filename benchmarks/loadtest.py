"""Load test: N simulated users against a local gunicorn, with every lab run's FLOPs checked.

Each user (a thread with its own HTTP session, see dashclient.py) loops over
home -> explorer -> convergence -> leaderboard -> lab, loading each page the
way the browser does (HTML, layout, dependencies, then every initial callback
in dependency order) and, on the lab, running mean propagation on one MLP with
"score again" ticked so every run really computes (a background job). Between
pages a user thinks for ``--think`` seconds (uniformly 0.5x..1.5x).

Bounded: each level lasts ``--duration`` seconds (users finish the step they
are in) and a user does at most ``--max-iterations`` loops. Only loopback
targets are accepted. By default the script starts its own server with the
Docker image's command line (``gunicorn -c gunicorn.conf.py app:server``) in a
private state folder, so FLOP counts can be read back from the run store and
compared with what whestbench's own ``evaluate_estimator`` counts for the same
MLP, computed here.

    python benchmarks/loadtest.py --users 1,10,50 --duration 60

Prints, per level: p50/p95/p99 latency per request kind, throughput, errors,
and lab runs checked / FLOP mismatches.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(HERE), str(REPO)]
from dashclient import CallbackFailed, DashClient, PageSession, Timing, require_loopback  # noqa: E402

PAGES = ("/", "/explorer?dataset={ds}", "/convergence?dataset={ds}", "/leaderboard")
KINDS = ("page", "callback", "action", "bg-start", "bg-poll", "lab-run")
KIND_HELP = {
    "page": "GET of a page, its layout or dependencies",
    "callback": "callbacks a page load fires (what a visitor waits for)",
    "action": "callbacks after a click: the lab's plan and its result rendering",
    "bg-start": "launch of a background job (the lab run)",
    "bg-poll": "poll of a running background job",
    "lab-run": "a lab run end to end: launch to result",
}


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds used so far by the server's process tree (reaped job processes included)."""
    if pid is None:
        return None
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
            except psutil.NoSuchProcess:
                pass
    except psutil.NoSuchProcess:
        return None
    return total


class Recorder:
    """Thread-safe collection of timings and errors for one level."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.timings: list[Timing] = []
        self.errors: list[str] = []
        self.lab_runs: list[tuple[str, int]] = []  # (run_id, mlp index)

    def timing(self, t: Timing) -> None:
        kind = "lab-run" if t.kind == "bg-run" else t.kind
        with self.lock:
            self.timings.append(Timing(kind, t.label, t.seconds, t.status, t.ok))

    def error(self, message: str) -> None:
        with self.lock:
            self.errors.append(message[:300])


def lab_run(client: DashClient, dataset: str, mlp: int, rec: Recorder) -> None:
    page = PageSession(client, f"/lab?dataset={dataset}&mlps={mlp}&estimator=mean").load()
    page.values.setdefault("lab-fresh", {})["value"] = True
    page.click("lab-run", max_seconds=180)
    result = (page.values.get("lab-job-result") or {}).get("data") or {}
    notice = (page.values.get("whestboard-job-notice") or {}).get("children")
    if result.get("run_id"):
        with rec.lock:
            rec.lab_runs.append((result["run_id"], mlp))
    else:
        rec.error(f"lab run on MLP {mlp} gave no run: {result.get('error') or notice or 'no result'}")


def user_loop(base: str, uid: int, args, n_mlps: int, deadline: float, rec: Recorder) -> None:
    rng = random.Random(uid)
    client = DashClient(base, timeout=120, record=rec.timing)
    for iteration in range(args.max_iterations):
        for step, path in enumerate((*PAGES, "lab")):
            if time.time() > deadline:
                return
            try:
                if path == "lab":
                    lab_run(client, args.dataset, (uid * 7 + iteration) % n_mlps, rec)
                else:
                    PageSession(client, path.format(ds=args.dataset)).load()
            except (CallbackFailed, requests.RequestException, KeyError, ValueError) as exc:
                rec.error(f"user {uid} step {step} {path}: {type(exc).__name__}: {exc}")
            time.sleep(args.think * rng.uniform(0.5, 1.5))


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def expected_mean_propagation_flops(dataset: str, indices: set[int]) -> dict[int, int]:
    """FLOPs whestbench's evaluate_estimator bills MeanPropagationEstimator for each MLP, under the round's rules."""
    import flopscope.numpy as fnp
    from whestbench.estimators import MeanPropagationEstimator
    from whestbench.scoring import ContestData, ContestSpec, evaluate_estimator

    from whestboard.data import get_dataset
    from whestboard.rules import get_round

    ds = get_dataset(dataset)
    rnd = get_round(ds.info.round_tag)
    spec = ContestSpec(width=ds.info.width, depth=ds.info.depth, n_mlps=1, flop_budget=rnd.budget,
                       ground_truth_samples=ds.info.n_samples, wall_time_limit_s=rnd.wall_time_limit_s,
                       residual_wall_time_limit_s=rnd.residual_wall_time_limit_s,
                       lambda_flops_per_second=rnd.lambda_flops_per_second)
    expected = {}
    for i in sorted(indices):
        truth, avg_variance = ds.truth(i)
        data = ContestData(spec=spec, mlps=[ds.mlp(i)], all_layer_targets=[fnp.asarray(truth, dtype=fnp.float32)],
                           final_targets=[fnp.asarray(truth[-1], dtype=fnp.float32)], avg_variances=[avg_variance])
        expected[i] = int(evaluate_estimator(MeanPropagationEstimator(), data)["per_mlp"][0]["flops_used"])
    return expected


def check_runs(dataset: str, lab_runs: list[tuple[str, int]], expected: dict[int, int]) -> tuple[list[str], dict]:
    """FLOP mismatches against whestbench, and how the machine's load showed in the runs' timed fields."""
    from whestboard.scoring import get_run

    problems = []
    timing = {"contended": 0, "failed_on_time": 0, "max_cpu_wait_s": 0.0}
    for run_id, mlp in lab_runs:
        report = get_run(run_id)
        if report is None:
            problems.append(f"run {run_id} not in the store")
            continue
        (entry,) = report["results"]["per_mlp"]
        if entry["mlp_index"] != mlp or int(entry["flops_used"]) != expected[mlp]:
            problems.append(f"run {run_id} MLP {entry['mlp_index']}: {entry['flops_used']} FLOPs, "
                            f"whestbench counts {expected[mlp]}")
        machine = report.get("machine") or {}
        timing["contended"] += bool(machine.get("contended"))
        timing["failed_on_time"] += bool(machine.get("timed_failures"))
        timing["max_cpu_wait_s"] = max(timing["max_cpu_wait_s"], float(machine.get("cpu_wait_s") or 0.0))
    return problems, timing


def run_level(base: str, users: int, args, n_mlps: int, server_pid: int | None = None) -> dict:
    rec = Recorder()
    cpu_before = server_cpu_seconds(server_pid)
    started = time.time()
    deadline = started + args.duration
    threads = [threading.Thread(target=user_loop, args=(base, u, args, n_mlps, deadline, rec), daemon=True)
               for u in range(users)]
    for i, t in enumerate(threads):
        t.start()
        time.sleep(min(0.05, args.ramp / max(users, 1)) if i else 0)
    for t in threads:
        t.join(timeout=max(1.0, deadline + 240 - time.time()))
    wall = time.time() - started
    cpu_after = server_cpu_seconds(server_pid)
    load = os.getloadavg()[0]
    expected = expected_mean_propagation_flops(args.dataset, {m for _, m in rec.lab_runs})
    flop_problems, timing = check_runs(args.dataset, rec.lab_runs, expected)
    failed = [t for t in rec.timings if not t.ok]
    summary = {"users": users, "wall_s": round(wall, 1), "requests": len(rec.timings),
               "throughput_rps": round(len(rec.timings) / wall, 1), "errors": len(failed) + len(rec.errors),
               "error_samples": (rec.errors + [f"{t.kind} {t.label} HTTP {t.status}" for t in failed])[:5],
               "lab_runs": len(rec.lab_runs), "lab_runs_flops_checked": len(rec.lab_runs) - len(flop_problems),
               "flop_mismatches": flop_problems[:5], "lab_run_timing": timing, "kinds": {},
               "load_avg_1min": round(load, 1),
               "server_cpu_s": round(cpu_after - cpu_before, 1) if cpu_before is not None and cpu_after else None}
    by_kind = defaultdict(list)
    for t in rec.timings:
        if t.ok:
            by_kind[t.kind].append(t.seconds * 1000)
    labels = defaultdict(list)
    for t in rec.timings:
        if t.ok and t.kind == "callback":
            labels[t.label].append(t.seconds * 1000)
    summary["slowest_callbacks"] = sorted(
        ({"callback": label[:60], "n": len(ms), "p50_ms": round(percentile(ms, .5), 1),
          "p95_ms": round(percentile(ms, .95), 1)} for label, ms in labels.items()),
        key=lambda row: -row["p95_ms"])[:6]
    for kind in KINDS:
        ms = by_kind.get(kind, [])
        summary["kinds"][kind] = {"n": len(ms), "p50_ms": round(percentile(ms, .5), 1),
                                  "p95_ms": round(percentile(ms, .95), 1), "p99_ms": round(percentile(ms, .99), 1),
                                  "mean_ms": round(statistics.fmean(ms), 1) if ms else None}
    return summary


def print_level(s: dict) -> None:
    print(f"\n== {s['users']} users: {s['requests']} requests in {s['wall_s']} s = {s['throughput_rps']} req/s, "
          f"errors {s['errors']}, lab runs {s['lab_runs']} (FLOPs equal to whestbench's: "
          f"{s['lab_runs_flops_checked']}/{s['lab_runs']})")
    t = s["lab_run_timing"]
    print(f"   lab runs timed while waiting for the CPU: {t['contended']} (of which failed on a time rule: "
          f"{t['failed_on_time']}; longest wait {t['max_cpu_wait_s']:.2f} s); FLOP counts never depend on it")
    if s["server_cpu_s"] is not None:
        print(f"   server CPU {s['server_cpu_s']} s over {s['wall_s']} s wall "
              f"({s['server_cpu_s'] / s['wall_s']:.2f} cores); machine load average {s['load_avg_1min']}")
    print(f"   {'kind':<10}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}")
    for kind, k in s["kinds"].items():
        if k["n"]:
            print(f"   {kind:<10}{k['n']:>7}{k['p50_ms']:>10}{k['p95_ms']:>10}{k['p99_ms']:>10}")
    print("   slowest callbacks (p50 / p95 ms):")
    for row in s["slowest_callbacks"]:
        print(f"     {row['callback']:<62}{row['n']:>5}{row['p50_ms']:>9}{row['p95_ms']:>9}")
    for line in s["error_samples"] + s["flop_mismatches"]:
        print("   !", line)


def start_server(args, state_dir: Path) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, WHESTBOARD_STATE_DIR=str(state_dir), WHESTBOARD_HOST="127.0.0.1",
               WHESTBOARD_PORT=str(port), WHESTBOARD_WORKERS=str(args.workers), WHESTBOARD_THREADS=str(args.threads),
               WHESTBOARD_LOG_LEVEL="WARNING")
    env.pop("WHESTBOARD_REDIS_URL", None)
    env.pop("WHESTBOARD_DATABASE_URL", None)
    gunicorn = Path(sys.executable).parent / "gunicorn"
    log = open(state_dir / "server.log", "w")
    proc = subprocess.Popen([str(gunicorn), "-c", "gunicorn.conf.py", "app:server"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(base + "/healthz", timeout=5).status_code == 200:
                return proc, base
        except requests.RequestException:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise SystemExit(f"server did not start; see {state_dir / 'server.log'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--users", default="1,10,50", help="comma-separated levels of concurrent users")
    p.add_argument("--duration", type=float, default=60.0, help="seconds per level")
    p.add_argument("--max-iterations", type=int, default=50, help="loops per user at most")
    p.add_argument("--think", type=float, default=1.0, help="mean think time between pages, seconds")
    p.add_argument("--ramp", type=float, default=2.0, help="seconds over which a level's users start")
    p.add_argument("--dataset", default="v1-warmup")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--base-url", help="an already running server (loopback only; needs --state-dir)")
    p.add_argument("--state-dir", help="that server's WHESTBOARD_STATE_DIR, to read lab runs back")
    p.add_argument("--client-nice", type=int, default=9, help="extra niceness of the client, after the server starts")
    p.add_argument("--json", help="also write the summaries here")
    args = p.parse_args(argv)
    levels = [int(x) for x in args.users.split(",") if x.strip()]
    if not levels or max(levels) > 200 or args.duration > 600:
        raise SystemExit("bounded test: at most 200 users and 600 s per level")

    proc = None
    if args.base_url:
        require_loopback(args.base_url)
        if not args.state_dir:
            raise SystemExit("--base-url needs --state-dir (the server's WHESTBOARD_STATE_DIR) to check FLOPs")
        base, state_dir = args.base_url.rstrip("/"), Path(args.state_dir)
    else:
        state_dir = Path(tempfile.mkdtemp(prefix="whestboard-load-"))
        proc, base = start_server(args, state_dir)
    summaries = []
    try:  # from here on, the server is always stopped
        os.environ["WHESTBOARD_STATE_DIR"] = str(state_dir)  # read the same run store as the server
        if args.client_nice:
            os.nice(args.client_nice)  # the simulated browsers yield the CPU to the server they measure
        from whestboard.data import get_dataset

        n_mlps = len(get_dataset(args.dataset).indices)
        print(f"target {base} (gunicorn workers={args.workers} threads={args.threads}), dataset {args.dataset} "
              f"({n_mlps} MLPs), {os.cpu_count()} cores, think {args.think}s, {args.duration:.0f}s per level")
        for kind, meaning in KIND_HELP.items():
            print(f"   {kind:<10}{meaning}")
        warm = run_level(base, 1, argparse.Namespace(**{**vars(args), "duration": 300, "max_iterations": 1}), n_mlps)
        print(f"warm-up: {warm['requests']} requests, errors {warm['errors']}")
        for users in levels:
            summary = run_level(base, users, args, n_mlps, proc.pid if proc else None)
            print_level(summary)
            summaries.append(summary)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2))
    return 1 if any(s["errors"] or s["flop_mismatches"] for s in summaries) else 0


if __name__ == "__main__":
    sys.exit(main())
