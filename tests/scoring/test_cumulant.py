"""Cumulant propagation (``cumulant:K``) against independent oracles.

* K = 1 and K = 2 against whestbench's own mean and covariance propagation;
* K = 3 against a dense, unmetered numpy implementation of the same equations written here
  (full n^3 third cumulant, entry by entry, no factors, no Sym bookkeeping);
* every K against a 10^6-sample Monte Carlo mean on small networks, each error beside that
  reference's noise floor;
* the FLOPs a run reports against flopscope's own count of the same predict.
"""

from __future__ import annotations

import math

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.estimators import CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.generation import sample_mlp
from whestbench.scoring import evaluate_estimator

from whestboard.rules import get_round
from whestboard.scoring import RunError, resolve_estimator, rulebook_for
from whestboard.scoring._cumulant import (
    PLAN_SHARE,
    CumulantPropagationEstimator,
    order3_flops,
    third_order_window,
)
from whestboard.scoring._runs import MLPCase, contest_data, score_one

#: K = 1 and K = 2 run whestbench's operations in the same order, and the grader reads predictions
#: as float32: a few float32 ulps (2^-23 = 1.2e-7 relative) is the most two such runs may differ by.
FLOAT32_RTOL = 8 * 2.0**-23


def mlp(width: int, depth: int, seed: int):
    return sample_mlp(width, depth, fnp.random.default_rng(seed))


def predict(estimator, net, budget: int = 10**13) -> np.ndarray:
    with flops.BudgetContext(flop_budget=10**15, quiet=True):
        return np.asarray(estimator.predict(net, budget), dtype=np.float64)


@pytest.mark.parametrize("width,depth,seed", [(16, 3, 1), (48, 6, 2), (64, 8, 3)])
def test_order_one_is_whestbench_mean_propagation(width, depth, seed):
    net = mlp(width, depth, seed)
    ours = predict(CumulantPropagationEstimator(1), net)
    theirs = predict(MeanPropagationEstimator(), net)
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=FLOAT32_RTOL, atol=0)


@pytest.mark.parametrize("width,depth,seed", [(16, 3, 1), (48, 6, 2), (64, 8, 3)])
def test_order_two_is_whestbench_covariance_propagation(width, depth, seed):
    net = mlp(width, depth, seed)
    ours = predict(CumulantPropagationEstimator(2), net)
    theirs = predict(CovariancePropagationEstimator(), net)
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=FLOAT32_RTOL, atol=0)


# ---------------------------------------------------------------------------
# the dense oracle of K = 3 (plain numpy, float64, nothing metered)
# ---------------------------------------------------------------------------


def _gauss(mu: np.ndarray, var: np.ndarray) -> dict[str, np.ndarray]:
    sd = np.sqrt(var)
    a = mu / sd
    pdf = np.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))
    return {
        "g0": mu * cdf + sd * pdf, "g1": cdf, "g2": pdf / sd, "g3": -a * pdf / var,
        "e2": (mu**2 + var) * cdf + mu * sd * pdf, "e3": (mu**3 + 3 * mu * var) * cdf + (mu**2 + 2 * var) * sd * pdf,
    }


def dense_order3(weights: list[np.ndarray]) -> np.ndarray:
    """The K = 3 equations of ``whestboard.scoring._cumulant._relu_step3`` on a dense n^3 tensor."""
    n = weights[0].shape[0]
    m, c, k3 = np.zeros(n), np.eye(n), np.zeros((n, n, n))
    rows = []
    for layer, w in enumerate(weights):
        mu, s = w.T @ m, w.T @ c @ w
        kz = np.einsum("abc,ai,bj,ck->ijk", k3, w, w, w)
        d = np.array([kz[i, i, i] for i in range(n)])
        q = np.array([[kz[i, i, j] for j in range(n)] for i in range(n)])
        var = np.maximum(np.diag(s), 1e-12)
        g = _gauss(mu, var)
        g0, g1, g2, g3, e2, e3 = (g[x] for x in ("g0", "g1", "g2", "g3", "e2", "e3"))
        m = g0 + d * g3 / 6
        c = np.empty((n, n))
        for i in range(n):
            for j in range(n):
                if i == j:
                    c[i, i] = max(e2[i] - g0[i] ** 2 + d[i] / 3 * (g2[i] - g0[i] * g3[i]), 0.0)
                else:
                    c[i, j] = (g1[i] * g1[j] * s[i, j] + g2[i] * g2[j] * s[i, j] ** 2 / 2
                               + (g2[i] * g1[j] * q[i, j] + g1[i] * g2[j] * q[j, i]) / 2)
        rows.append(m)
        if layer == len(weights) - 1:
            break
        k3 = np.empty((n, n, n))
        for i in range(n):
            for j in range(n):
                for k in range(n):
                    k3[i, j, k] = _dense_entry(i, j, k, s, kz, d, q, g0, g1, g2, g3, e2, e3)
    return np.stack(rows)


