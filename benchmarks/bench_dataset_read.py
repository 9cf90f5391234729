"""Reading one MLP from an official 1024 x 16 dataset, against a bare pyarrow read.

Prints, measured in this one run (each reader in its own fresh process):
  time and peak-memory ratios of ``open_dataset(dir).mlp(i)`` to a bare
  ``ParquetFile.read_row_group(rg, columns=["weights"])``, the memory that stays
  resident afterwards, and the time of ``.summary()`` on a 1000-MLP split.

Usage: python benchmarks/bench_dataset_read.py [--workdir DIR]
The official-format inputs are made once with whestbench.create_dataset (a few
minutes the first time) and reused from --workdir.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = r"""
import gc, json, sys, time
sys.path.insert(0, {repo!r})

def rss_kb(field):
    for line in open('/proc/self/status'):
        if line.startswith(field):
            return int(line.split()[1])

import numpy, pyarrow, pyarrow.parquet as pq
from whestboard.data import open_dataset
import whestbench.budget
gc.collect()
base = rss_kb('VmRSS')
mode, path, index = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0 = time.perf_counter()
if mode == 'bare':
    import glob
    pf = pq.ParquetFile(sorted(glob.glob(path + '/data/*.parquet'))[0])
    table = pf.read_row_group(0, columns=['weights'])
    keep = table
elif mode == 'mlp':
    ds = open_dataset(path)
    keep = ds.mlp(index)
elif mode == 'summary':
    ds = open_dataset(path)
    keep = ds.summary()
elapsed = time.perf_counter() - t0
peak = rss_kb('VmHWM') - base
gc.collect()
resident = rss_kb('VmRSS') - base
print(json.dumps({{'seconds': elapsed, 'peak_mb': peak / 1024, 'resident_mb': resident / 1024}}))
"""


def ensure_official(path: Path, *, n_mlps: int, width: int, depth: int) -> Path:
    if (path / "metadata.json").exists():
        return path
    from whestbench import create_dataset

    print(f"creating {path} ({n_mlps} MLPs of {width} x {depth}) with whestbench.create_dataset ...", flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        create_dataset(n_mlps=n_mlps, n_samples=1024, width=width, depth=depth,
                       mlp_seeds=list(range(1, n_mlps + 1)), output_path=path)
    return path


def probe(mode: str, path: Path, index: int = 0) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE.format(repo=str(REPO)), mode, str(path), str(index)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def best_of(mode: str, path: Path, repeats: int) -> dict:
    runs = [probe(mode, path) for _ in range(repeats)]
    return min(runs, key=lambda r: r["seconds"]) | {"peak_mb": max(r["peak_mb"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/whestboard-bench"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    big = ensure_official(args.workdir / "official-1024x16", n_mlps=2, width=1024, depth=16)
    many = ensure_official(args.workdir / "official-1000x16x2", n_mlps=1000, width=16, depth=2)

    bare = best_of("bare", big, args.repeats)
    ours = best_of("mlp", big, args.repeats)
    summary = best_of("summary", many, args.repeats)
    mlp_mb = 16 * 1024 * 1024 * 4 / 2**20
    print(f"bare pyarrow row-group read : {bare['seconds']:.3f} s, peak +{bare['peak_mb']:.0f} MB")
    print(f"open_dataset(dir).mlp(0)    : {ours['seconds']:.3f} s, peak +{ours['peak_mb']:.0f} MB, "
          f"resident after +{ours['resident_mb']:.0f} MB (the MLP itself is {mlp_mb:.0f} MiB)")
    print(f"time ratio  (ours / bare)   : {ours['seconds'] / bare['seconds']:.2f}  (target <= 1.0-ish)")
    print(f"peak ratio  (ours / bare)   : {ours['peak_mb'] / bare['peak_mb']:.2f}")
    print(f"resident / MLP size         : {ours['resident_mb'] / mlp_mb:.2f}")
    print(f".summary() on 1000 MLPs     : {summary['seconds'] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
