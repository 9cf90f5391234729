"""Bake a compact dataset: MLPs from seeds, ground truth by Monte Carlo.

Follows ``whestbench.create_dataset`` step for step under seed protocol 3.0:
``SeedSequence(mlp_seed).spawn(3)`` gives the weight stream, the sampling
stream and the estimator seed; names come from ``assign_unique_names`` over the
whole seed list. The same seeds and sample count therefore give the ground
truth ``create_dataset`` writes, bit for bit (the tests bake both and compare).
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from whestboard.data import _compact
from whestboard.jobs import owner_alive
from whestboard.rules import sampling_budget_breakdown
from whestboard.rules import get_round
from whestboard.rules import library_versions
from whestboard.data._sampling import layer_statistics
from whestboard.data._sampling import chunk_size_for

SEED_PROTOCOL = "3.0"
ENGINES = ("numpy", "whestbench")


class BakeError(ValueError):
    """A bake that cannot start or continue; the message says what to change."""


@dataclass(frozen=True)
class BakePlan:
    """What a bake directory promises to contain once every MLP is baked."""

    round_tag: str | None
    width: int
    depth: int
    n_samples: int
    mlp_seeds: tuple[int, ...]

    @property
    def n_mlps(self) -> int:
        return len(self.mlp_seeds)


def fresh_seeds(n: int) -> list[int]:
    """Distinct int63 seeds, drawn the way ``create_dataset`` draws them."""
    seeds: list[int] = []
    while len(seeds) < n:
        s = secrets.randbits(63)
        if s not in seeds:
            seeds.append(s)
    return seeds


def plan_from_args(
    *,
    round_tag: str | None,
    width: int | None,
    depth: int | None,
    n_mlps: int | None,
    n_samples: int,
    seeds: Sequence[int] | None,
) -> BakePlan:
    """Resolve CLI arguments to a plan; the round supplies the shape unless overridden."""
    if round_tag is not None:
        rnd = get_round(round_tag)
        width = width or rnd.width
        depth = depth or rnd.depth
    if not width or not depth:
        raise BakeError("give --round, or both --width and --depth")
    if n_samples <= 0:
        raise BakeError("--samples must be positive")
    if seeds is not None:
        seeds = [int(s) for s in seeds]
        if n_mlps is not None and n_mlps != len(seeds):
            raise BakeError(f"--n-mlps {n_mlps} disagrees with {len(seeds)} --seeds")
        if len(set(seeds)) != len(seeds):
            raise BakeError("--seeds must be distinct")
        if any(s < 0 or s >= 2**63 for s in seeds):
            raise BakeError("--seeds must be integers in [0, 2^63)")
    else:
        if not n_mlps or n_mlps <= 0:
            raise BakeError("give --n-mlps (or explicit --seeds)")
        seeds = fresh_seeds(n_mlps)
    return BakePlan(round_tag, int(width), int(depth), int(n_samples), tuple(seeds))


def _manifest_for(plan: BakePlan, engine: str) -> dict[str, Any]:
    from whestbench.naming import assign_unique_names
    from whestbench.seeds import bake_seed_values

    est_seeds, name_seeds = bake_seed_values(
        list(plan.mlp_seeds), seed_protocol_version=SEED_PROTOCOL
    )
    return {
        "format": _compact.FORMAT_NAME,
        "format_version": _compact.FORMAT_VERSION,
        "round": plan.round_tag,
        "width": plan.width,
        "depth": plan.depth,
        "n_mlps": plan.n_mlps,
        "n_samples": plan.n_samples,
        "seed_protocol": {"version": SEED_PROTOCOL},
        "mlp_seeds": list(plan.mlp_seeds),
        "estimator_seeds": [int(s) for s in est_seeds],
        "mlp_names": assign_unique_names(name_seeds),
        "engine": engine,
        "created_at_utc": datetime.now(UTC).isoformat(),
        **library_versions(),
    }


def _check_resume(directory: Path, plan: BakePlan) -> dict[str, Any]:
    existing = _compact.read_manifest(directory)
    mismatches = [
        key
        for key, want in (
            ("width", plan.width),
            ("depth", plan.depth),
            ("n_samples", plan.n_samples),
        )
        if existing.get(key) != want
    ]
    if mismatches:
        raise BakeError(
            f"{directory} already holds a bake with different {', '.join(mismatches)}; "
            "resume with the same arguments or choose another --out"
        )
    return existing


def prepare_bake(directory: Path, plan: BakePlan, *, engine: str, explicit_seeds: bool) -> dict:
    """Create the manifest, or reuse it when resuming an interrupted bake."""
    directory = Path(directory)
    if _compact.is_compact_dir(directory):
        manifest = _check_resume(directory, plan)
        if explicit_seeds and tuple(manifest["mlp_seeds"]) != plan.mlp_seeds:
            raise BakeError(f"{directory} was started with other seeds; choose another --out")
        return manifest
    if directory.exists() and any(directory.iterdir()):
        raise BakeError(f"{directory} exists and is not a Whestboard bake; choose another --out")
    manifest = _manifest_for(plan, engine)
    if not _compact.create_manifest(directory, manifest):
        return prepare_bake(directory, plan, engine=engine, explicit_seeds=explicit_seeds)  # lost the race
    return manifest


def build_weights(width: int, depth: int, mlp_seed: int) -> np.ndarray:
    """Weights exactly as ``create_dataset`` samples them, as one float32 array.

    ``whestbench.sample_mlp`` draws ``standard_normal((w, w)) * sqrt(2 / w)`` per
    layer from the seed's weight stream and casts to float32; doing the same in
    plain numpy skips flopscope's wrappers (about 40% faster at 1024 x 16) and is
    bit-identical, which the tests check against whestbench itself.
    """
    from whestbench.seeds import derive_seed_streams

    weight_ss, _sample_ss, _ = derive_seed_streams(int(mlp_seed))
    rng = np.random.default_rng(weight_ss)
    scale = float(np.sqrt(2.0 / width))
    weights = np.empty((depth, width, width), dtype=np.float32)
    for layer in range(depth):
        weights[layer] = rng.standard_normal((width, width)) * scale
    return weights


def sample_truth(
    weights: np.ndarray,
    mlp_seed: int,
    n_samples: int,
    *,
    engine: str,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, float, dict | None]:
    """Ground truth on the MLP's own sampling stream; returns (means, avg_variance, breakdown)."""
    from whestbench.seeds import derive_seed_streams

    _w, sample_ss, _ = derive_seed_streams(int(mlp_seed))
    if engine == "numpy":

        means, avg_var = layer_statistics(
            list(weights), n_samples, np.random.default_rng(sample_ss), progress=progress
        )
        return means, avg_var, None
    if engine == "whestbench":
        return _sample_truth_whestbench(weights, sample_ss, n_samples, progress)
    raise BakeError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")