def _dense_entry(i, j, k, s, kz, d, q, g0, g1, g2, g3, e2, e3) -> float:
    """kappa_3(h) at (i, j, k): the Gaussian third cumulant of ReLU(z_i) and its kappa_iii derivative at
    i = j = k; the edge, double edge and (2,1), (1,2) blocks at two equal indices; the (1,1,1) block and
    the two-leg paths at distinct ones."""
    if i == j == k:
        gauss = e3[i] - 3 * e2[i] * g0[i] + 2 * g0[i] ** 3
        return gauss + d[i] / 6 * (6 * g1[i] - 6 * g2[i] * g0[i] - 3 * e2[i] * g3[i] + 6 * g0[i] ** 2 * g3[i])
    if len({i, j, k}) == 2:
        a, b = (i, k) if i == j else (i, j) if i == k else (j, i)  # a repeated, b alone
        return (2 * s[a, b] * g1[b] * g0[a] * (1 - g1[a]) + s[a, b] ** 2 * g2[b] * (g1[a] - g0[a] * g2[a])
                + q[a, b] * g1[b] * (g1[a] - g0[a] * g2[a]) + q[b, a] * g2[b] * g0[a] * (1 - g1[a]))
    return (g1[i] * g1[j] * g1[k] * kz[i, j, k] + g2[j] * g1[i] * g1[k] * s[i, j] * s[j, k]
            + g2[i] * g1[j] * g1[k] * s[j, i] * s[i, k] + g2[k] * g1[i] * g1[j] * s[i, k] * s[k, j])


@pytest.mark.parametrize("width,depth,seed", [(6, 3, 11), (9, 4, 12), (10, 5, 13)])
def test_order_three_equals_the_dense_numpy_equations(width, depth, seed):
    net = mlp(width, depth, seed)
    weights = [np.asarray(w, dtype=np.float64) for w in net.weights]
    ours = predict(CumulantPropagationEstimator(3), net)
    dense = dense_order3(weights)
    # The factors are float32 (the grader bills float64 double): relative 1e-5 of each layer's scale.
    scale = np.abs(dense).max(axis=1, keepdims=True)
    np.testing.assert_allclose(ours, dense, rtol=0, atol=1e-5 * float(scale.max()))
    assert not np.allclose(ours, predict(CumulantPropagationEstimator(2), net), rtol=1e-4), \
        "the third-order terms changed nothing: the comparison would not test them"


# ---------------------------------------------------------------------------
# against Monte Carlo
# ---------------------------------------------------------------------------

#: Every threshold below is a multiple of the reference's noise floor (avg variance / N), so a smaller N only
#: raises them: at 10^6 the closest case (K = 3 at width 16, depth 2) still sits about 140 floors above it.
MC_SAMPLES = 10**6
#: Rows drawn and propagated at a time: 4096 x 16 float64 (512 KiB) stays in cache through every layer,
#: where one 10^6-row pass streams each layer's 128 MB through memory. The stream of normals is the same
#: either way (the generator fills draws in order), so the reference differs only in float64 rounding.
MC_CHUNK_ROWS = 4096


def monte_carlo(weights: list[np.ndarray], seed: int) -> tuple[np.ndarray, float]:
    """Final-layer mean of MC_SAMPLES samples in float64 and the noise floor of its MSE (avg variance / N)."""
    rng = np.random.default_rng(seed)
    total, squares, done = 0.0, 0.0, 0
    while done < MC_SAMPLES:
        x = rng.standard_normal((min(MC_CHUNK_ROWS, MC_SAMPLES - done), weights[0].shape[0]))
        for w in weights:
            x = x @ w
            np.maximum(x, 0.0, out=x)
        total, squares, done = total + x.sum(axis=0), squares + np.einsum("ij,ij->j", x, x), done + len(x)
    mean = total / MC_SAMPLES
    return mean, float(np.mean(squares / MC_SAMPLES - mean**2)) / MC_SAMPLES


