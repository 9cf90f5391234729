"""Where a leaderboard snapshot is kept: a state-folder file against the shared artifact store, on one store.

Times, on a store the leaderboard benchmark kept (``bench_leaderboard.py --keep-state DIR``), the
biggest round's narrow read and the timeline's columns three ways, each in this one run: read from the
table (what a fresh worker paid before snapshots), written and read back as a state-folder file
(with the one atomic-write helper), and written and read back by ``whestboard.leaderboard.snapshot``
through ``whestboard.store.blobs`` (the database's artifact store: what ships, under the store's revision). Prints each figure and the ratios.

    .venv/bin/python benchmarks/bench_snapshot.py DIR/500000 [--repeats 3]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
ROUND = "v2-phase2"


def _median_time(work, repeats: int) -> tuple[float, object]:
    times, value = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        value = work()
        times.append(time.perf_counter() - started)
    return statistics.median(times), value


def _measure(snapshot, atomic, url: str, revision: str, name: str, scan, repeated, repeats: int,
             folder: Path) -> None:
    """One scan: from the table, through the artifact store (what ships), as a state-folder file (each timed)."""
    t_table, df = _median_time(scan, repeats)
    buffer = io.BytesIO()
    np.savez(buffer, **snapshot.encode(df, repeated))
    data = buffer.getvalue()
    t_blob_write, _ = _median_time(lambda: snapshot.write(url, name, revision, df, repeated), repeats)
    t_blob_read, back = _median_time(lambda: snapshot.read(url, name, revision), repeats)
    assert back.equals(df)
    path = folder / f"{name.replace(':', '-')}.npz"
    t_file_write, _ = _median_time(lambda: atomic.write_bytes(path, data), repeats)

    def file_read():
        with np.load(path, allow_pickle=False) as archive:
            return snapshot.decode({key: archive[key] for key in archive.files})

    t_file_read, back = _median_time(file_read, repeats)
    assert back.equals(df)
    print(f"{name}: {len(df):,} rows, snapshot {len(data) / 1e6:.1f} MB (median of {repeats})")
    print(f"  read from the table            {t_table:7.3f} s")
    print(f"  artifact store:    write {t_blob_write:7.3f} s, read {t_blob_read:7.3f} s "
          f"(x{t_table / t_blob_read:.0f} faster than the table)")
    print(f"  state-folder file: write {t_file_write:7.3f} s, read {t_file_read:7.3f} s "
          f"(artifact store read / file read: x{t_blob_read / t_file_read:.1f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="one size's folder of a kept leaderboard benchmark store")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    os.environ["WHESTBOARD_DATABASE_URL"] = f"sqlite:///{args.kept / 'bench.sqlite'}"
    os.environ["WHESTBOARD_STATE_DIR"] = str(args.kept / "state-bench-snapshot")
    sys.path.insert(0, str(REPO))
    from whestboard.leaderboard import snapshot, store
    from whestboard.store import atomic

    url = store.db_url()
    revision = store.revision()
    scans = {f"round_scan:{ROUND}": (lambda: store._round_scan_rows(ROUND, url), ("team",)),
             "timeline_field": (lambda: store._timeline_scan(url), ("team", "round", "status"))}
    for name, (scan, repeated) in scans.items():
        _measure(snapshot, atomic, url, revision, name, scan, repeated, args.repeats,
                 args.kept / "state-bench-snapshot")
    print(f"load average {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