def _sample_truth_whestbench(weights, sample_ss, n_samples, progress):
    import flopscope as flops
    import flopscope.numpy as fnp
    from whestbench import MLP, sample_layer_statistics

    depth, width = weights.shape[0], weights.shape[1]
    mlp = MLP(width=width, depth=depth, weights=[fnp.array(w) for w in weights])

    def on_chunk(event: dict) -> None:
        if progress is not None:
            progress(int(event["completed"]), int(event["total"]))

    with flops.BudgetContext(flop_budget=int(1e15), quiet=True) as ctx:
        with flops.namespace("sampling"), flops.namespace("sample_layer_statistics"):
            means, _final, avg_var = sample_layer_statistics(
                mlp, n_samples, rng=fnp.random.default_rng(sample_ss), progress=on_chunk
            )
    breakdown = sampling_budget_breakdown(ctx.summary_dict(by_namespace=True))
    return np.asarray(means, dtype=np.float32), float(avg_var), breakdown


def bake_one(directory: Path, manifest: dict, index: int, *, engine: str, progress=None) -> None:
    """Bake MLP ``index`` and write its record; the unit of resumption."""
    width, depth, n_samples = manifest["width"], manifest["depth"], manifest["n_samples"]
    seed = int(manifest["mlp_seeds"][index])
    started = time.perf_counter()
    weights = build_weights(width, depth, seed)
    means, avg_var, breakdown = sample_truth(
        weights, seed, n_samples, engine=engine, progress=progress
    )
    bake_known_truth(directory, manifest, index, weights, means, avg_var, breakdown=breakdown,
                     origin={"engine": engine, "wall_time_s": round(time.perf_counter() - started, 3)})


