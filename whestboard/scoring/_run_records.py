"""Durable record of every run, and the cache a repeated run is served from.

One row per run: the summary columns the leaderboard and convergence pages
list and filter on, the full report as JSON, and the scored predictions as a
compressed array (only the lab's heatmap and scatter need them). A run is
found again by its cache key (``whestboard.scoring._runs.cache_key``), so an identical
request is answered from here instead of being metered again.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime

import numpy as np
from sqlalchemy import BigInteger, DateTime, Float, Integer, LargeBinary, String, Text, func, select
from sqlalchemy.orm import Mapped, mapped_column

from whestboard.scoring._inputs import RunError
from whestboard.store import Base, finite, json_safe, session

SOURCES = ("lab", "cli", "upload", "sweep")


class RunRecord(Base):
    """A scored run: summary columns plus the full report."""

    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    cache_key: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    dataset_key: Mapped[str] = mapped_column(String(200), index=True)
    round_tag: Mapped[str | None] = mapped_column(String(40), index=True, nullable=True)
    estimator_label: Mapped[str] = mapped_column(String(300))
    estimator_kind: Mapped[str] = mapped_column(String(20))
    code_sha256: Mapped[str] = mapped_column(String(64))
    team: Mapped[str | None] = mapped_column(String(200), nullable=True)
    source: Mapped[str] = mapped_column(String(20))
    budget: Mapped[int] = mapped_column(BigInteger)
    mlp_indices: Mapped[str] = mapped_column(Text)
    n_mlps: Mapped[int] = mapped_column(Integer)
    mean_flops_used: Mapped[float] = mapped_column(Float)
    mean_effective_compute: Mapped[float] = mapped_column(Float)
    final_layer_mse: Mapped[float] = mapped_column(Float)
    all_layers_mse: Mapped[float] = mapped_column(Float)
    adjusted_score: Mapped[float] = mapped_column(Float)
    mean_multiplier: Mapped[float] = mapped_column(Float)
    n_failed: Mapped[int] = mapped_column(Integer)
    per_layer_mse: Mapped[str] = mapped_column(Text)
    noise_floor: Mapped[float | None] = mapped_column(Float, nullable=True)
    whestbench_version: Mapped[str] = mapped_column(String(40))
    flopscope_version: Mapped[str] = mapped_column(String(40))
    report: Mapped[str] = mapped_column(Text)
    predictions: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    # Added later (nullable: the bootstrap adds them to an older table, whose runs read None, unknown):
    # the seed protocol of the suite its MLPs come from, and the run this one re-scored under the
    # installed versions (the old run is kept beside it).
    seed_protocol: Mapped[str | None] = mapped_column(String(32), nullable=True)
    rescore_of: Mapped[str | None] = mapped_column(String(32), nullable=True)


def _pack_predictions(predictions: dict[int, np.ndarray] | None) -> bytes | None:
    if not predictions:
        return None
    indices = sorted(predictions)
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, indices=np.asarray(indices, dtype=np.int64),
        predictions=np.stack([np.asarray(predictions[i], dtype=np.float32) for i in indices]),
    )
    return buffer.getvalue()


def _summary_columns(report: dict) -> dict:
    results = report["results"]
    per_mlp = results.get("per_mlp") or []
    estimator = report.get("estimator") or {}
    dataset = report.get("dataset") or {}
    versions = report.get("versions") or {}
    flops = [float(e.get("flops_used", 0)) for e in per_mlp]
    source = report.get("source") or "lab"
    if source not in SOURCES:
        raise ValueError(f"run source must be one of {', '.join(SOURCES)}, got {source!r}")
    return {
        "dataset_key": dataset.get("key", ""),
        "round_tag": (report.get("rulebook") or {}).get("round_tag") or dataset.get("round_tag"),
        "estimator_label": estimator.get("label", ""),
        "estimator_kind": estimator.get("kind", ""),
        "code_sha256": estimator.get("code_sha256", ""),
        "team": report.get("team"),
        "source": source,
        "budget": int((report.get("rulebook") or {}).get("flop_budget") or report["run_config"]["flop_budget"]),
        "mlp_indices": json.dumps([int(e["mlp_index"]) for e in per_mlp] or report.get("mlp_indices", [])),
        "n_mlps": len(per_mlp),
        "mean_flops_used": (sum(flops) / len(flops)) if flops else 0.0,
        "mean_effective_compute": float(results.get("mean_effective_compute", 0.0)),
        "final_layer_mse": finite(results.get("final_layer_mse")),
        "all_layers_mse": finite(results.get("all_layers_mse")),
        "adjusted_score": finite(results.get("adjusted_final_layer_score")),
        "mean_multiplier": float(results.get("mean_score_multiplier", 1.0)),
        "n_failed": int(results.get("n_failed_mlps", 0)),
        "per_layer_mse": json.dumps(json_safe(list(results.get("per_layer_mse") or []))),
        "noise_floor": finite((report.get("noise") or {}).get("noise_floor")),
        "whestbench_version": versions.get("whestbench_version", ""),
        "flopscope_version": versions.get("flopscope_version", ""),
        "seed_protocol": dataset.get("seed_protocol"),
        "rescore_of": report.get("rescore_of"),
    }


def record_run(report: dict, *, predictions: dict[int, np.ndarray] | None = None) -> str:
    """Store a run report (``whestboard.scoring._runs`` shape); returns its new run_id, also set in ``report``."""
    run_id = uuid.uuid4().hex
    created = report.get("created_at")
    created_at = datetime.fromisoformat(created) if created else datetime.now(UTC)
    report["run_id"] = run_id
    row = RunRecord(
        run_id=run_id,
        created_at=created_at,
        cache_key=report.get("cache_key"),
        report=json.dumps(json_safe(report)),
        predictions=_pack_predictions(predictions),
        **_summary_columns(report),
    )
    with session() as s:
        s.add(row)
    return run_id


def _as_summary(row) -> dict:
    created = row.created_at if row.created_at.tzinfo else row.created_at.replace(tzinfo=UTC)
    return {
        "run_id": row.run_id,
        "created_at": created.isoformat(),
        "dataset_key": row.dataset_key,
        "round_tag": row.round_tag,
        "estimator_label": row.estimator_label,
        "estimator_kind": row.estimator_kind,
        "code_sha256": row.code_sha256,
        "team": row.team,
        "source": row.source,
        "budget": row.budget,
        "mlp_indices": json.loads(row.mlp_indices),
        "n_mlps": row.n_mlps,
        "mean_flops_used": row.mean_flops_used,
        "mean_effective_compute": row.mean_effective_compute,
        "final_layer_mse": row.final_layer_mse,
        "all_layers_mse": row.all_layers_mse,
        "adjusted_score": row.adjusted_score,
        "mean_multiplier": row.mean_multiplier,
        "n_failed": row.n_failed,
        "per_layer_mse": json.loads(row.per_layer_mse),
        "noise_floor": row.noise_floor,
        "whestbench_version": row.whestbench_version,
        "flopscope_version": row.flopscope_version,
        "seed_protocol": row.seed_protocol,
        "rescore_of": row.rescore_of,
    }


_SUMMARY_COLUMNS = [c for c in RunRecord.__table__.columns if c.name not in ("report", "predictions", "cache_key")]


def list_runs(round_tag: str | None = None, dataset_key: str | None = None, *,
              limit: int | None = None) -> list[dict]:
    """Every recorded run (newest first) as summary dicts, optionally for one round / dataset, the newest
    ``limit`` of them when given."""
    query = select(*_SUMMARY_COLUMNS).order_by(RunRecord.created_at.desc(), RunRecord.run_id)
    if round_tag is not None:
        query = query.where(RunRecord.round_tag == round_tag)
    if dataset_key is not None:
        query = query.where(RunRecord.dataset_key == dataset_key)
    if limit is not None:
        query = query.limit(max(int(limit), 0))
    with session() as s:
        rows = s.execute(query).all()
    return [_as_summary(row) for row in rows]


#: The shortest prefix of a run id taken for the whole id (the pages show 8 characters).
MIN_RUN_PREFIX = 6
#: Run ids are uuid4 hex: what a prefix may hold (anything else is never a run id).
_HEX = frozenset("0123456789abcdef")


def resolve_run_id(text: str) -> str | None:
    """The run id ``text`` names: the id itself, or the short prefix the pages show (at least
    ``MIN_RUN_PREFIX`` characters) when exactly one recorded run starts with it; None when no run does.
    A prefix that more than one run starts with raises RunError naming them, so a shown id never picks the
    wrong run."""
    text = (text or "").strip().lower()
    if not text or not set(text) <= _HEX or len(text) > 32:
        return None
    with session() as s:
        if s.execute(select(RunRecord.run_id).where(RunRecord.run_id == text)).scalar_one_or_none():
            return text
        if len(text) < MIN_RUN_PREFIX:
            return None
        found = s.execute(select(RunRecord.run_id).where(RunRecord.run_id.like(text + "%"))
                          .order_by(RunRecord.run_id).limit(6)).scalars().all()
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise RunError(f"run id {text!r} is the start of {'more than 5' if len(found) > 5 else len(found)} runs "
                       f"({shown}): give more of the id (`python -m whestboard runs` lists them)")
    return found[0] if found else None


def get_run(run_id: str) -> dict | None:
    """The full report (per-MLP results included), or None for an unknown id."""
    with session() as s:
        text = s.execute(select(RunRecord.report).where(RunRecord.run_id == run_id)).scalar_one_or_none()
    return json.loads(text) if text else None


def get_run_predictions(run_id: str) -> dict[int, np.ndarray]:
    """Scored predictions per MLP index (empty when the run stored none)."""
    with session() as s:
        blob = s.execute(select(RunRecord.predictions).where(RunRecord.run_id == run_id)).scalar_one_or_none()
    if not blob:
        return {}
    with np.load(io.BytesIO(blob)) as packed:
        # Each ``packed[name]`` decompresses the whole member again: read each once, not once per MLP.
        indices, predictions = packed["indices"], packed["predictions"]
    return {int(i): predictions[n] for n, i in enumerate(indices)}


def find_cached(cache_key: str) -> str | None:
    """The newest complete run with this cache key, if any."""
    query = (
        select(RunRecord.run_id)
        .where(RunRecord.cache_key == cache_key)
        .order_by(RunRecord.created_at.desc())
        .limit(1)
    )
    with session() as s:
        return s.execute(query).scalar_one_or_none()


def runs_revision() -> str:
    """A token that changes whenever a run is recorded: what derived pictures are cached under.

    Runs are only ever added, so the row count and the newest timestamp say
    everything; one indexed query, far cheaper than listing the runs.
    """
    with session() as s:
        count, newest = s.execute(select(func.count(RunRecord.run_id), func.max(RunRecord.created_at))).one()
    return f"{count}:{newest.isoformat() if newest else '-'}"
