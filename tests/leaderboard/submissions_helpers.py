"""Fixtures for the submissions tests: a store per test, on SQLite and on a real PostgreSQL server.

PostgreSQL: a throwaway cluster (initdb + pg_ctl, as the ``postgres`` user when
run as root) in a temporary folder on a free local port, started once per
session (~4 s) and stopped at the end. ``scripts/test.sh`` installs Debian's
``postgresql`` package when its binaries are missing; set
``WHESTBOARD_SKIP_POSTGRES=1`` to run only the SQLite half (e.g. on a laptop).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests import prod_support
from whestboard.leaderboard import _files
from whestboard.store import reset_engines


@pytest.fixture(scope="session")
def postgres_server():
    """Base URL (without database) of a private PostgreSQL server, or a skip/fail saying why not."""
    if os.environ.get("WHESTBOARD_SKIP_POSTGRES") == "1":
        pytest.skip("WHESTBOARD_SKIP_POSTGRES=1")
    with prod_support.postgres_server() as url:  # fails, naming the package, when PostgreSQL is missing
        try:
            yield url.rsplit("/", 1)[0]
        finally:
            reset_engines()


_counter = {"n": 0}


def _fresh_postgres_database(server: str) -> str:
    import psycopg

    _counter["n"] += 1
    name = f"whestboard_{os.getpid()}_{_counter['n']}_{int(time.time() * 1000) % 10**6}"
    with psycopg.connect(server.replace("postgresql+psycopg", "postgresql") + "/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path, monkeypatch):
    """An empty store, also made the default (``WHESTBOARD_DATABASE_URL``) for code that takes no url."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    else:
        url = _fresh_postgres_database(request.getfixturevalue("postgres_server"))
    monkeypatch.setenv("WHESTBOARD_DATABASE_URL", url)
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    yield url
    reset_engines()


@pytest.fixture()
def sqlite_store(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    monkeypatch.setenv("WHESTBOARD_DATABASE_URL", url)
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    yield url
    reset_engines()


# ---------------------------------------------------------------------------
# files in the import schema
# ---------------------------------------------------------------------------

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def submission_row(sid: str, team: str, *, round_tag: str = "v1-warmup", scores=(1e-5, 3e-5), mses=None,
                   flops=(1e9, 1e9), failed=(False, False), minutes: int = 0, **extra) -> tuple[dict, list[dict]]:
    """A consistent submission row and its per-MLP rows (aggregates are the per-MLP means)."""
    mses = mses or [s * 10 for s in scores]
    multipliers = [1.0 if f else 0.1 for f in failed]
    n = len(scores)
    row = {
        "submission_id": sid, "team": team, "round": round_tag,
        "submitted_at": (T0 + timedelta(minutes=minutes)).isoformat(), "status": "graded",
        "whestbench_version": "0.16.2", "flopscope_version": "0.12.4",
        "mean_flops_used": sum(flops) / n, "final_layer_mse": sum(mses) / n, "adjusted_score": sum(scores) / n,
        "mean_multiplier": sum(multipliers) / n, "n_failed_mlps": sum(failed), "n_mlps": n,
        **extra,
    }
    mlps = [
        {"submission_id": sid, "mlp_index": i, "final_layer_mse": mses[i], "adjusted_score": scores[i],
         "flops_used": flops[i], "multiplier": multipliers[i], "failed": failed[i]}
        for i in range(n)
    ]
    return row, mlps


def write_csvs(folder: Path, rows: list[tuple[dict, list[dict]]], stem: str = "subs") -> Path:
    import pandas as pd

    folder.mkdir(parents=True, exist_ok=True)
    subs = pd.DataFrame([r for r, _ in rows])
    mlps = pd.DataFrame([m for _, ms in rows for m in ms])
    path = folder / f"{stem}.csv"
    subs.to_csv(path, index=False)
    if len(mlps):
        mlps.to_csv(folder / f"{stem}.per_mlp.csv", index=False)
    return path


def split_board_files(folder) -> tuple[Path, dict]:
    """Files of four teams in v1-warmup with public and private MLPs; beta is nominated and was rerun.

    delta overfits and arbitrages residual time: 10 MLPs a half, private scores 10.3x its public
    ones, 1e6 FLOPs on every MLP at a charged cost of 2e10 (F / C = 5e-5), and public final-layer MSEs
    near 1e-8 (the Phase 1 leaders'), which no shipped baseline reaches with 1e6 FLOPs. Returns the
    submissions file and the private and rerun scores, which no response without the
    organizer token may hold.
    """
    entries = []
    for sid, team, public, private, nominated in (
        ("a-1", "alpha", (1e-6, 2e-6, 3e-6, 4e-6), (9.1e-6,) * 4, False),
        ("b-1", "beta", (2e-6, 3e-6, 4e-6, 5e-6), (2.21e-6, 3.31e-6, 4.41e-6, 5.51e-6), True),
        ("c-1", "gamma", (5e-6, 6e-6, 7e-6, 8e-6), (1.3e-6,) * 4, False),
    ):
        row, mlps = submission_row(sid, team, scores=public, flops=(1e9,) * 4, failed=(False,) * 4,
                                   nominated=nominated)
        mlps += [{"submission_id": sid, "mlp_index": i, "final_layer_mse": s * 10, "adjusted_score": s,
                  "flops_used": 1e9, "split": "private"} for i, s in enumerate(private)]
        if nominated:
            mlps += [{"submission_id": sid, "mlp_index": i, "final_layer_mse": 1e-5, "adjusted_score": 7.7e-7,
                      "split": "rerun", "failed": i == 0, "failure": "time" if i == 0 else None}
                     for i in range(4)]
        entries.append((row, mlps))
    delta_public = [8e-6 + 1e-6 * i for i in range(10)]
    row, mlps = submission_row("d-1", "delta", scores=delta_public, mses=[s * 1e-3 for s in delta_public],
                               flops=(1e6,) * 10, failed=(False,) * 10, mean_effective_compute=2e10)
    for m in mlps:
        m["effective_compute"] = 2e10
    mlps += [{"submission_id": "d-1", "mlp_index": 10 + i, "final_layer_mse": 10.3 * s * 1e-3, "adjusted_score": 10.3 * s,
              "flops_used": 1e6, "effective_compute": 2e10, "split": "private"} for i, s in enumerate(delta_public)]
    entries.append((row, mlps))
    private = {"alpha_private": 9.1e-6, "beta_private": 3.86e-6, "gamma_private": 1.3e-6, "beta_rerun": 7.7e-7,
               "delta_private": 10.3 * sum(delta_public) / 10,
               "beta_private_mlps": (2.21e-6, 3.31e-6, 4.41e-6, 5.51e-6),
               "delta_private_mlps": tuple(10.3 * s for s in delta_public)}
    return write_csvs(folder, entries), private


def split_board(folder) -> dict:
    """``split_board_files``, imported into the configured store; returns the private scores."""
    path, private = split_board_files(folder)
    _files.import_files([path])
    return private