def bake_known_truth(directory: Path, manifest: dict, index: int, weights: np.ndarray, means: np.ndarray,
                     avg_variance: float, *, breakdown: dict | None = None, origin: dict | None = None) -> None:
    """Write MLP ``index``'s record from a truth already drawn on its sampling stream (the playground
    keeps the truth it shows; a bake passes what it just sampled)."""
    provenance = {
        "engine": manifest.get("engine", "numpy"),
        "n_samples": manifest["n_samples"],
        **(origin or {}),
        "baked_at_utc": datetime.now(UTC).isoformat(),
        "sampling_budget_breakdown": breakdown,
        **library_versions(),
    }
    _compact.write_mlp_record(
        directory,
        index,
        all_layer_means=means,
        avg_variance=avg_variance,
        weights_sha256=_compact.weights_checksum(weights),
        provenance=provenance,
    )


def bake(
    directory: Path,
    plan: BakePlan,
    *,
    engine: str = "numpy",
    explicit_seeds: bool = False,
    show_progress: bool = True,
) -> dict:
    """Bake every MLP not yet on disk; safe to kill and re-run."""
    if engine not in ENGINES:
        raise BakeError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    directory = Path(directory)
    manifest = prepare_bake(directory, plan, engine=engine, explicit_seeds=explicit_seeds)
    todo = [i for i in range(manifest["n_mlps"]) if i not in set(_compact.baked_indices(directory))]
    if not todo:
        return manifest

    chunks_per_mlp = -(-manifest["n_samples"] // chunk_size_for(manifest["width"]))
    bar = _progress_bar(len(todo) * chunks_per_mlp, show_progress, directory.name)
    try:
        for done_mlps, index in enumerate(todo):
            offset = done_mlps * chunks_per_mlp

            def on_chunk(completed: int, _total: int, offset: int = offset) -> None:
                bar.n = offset + completed
                bar.refresh()

            with claim(directory, index) as mine:
                if not mine or index in _compact.baked_indices(directory):
                    continue  # another bake process has it, or finished it meanwhile
                bar.set_postfix_str(f"MLP {index + 1}/{manifest['n_mlps']}")
                bake_one(directory, manifest, index, engine=engine, progress=on_chunk)
    finally:
        bar.close()
    return manifest


@contextmanager
def claim(directory: Path, index: int) -> Iterator[bool]:
    """Claim one MLP so several bake processes can share a dataset without duplicating work.

    The claim is a file holding the owner's pid, created exclusively. A claim whose
    process is gone (a killed bake) is stale and taken over.
    """
    path = _compact.mlp_path(directory, index).with_suffix(".claim")
    for _attempt in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _claim_is_alive(path):
                yield False
                return
            path.unlink(missing_ok=True)
            continue
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{os.getpid()}@{socket.gethostname()}")
        try:
            yield True
        finally:
            path.unlink(missing_ok=True)
        return
    yield False


def _claim_is_alive(path: Path) -> bool:
    try:
        pid_text, _, host = path.read_text().partition("@")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    return owner_alive(pid, host)


def _progress_bar(total: int, enabled: bool, label: str):
    from tqdm import tqdm

    return tqdm(total=total, unit="chunk", desc=f"baking {label}", disable=not enabled,
                mininterval=1.0, smoothing=0.05)
