"""``band``: measure a dataset's Monte Carlo convergence band (and its white-box baselines), resumably."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from whestboard.band import BASELINE_LABELS, DEFAULT_MAX_BUDGET_MULTIPLE, compute_band, compute_baselines
from whestboard.data import get_dataset, open_dataset, served_datasets


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", required=True,
                   help="dataset directory (official schema-3.0 or compact), or the key of a served dataset")
    p.add_argument("--max-budget-multiple", type=float, default=DEFAULT_MAX_BUDGET_MULTIPLE,
                   help="sample up to this many times the round's budget (default %(default)g)")
    p.add_argument("--budget", type=float, help="budget B in FLOPs (default: the round's; required for custom shapes)")
    p.add_argument("--jobs", type=int, help="MLPs measured at once, one BLAS thread each (default: cores)")
    p.add_argument("--out", type=Path, help="band directory (default: beside the dataset, else the state folder; "
                        "the app looks only in those two)")
    p.add_argument("--restart", action="store_true", help="discard a stored band made with other settings")
    p.add_argument("--no-baselines", action="store_true", help="skip mean / covariance propagation")
    p.add_argument("--baseline", action="append", dest="baselines", choices=list(BASELINE_LABELS), metavar="KIND",
                   help="only this white-box baseline (repeatable; default: every one): "
                        + ", ".join(BASELINE_LABELS))
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _open(spec: str):

    path = Path(spec).expanduser()
    if path.is_dir():
        resolved = path.resolve()
        for ds in served_datasets().values():  # keep the served key, so the page finds the band
            if Path(ds.info.path).resolve() == resolved:
                return ds
        return open_dataset(path)
    if "/" in spec or spec.startswith("."):
        raise FileNotFoundError(f"{spec}: no such dataset directory")
    return get_dataset(spec)


def run(args: argparse.Namespace) -> int:

    if args.jobs is not None and args.jobs < 1:
        raise ValueError("--jobs must be at least 1")
    dataset = _open(args.dataset)
    budget = int(args.budget) if args.budget is not None else None
    report = compute_band(
        dataset, max_budget_multiple=args.max_budget_multiple, budget=budget, jobs=args.jobs, out=args.out,
        restart=args.restart, show_progress=not args.quiet,
    )
    _print_band(report, dataset)
    if not args.no_baselines:
        kinds = tuple(args.baselines or BASELINE_LABELS)
        _baselines(dataset, budget, report.directory, kinds=kinds, quiet=args.quiet)
    return 0


def _print_band(report, dataset) -> None:
    plan = report.plan
    print(f"band of {dataset.info.key}: {report.skipped} MLPs already stored, {len(report.computed)} computed "
          f"into {report.directory}")
    print(f"  checkpoints {plan.checkpoints[0]:,} .. {plan.n_max:,} samples ({len(plan.checkpoints)} points; "
          f"N at budget = {plan.n_at_budget:,}, {plan.flops_per_sample:,} FLOPs per sample)")
    if report.computed:
        per_mlp = [b.wall_time_s for b in report.computed]
        matmul = 2 * plan.depth * plan.width**2 * report.samples_per_second
        print(f"  {sum(per_mlp) / len(per_mlp):.1f} s per MLP (one thread each), wall {report.wall_time_s:.1f} s, "
              f"{report.samples_per_second:,.0f} samples/s = {matmul / 1e9:.1f} GFLOP/s of matmul")


def _baselines(dataset, budget, directory, *, kinds: tuple[str, ...], quiet: bool) -> None:
    from flopscope import SymmetryLossWarning
    from tqdm import tqdm


    bars: dict[str, tqdm] = {}

    def progress(kind: str, done: int, total: int) -> None:
        if kind not in bars:
            bars[kind] = tqdm(total=total, desc=f"baseline {kind}", unit="MLP", disable=quiet)
        bars[kind].n = done
        bars[kind].refresh()
        if done == total:
            bars[kind].close()

    warnings.filterwarnings("ignore", category=SymmetryLossWarning)  # whestbench's cov propagation, benign
    try:
        results = compute_baselines(dataset, kinds=kinds, budget=budget, directory=directory, on_progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
    for result in results.values():
        s = result.summary("final")
        print(f"  baseline {result.label}: mean final-layer MSE {s['mean']:.3e} over {s['n_mlps']} MLPs, "
              f"{s['mean_effective_compute']:.3e} FLOPs, {s['n_failed']} failed")
