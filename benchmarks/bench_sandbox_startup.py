"""Sandbox start-up: the fork server against the spawn path and a bare ``python -c "import whestbench"``.

Usage: .venv/bin/python benchmarks/bench_sandbox_startup.py [--checks 6] [--imports 3]

Each way of starting workers runs in a fresh process of its own (``WHESTBOARD_SANDBOX_FORK_SERVER``
on or off), which repeats, ``--checks`` times: start a spare worker and wait for its hello, then
``python -m whestboard check`` of a trivial estimator (the CLI's ``main``, in process), which takes
that spare. Walls are timed inside that process; CPU is the whole process tree's (the process, its
fork server, every worker), read from the kernel's accounting of reaped children, so no worker's
CPU is missed. The first round is the warm-up (the fork server starting, the libraries imported
once); "after warm-up" is the mean of the others, its CPU taken as the difference between a run
with one round and a run with all of them. Everything is printed as ratios from this one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = """
    import flopscope.numpy as fnp
    from whestbench import BaseEstimator


    class Estimator(BaseEstimator):
        def predict(self, mlp, budget):
            return fnp.zeros((mlp.depth, mlp.width))
    """


def _tree_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child(rounds: int, estimator: Path) -> None:
    """In the measured process: ``rounds`` of (spare worker to hello, check); prints the walls as JSON."""
    import contextlib
    import io

    sys.path.insert(0, str(ROOT))
    from whestboard.cli import main
    from whestboard.sandbox import prewarm, spare_worker

    hellos, checks, forked = [], [], []
    for _ in range(rounds):
        started = time.perf_counter()
        prewarm()
        hello = spare_worker().wait_hello()
        hellos.append(time.perf_counter() - started)
        forked.append(bool(hello.get("forked")))
        started = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as out:
            status = main(["check", "--estimator", str(estimator), "--json"])
        checks.append(time.perf_counter() - started)
        if status != 0:
            raise SystemExit(f"the trivial estimator failed its check:\n{out.getvalue()}")
    print(json.dumps({"hello_s": hellos, "check_s": checks, "forked": forked}))


def measure(mode: str, rounds: int, estimator: Path) -> dict:
    """One fresh process for ``mode`` ("fork" or "spawn"); its walls and the CPU of its whole tree."""
    env = {**os.environ, "WHESTBOARD_SANDBOX_FORK_SERVER": "on" if mode == "fork" else "off",
           "WHESTBOARD_STATE_DIR": tempfile.mkdtemp(prefix="bench-sandbox-state-")}
    cpu = _tree_cpu()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", str(rounds), str(estimator)], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result.update(cpu_s=_tree_cpu() - cpu, wall_s=time.perf_counter() - started)
    if any(result["forked"]) != (mode == "fork"):
        raise SystemExit(f"{mode}: the workers were {'forked' if any(result['forked']) else 'spawned'}")
    return result


def bare_import(times: int) -> tuple[float, float]:
    """CPU and wall of ``python -c "import whestbench"``, the mean of ``times`` fresh processes."""
    cpu = _tree_cpu()
    started = time.perf_counter()
    for _ in range(times):
        subprocess.run([sys.executable, "-c", "import whestbench"], check=True)
    return (_tree_cpu() - cpu) / times, (time.perf_counter() - started) / times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=6, help="rounds of (hello, check) per way, warm-up included")
    parser.add_argument("--imports", type=int, default=3, help="bare `import whestbench` processes to average")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(int(args.child[0]), Path(args.child[1]))
        return
    if args.checks < 2:
        parser.error("--checks must be at least 2 (the first round is the warm-up)")
    folder = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    estimator = folder / "estimator.py"
    estimator.write_text(textwrap.dedent(TRIVIAL).lstrip())

    import_cpu, import_wall = bare_import(args.imports)
    rows = {}
    for mode in ("fork", "spawn"):
        one = measure(mode, 1, estimator)
        full = measure(mode, args.checks, estimator)
        warm = args.checks - 1
        rows[mode] = {
            "first_hello_s": full["hello_s"][0],
            "hello_s": statistics.mean(full["hello_s"][1:]),
            "check_wall_s": statistics.mean(full["check_s"][1:]),
            "check_cpu_s": (full["cpu_s"] - one["cpu_s"]) / warm,
            "process_cpu_s": full["cpu_s"],
        }
    fork, spawn = rows["fork"], rows["spawn"]
    print(f"sandbox start-up, {args.checks} rounds per way ({args.checks - 1} after warm-up), "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    print(f"  bare `python -c \"import whestbench\"`:      {import_cpu:.2f} s CPU, {import_wall:.2f} s wall")
    for mode, row in rows.items():
        print(f"  {mode:5s}: first hello {row['first_hello_s']:.2f} s; after warm-up: hello {row['hello_s']:.3f} s, "
              f"check {row['check_wall_s']:.3f} s wall; start + check {row['check_cpu_s']:.3f} s CPU "
              f"(whole process {row['process_cpu_s']:.1f} s CPU)")
    print("ratios (after warm-up):")
    print(f"  hello, fork / spawn:                         {fork['hello_s'] / spawn['hello_s']:.3f}")
    print(f"  check wall, fork / spawn:                    {fork['check_wall_s'] / spawn['check_wall_s']:.3f}")
    print(f"  start + check CPU, fork / spawn:             {fork['check_cpu_s'] / spawn['check_cpu_s']:.3f}")
    print(f"  hello wall, fork / bare import wall:         {fork['hello_s'] / import_wall:.3f}")
    print(f"  hello wall, spawn / bare import wall:        {spawn['hello_s'] / import_wall:.3f}")
    print(f"  start + check CPU, fork / bare import CPU:   {fork['check_cpu_s'] / import_cpu:.3f}")
    print(f"  start + check CPU, spawn / bare import CPU:  {spawn['check_cpu_s'] / import_cpu:.3f}")
    print(f"  first hello, fork / spawn:                   {fork['first_hello_s'] / spawn['first_hello_s']:.3f}")


if __name__ == "__main__":
    main()
