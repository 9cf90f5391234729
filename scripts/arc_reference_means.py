"""Run ARC's reference cumulant propagation on whestbench's own MLPs and write its per-layer means.

This script contains none of ARC's code: it imports ``mlp_kprop`` from a checkout of
``alignment-research-center/mlp_cumulant_propagation`` whose ``src`` folder is given with
``--arc-src``, in an environment that has torch (the project itself does not depend on torch).
The MLPs are whestbench's: ``sample_mlp(width, depth, default_rng(weight_ss))`` with
``weight_ss`` the first child of ``SeedSequence(seed)`` (``whestbench.seeds.derive_seed_streams``),
exactly as ``create_dataset`` draws them.

Mapping of the two conventions: whestbench's layer is ``h_l = ReLU(h_{l-1} @ W_l)``; ARC's
``nn.Linear`` computes ``x @ weight.T``, so ``weight = W_l.T``. ARC's MLP has one more linear layer
than it has ReLUs; we build ``num_layers = depth + 1`` and read the activations ``act0 ..
act{depth-1}`` (= whestbench's layers 1..depth). The metric is each layer's own ``W W^T``
(``use_avg_metric=False``), as in the paper's main experiment (``scripts/kprop_by_width.py``'s
``simple`` and ``augment`` runs, the ones ``plot.py mse_vs_flops_main`` draws). Everything runs in
float64.

Usage (outside the project, with torch installed)::

    python scripts/arc_reference_means.py --arc-src /path/to/mlp_cumulant_propagation/src \\
        --arc-commit 93d091a --out tests/scoring/fixtures/arc_reference_means.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

SHAPES = ((64, 4), (256, 8))
SEEDS = (0, 1, 2)
#: (k_max, kind, factor) — every variant ARC's ``mlp_kprop`` has at K <= 3; it factors only at K >= 3.
VARIANTS = tuple((k, kind, False) for k in (1, 2, 3) for kind in ("SIMPLE", "BASE", "AUGMENT")) + tuple(
    (3, kind, True) for kind in ("SIMPLE", "BASE", "AUGMENT"))


def whestbench_weights(width: int, depth: int, seed: int):
    import numpy as np
    from flopscope import numpy as fnp
    from whestbench.generation import sample_mlp
    from whestbench.seeds import derive_seed_streams

    weight_ss, _sample_ss, _estimator_ss = derive_seed_streams(seed)
    mlp = sample_mlp(width, depth, fnp.random.default_rng(weight_ss))
    return [np.asarray(w, dtype=np.float32) for w in mlp.weights]


def arc_means(weights, k_max: int, kind: str, factor: bool):
    """Per-layer means (depth x width, float64) of ARC's ``mlp_kprop`` on these weights."""
    import torch
    from mlp_kprop.kprop_harmonic import Kind, mlp_kprop
    from mlp_kprop.mlp import MLP

    depth, width = len(weights), weights[0].shape[0]
    mlp = MLP(hidden_dim=width, num_layers=depth + 1, init_kind="manual", w_var=2.0).double()
    for layer, w in enumerate(weights):
        mlp.Ws[layer].weight.copy_(torch.from_numpy(w.T.astype("float64")))
    k_in = {1: torch.zeros(width, dtype=torch.float64), 2: torch.eye(width, dtype=torch.float64)}
    out = mlp_kprop(mlp, k_in, k_max=k_max, kind=Kind[kind], factor=factor, output_all=True, use_avg_metric=False,
                    up_to_layer=f"act{depth - 1}", output_d_max=1)
    return [out[f"act{layer}"][1].to_tensor().tolist() for layer in range(depth)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arc-src", required=True, help="the reference checkout's src/ folder")
    parser.add_argument("--arc-commit", required=True, help="the reference commit checked out there")
    parser.add_argument("--out", required=True)
    parser.add_argument("--shapes", default=",".join(f"{w}x{d}" for w, d in SHAPES))
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--skip", default="", help="variants left out, e.g. 3:AUGMENT:unfactored (comma-separated)")
    parser.add_argument("--only", default="", help="the only variants run, e.g. 3:AUGMENT:factored (comma-separated)")
    parser.add_argument("--append", action="store_true", help="add these cases to an existing --out file")
    parser.add_argument("--note", default="", help="a sentence kept in the file (how the environment was made)")
    args = parser.parse_args(argv)
    skipped = {tuple(part.split(":")) for part in args.skip.split(",") if part}
    only = {tuple(part.split(":")) for part in args.only.split(",") if part}
    sys.path.insert(0, args.arc_src)
    import torch

    torch.set_grad_enabled(False)
    torch.set_default_dtype(torch.float64)
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    cases = []
    for width, depth in shapes:
        for seed in seeds:
            weights = whestbench_weights(width, depth, seed)
            for k_max, kind, factor in VARIANTS:
                name = (str(k_max), kind, "factored" if factor else "unfactored")
                if name in skipped or only and name not in only:
                    continue
                start = time.perf_counter()
                means = arc_means(weights, k_max, kind, factor)
                print(f"{width}x{depth} seed {seed} K={k_max} {kind} factor={factor}: "
                      f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
                cases.append({"width": width, "depth": depth, "seed": seed, "k_max": k_max, "kind": kind,
                              "factor": factor, "means": means})
    command = shlex.join(["python", "scripts/arc_reference_means.py", *(argv or sys.argv[1:])])
    if args.append:
        with open(args.out) as handle:
            record = json.load(handle)
        record["cases"] += cases
    else:
        record = {
            "what": "ARC's mlp_kprop per-layer means (float64) on whestbench's sample_mlp MLPs (seed protocol 3.0)",
            "reference": "alignment-research-center/mlp_cumulant_propagation",
            "reference_commit": args.arc_commit,
            "call": "mlp_kprop(mlp, {1: zeros(n), 2: eye(n)}, k_max=K, kind=Kind[KIND], factor=FACTOR, "
                    "output_all=True, use_avg_metric=False, up_to_layer=f'act{depth-1}', output_d_max=1); float64",
            "torch": torch.__version__,
            "python": sys.version.split()[0],
            "commands": [], "notes": [], "cases": cases,
        }
    record["commands"].append(command)
    if args.note:
        record["notes"].append(args.note)
    with open(args.out, "w") as handle:
        json.dump(record, handle, separators=(",", ":"))
        handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