@pytest.mark.parametrize("width,depth,seed", [(8, 3, 21), (12, 3, 22), (16, 2, 23)])
def test_higher_orders_approach_monte_carlo(width, depth, seed):
    net = mlp(width, depth, seed)
    weights = [np.asarray(w, dtype=np.float64) for w in net.weights]
    truth, floor = monte_carlo(weights, seed)
    mse = {k: float(np.mean((predict(CumulantPropagationEstimator(k), net)[-1] - truth) ** 2)) for k in (1, 2, 3)}
    for k in (1, 2):
        # each step down is resolvable: larger than ten times what the reference's noise could fake
        assert mse[k] - mse[k + 1] > 10 * floor, (mse, floor)
    assert mse[3] > floor, "an MSE below the reference's noise floor cannot be told from zero"


# ---------------------------------------------------------------------------
# FLOPs, budget and refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3])
def test_reported_flops_are_the_graders_count(order):
    """A run's ``flops_used`` is what whestbench's ``evaluate_estimator`` meters for the same estimator
    on the same MLP, and at least flopscope's count of ``predict`` alone (the grader also bills its
    handling of the returned array)."""
    net = mlp(24, 4, 31)
    rulebook = rulebook_for("v2-phase2")
    case = MLPCase(0, net, np.zeros((4, 24), dtype=np.float32), 1.0, 10**6)
    graded = evaluate_estimator(CumulantPropagationEstimator(order), contest_data([case], rulebook))
    entry, _ = score_one(resolve_estimator(f"cumulant:{order}"), case, rulebook)
    assert not entry["failed"], entry.get("failure_reason")
    assert int(entry["flops_used"]) == int(graded["per_mlp"][0]["flops_used"])
    with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
        CumulantPropagationEstimator(order).predict(net, rulebook.flop_budget)
    assert 0 < ctx.flops_used <= int(entry["flops_used"])


@pytest.mark.parametrize("width,depth", [(32, 5), (64, 8)])
def test_planned_flops_bound_what_is_metered(width, depth):
    """The window is chosen from ``order3_flops`` before anything runs: it must never undercount."""
    net = mlp(width, depth, 41)
    for window in (0, 2, depth - 1):
        estimator = CumulantPropagationEstimator(3)
        estimator.window_for = lambda *_, window=window: window
        with flops.BudgetContext(flop_budget=10**15, quiet=True) as ctx:
            estimator.predict(net, 10**15)
        planned = order3_flops(width, depth, window)
        assert ctx.flops_used <= planned <= 1.25 * ctx.flops_used, (window, ctx.flops_used, planned)


def test_the_window_fits_each_rounds_budget():
    for tag in ("v1-warmup", "v1-phase1", "v2-phase2"):
        rnd = get_round(tag)
        width, depth, budget = rnd.width, rnd.depth, rnd.budget
        window = third_order_window(width, depth, budget)
        assert order3_flops(width, depth, window) <= PLAN_SHARE * budget
        if window < depth - 1:  # a longer history would not have fitted
            assert order3_flops(width, depth, window + 1) > PLAN_SHARE * budget
    assert third_order_window(64, 8, 10**6) == 0


@pytest.mark.parametrize("spec", ["cumulant:4", "cumulant:3:simple", "cumulant:2:augment", "cumulant:x",
                                  "cumulant:1:nonsense", "cumulant"])
def test_what_is_not_implemented_is_refused_with_what_to_write(spec):
    with pytest.raises(RunError, match="cumulant|augment|K ="):
        resolve_estimator(spec)


def test_specs_name_one_estimator_each():
    assert resolve_estimator("cumulant:3").label == resolve_estimator("Cumulant:3:base").label == "cumulant:3"
    assert resolve_estimator("cumulant:1:base").label == "cumulant:1:base"
    assert resolve_estimator("cumulant:2").code_sha256 != resolve_estimator("cumulant:3").code_sha256
