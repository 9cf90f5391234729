"""Cumulant propagation up to order K through ReLU layers, metered by flopscope.

The method is the one of ARC's paper "Estimating the expected output of wide random MLPs
more efficiently than sampling" (arXiv 2605.05179, code ``alignment-research-center/
mlp_cumulant_propagation``): the cumulants of each layer's pre-activations are pushed through
the linear map exactly and through the ReLU by an Edgeworth (Wick/Hermite) expansion around
the Gaussian with the same mean and variance, keeping the diagrams whose power-counting cost
``k(nu) = 1 + sum_v (|v| - 1 - 1[v even])`` is at most K (the paper's eq. (13)-(14), in the
form the code uses after its 2026-07-31 truncation fix). This is the project's own
implementation of those equations, written with ``flopscope.numpy`` so every operation is
billed as the grader bills it.

Variants (the paper's ``Kind``), i.e. which cumulants are tracked:

* ``simple`` at K = 1: mean and per-neuron variance (the paper's SIMPLE at K = 1 keeps the
  covariance only as its diagonal). This is whestbench's mean propagation, operation for
  operation.
* ``simple`` / ``base`` at K = 2: mean and full covariance; the only off-diagonal diagram of
  cost <= 1 is the single covariance edge, ``Cov(h_i, h_j) = Phi_i Phi_j Sigma_ij``. This is
  whestbench's covariance propagation, operation for operation.
* ``base`` at K = 1: the mean only, every pre-activation taken as unit variance (the paper's
  BASE ablation; it is not expected to be good).
* ``base`` at K = 3: mean, full covariance and the third cumulant, the latter in factored
  (CP) form ``kappa_3 = sum_r Sym(a_r x b_r x c_r)``, never a dense n^3 tensor. Diagrams of
  cost <= 2 are summed (see ``_relu_step3``).

Not implemented, and refused with a sentence: ``simple`` at K = 3 (it also tracks the radial
piece of the fourth cumulant, ``Sym(A x I x I)``), ``augment`` at any K (after the fix its
factored form is a different estimate from the unfactored one), and K >= 4.

Memory and budget: the factored third cumulant gains 2n columns per layer. When the whole
history does not fit the FLOP budget (or 2 GiB of factors), only the third cumulant generated
in the last J layers is carried, J the largest that fits; J = 0 keeps the cost-2 diagrams of
the covariance alone. ``third_order_window`` says which J a budget buys.
"""

from __future__ import annotations

import flopscope as flops
import flopscope.numpy as fnp
from whestbench.sdk import BaseEstimator

VARIANTS = ("simple", "base", "augment")
MAX_ORDER = 3
#: The most memory the factored third cumulant may take (the grader gives an estimator 8 GB).
MAX_FACTOR_BYTES = 2 * 1024**3
#: Share of the budget the order-3 window may plan to spend (the rest is headroom for the estimate).
PLAN_SHARE = 0.9


class CumulantRefused(ValueError):
    """A (K, variant) that is not implemented or does not fit; the message says what to use instead."""


def default_variant(order: int) -> str:
    """``cumulant:K`` without a variant: the most complete implemented one (simple up to 2, base at 3)."""
    return "simple" if order <= 2 else "base"


def check_order(order: int, variant: str) -> None:
    """Raise ``CumulantRefused`` for what this implementation does not compute."""
    if variant not in VARIANTS:
        raise CumulantRefused(f"unknown cumulant variant {variant!r}; use simple (K = 1, 2) or base (K = 1, 2, 3)")
    if not 1 <= order <= MAX_ORDER:
        raise CumulantRefused(f"cumulant order K = {order} is not implemented; use K = 1, 2 or 3")
    if variant == "augment":
        raise CumulantRefused("the augment variant is not implemented (after the paper's 2026-07-31 fix its "
                              "factored form drops diagrams the unfactored one keeps); use simple or base")
    if variant == "simple" and order == 3:
        raise CumulantRefused("cumulant:3:simple also tracks the radial fourth-cumulant piece, which is not "
                              "implemented; use cumulant:3:base (or cumulant:3, the same)")


# ---------------------------------------------------------------------------
# cost model of order 3 (used to choose the window before spending anything)
# ---------------------------------------------------------------------------


def _matmul(m: int, k: int, n: int) -> int:
    return (2 * k - 1) * m * n


def _order3_layer_flops(n: int, carried: int, held: int, first: bool, last: bool) -> int:
    """FLOPs of one layer of ``_predict_order3``: ``carried`` factor columns mapped by the linear step,
    ``held`` columns whose diagonal slices are taken. The matmuls are flopscope's exact prices (the
    covariance's float64 ones at the doubled dtype-aware price, an upper bound where billing is flat);
    the O(n^2) and O(nR) elementwise work is an upper bound (80 n^2 + 12 n R)."""
    cost = 80 * n * n + 2 * 2 * _matmul(n, n, n)  # mean and covariance: w.T @ cov @ w in float64
    if not first:
        cost += 3 * _matmul(n, n, carried) + 3 * n * carried + 2 * _matmul(n, n, n)  # map factors, new block
        cost += 3 * n * held  # concatenating each factor
        cost += 3 * _matmul(n, held, n) + 12 * n * held  # diagonal slices kappa_iij, kappa_iii
    return cost


def order3_flops(width: int, depth: int, window: int) -> int:
    """Planned FLOPs (an upper bound) of ``cumulant:3:base`` carrying the third cumulants generated in
    the last ``window`` layers."""
    total = 0
    for layer in range(depth):
        carried = 2 * width * max(0, min(layer - 1, window - 1))
        held = 2 * width * min(layer, window)
        total += _order3_layer_flops(width, carried, held, layer == 0 or window == 0, layer == depth - 1)
    return total


def third_order_window(width: int, depth: int, budget: int | None) -> int:
    """The largest window J (layers of third-cumulant history kept) that fits the budget and memory."""
    by_memory = MAX_FACTOR_BYTES // (3 * 4 * width * 2 * width)  # three float32 factors, 2n columns a block
    best = 0
    for window in range(1, depth):
        if window > by_memory:
            break
        if budget is not None and order3_flops(width, depth, window) > PLAN_SHARE * budget:
            break
        best = window
    return best


# ---------------------------------------------------------------------------
# the ReLU's Gaussian expectations
# ---------------------------------------------------------------------------


def _gaussian_pieces(mu_pre, var_pre):
    """sigma, phi(alpha), Phi(alpha) and E[ReLU(z)], E[ReLU(z)^2] for z ~ N(mu, var) (whestbench's formulas)."""
    sigma = fnp.sqrt(var_pre)
    alpha = mu_pre / sigma
    phi = flops.stats.norm.pdf(alpha)
    cdf = flops.stats.norm.cdf(alpha)
    mean = mu_pre * cdf + sigma * phi
    second = (mu_pre * mu_pre + var_pre) * cdf + mu_pre * sigma * phi
    return sigma, phi, cdf, mean, second


# ---------------------------------------------------------------------------
# K = 1 and K = 2 (the Gaussian closures)
# ---------------------------------------------------------------------------


def _predict_order1(mlp, *, unit_variance: bool):
    """Eq. (13)-(14) at K = 1: only the diagrams of cost 1 on one neuron, i.e. E[ReLU(z_i)] with
    z_i ~ N(mu_i, var_i); var is propagated as a diagonal (SIMPLE) or fixed at 1 (BASE)."""
    width = mlp.width
    mu = fnp.zeros(width)
    var = fnp.ones(width)
    rows = []
    for w in mlp.weights:
        mu_pre = w.T @ mu
        if unit_variance:
            var_pre = fnp.ones(width)
        else:
            var_pre = fnp.maximum((w * w).T @ var, 1e-12)
        _, _, _, mu, second = _gaussian_pieces(mu_pre, var_pre)
        if not unit_variance:
            var = fnp.maximum(second - mu * mu, 0.0)
        rows.append(mu)
    return fnp.stack(rows, axis=0)


def _predict_order2(mlp):
    """K = 2: mean and covariance. Linear step Sigma_z = W^T Sigma_h W; nonlinear step keeps the
    diagrams of cost <= 1: the exact Gaussian variance on the diagonal and the single (1,1)
    covariance edge, Cov(h_i, h_j) = Phi_i Phi_j Sigma_ij, off it (the gain cast to float32, as
    whestbench does)."""
    width = mlp.width
    mu = fnp.zeros(width)
    cov = fnp.eye(width)
    rows = []
    for w in mlp.weights:
        mu_pre = w.T @ mu
        cov_pre = w.T @ cov @ w
        var_pre = fnp.maximum(fnp.diag(cov_pre), 1e-12)
        sigma, _, cdf, mu, second = _gaussian_pieces(mu_pre, var_pre)
        var_post = fnp.maximum(second - mu * mu, 0.0)
        gain = fnp.where(fnp.asarray(sigma, dtype=fnp.float64) > 1e-12, fnp.asarray(cdf, dtype=fnp.float64), 0.0)
        gain = fnp.array(gain.astype(fnp.float32))
        cov = fnp.multiply(fnp.outer(gain, gain), cov_pre)
        fnp.fill_diagonal(cov, var_post)
        rows.append(mu)
    return fnp.stack(rows, axis=0)


# ---------------------------------------------------------------------------
# K = 3 (base): mean, covariance, factored third cumulant
# ---------------------------------------------------------------------------


def _slices(factors):
    """Diagonal slices of kappa_3 = sum_r Sym(a_r x b_r x c_r) (the factors' columns r):
    d_i = kappa_iii = sum_r a_ir b_ir c_ir and Q_ij = kappa_iij = (1/3)[(a.b) c^T + (a.c) b^T + (b.c) a^T]_ij."""
    a, b, c = factors
    ab, ac, bc = a * b, a * c, b * c
    return fnp.sum(ab * c, axis=1), (ab @ c.T + ac @ b.T + bc @ a.T) / 3.0


def _relu_step3(mu_pre, cov_pre, d, q, need_third: bool):
    """The nonlinear step at K = 3 (BASE): every diagram of cost <= 2, to first order in kappa_3.

    With g_k = E_G[ReLU^(k)(z_i)] (g1 = Phi, g2 = phi/sigma, g3 = -alpha phi/sigma^2), G0 = E_G[ReLU],
    E2, E3 the Gaussian moments of ReLU(z_i), and the Edgeworth rule E[f] = E_G[f] + (1/6) kappa_abc
    E_G[d_a d_b d_c f]:

    * mean, block (3): ``E[h_i] = G0_i + kappa_iii g3_i / 6``;
    * variance, block (3) on int part (2): ``Var h_i = E2 - G0^2 + (kappa_iii/3)(g2 - G0 g3)``;
    * covariance, blocks (1,1), {(1,1),(1,1)}, (2,1), (1,2):
      ``Cov(h_i,h_j) = g1_i g1_j S_ij + g2_i g2_j S_ij^2 / 2 + (g2_i g1_j Q_ij + g1_i g2_j Q_ji) / 2``;
    * third cumulant at distinct i, j, k: block (1,1,1) ``g1_i g1_j g1_k kappa_ijk`` and the two-leg
      diagrams (1,1)+(1,1) ``g1_i g2_j g1_k S_ij S_jk`` (+ the two other centres), i.e.
      ``3 Sym(S g1 x diag(g2) x S g1)``;
    * its diagonal slices exactly to the same order: ``kappa_iii`` the Gaussian third cumulant of
      ReLU(z_i) plus its kappa_iii derivative, and ``kappa_iij`` from the edge, the double edge and
      the (2,1), (1,2) blocks; they enter as the correction ``Sym(I x I x M)``.

    Returns the mean, the covariance and (when ``need_third``) the h-level pieces of kappa_3:
    the g1 row scaling of the carried factors, ``S g1`` with ``g2`` (the two-leg term) and ``M``.
    """
    var_pre = fnp.maximum(fnp.diag(cov_pre), 1e-12)
    sigma, phi, g1, g0, e2 = _gaussian_pieces(mu_pre, var_pre)
    g2 = phi / sigma
    g3 = -(mu_pre / sigma) * phi / var_pre
    first_order = d is not None
    mean = g0 + d * g3 / 6.0 if first_order else g0
    var_post = e2 - g0 * g0
    if first_order:
        var_post = var_post + (d / 3.0) * (g2 - g0 * g3)
    var_post = fnp.maximum(var_post, 0.0)

    cov_sq = cov_pre * cov_pre
    cov = fnp.outer(g1, g1) * cov_pre + 0.5 * fnp.outer(g2, g2) * cov_sq
    if first_order:
        half = 0.5 * (g2[:, None] * g1[None, :]) * q
        cov = cov + half + half.T
    fnp.fill_diagonal(cov, var_post)
    if not need_third:
        return mean, cov, None

    sg = g1[:, None] * cov_pre  # S_ir = g1_i Sigma_ir
    sg_diag = g1 * var_pre
    e3 = (mu_pre * mu_pre * mu_pre + 3.0 * mu_pre * var_pre) * g1 + (mu_pre * mu_pre + 2.0 * var_pre) * sigma * phi
    third = e3 - 3.0 * e2 * g0 + 2.0 * g0 * g0 * g0 - 3.0 * g2 * sg_diag * sg_diag
    lone = g0 * (1.0 - g1)  # E[ReLU ReLU'] - E[ReLU] E[ReLU'] = G0 (1 - g1)
    bend = g1 - g0 * g2
    slice_iij = (2.0 * cov_pre * (lone[:, None] * g1[None, :]) + cov_sq * (bend[:, None] * g2[None, :])
                 - 2.0 * (g2 * sg_diag)[:, None] * sg.T - g2[None, :] * (sg * sg))
    if first_order:
        third = third + d * (g1 - g2 * g0 - 0.5 * e2 * g3 + g0 * g0 * g3) - g1 * g1 * g1 * d
        slice_iij = (slice_iij + q * (bend[:, None] * g1[None, :]) + q.T * (lone[:, None] * g2[None, :])
                     - (g1 * g1)[:, None] * g1[None, :] * q)
    fnp.fill_diagonal(slice_iij, 0.0)
    correction = 3.0 * slice_iij.T  # M_ji = 3 kappa_iij, so that Sym(I x I x M)_iij = kappa_iij
    fnp.fill_diagonal(correction, third)
    pieces = {
        "g1": fnp.asarray(g1, dtype=fnp.float32),
        "sg": fnp.asarray(sg, dtype=fnp.float32),
        "g2": fnp.asarray(g2, dtype=fnp.float32),
        "m": fnp.asarray(correction, dtype=fnp.float32),
    }
    return mean, cov, pieces


def _linear3(w, factors, pieces, window: int):
    """Linear step of kappa_3: kappa_z = kappa_h x_1 W^T x_2 W^T x_3 W^T, applied to each factor.

    The carried columns are scaled by g1 (block (1,1,1)) and mapped; the layer's new 2n columns are
    ``3 Sym(W^T S g1, W^T diag(g2), W^T S g1)`` and ``Sym(W^T, W^T, W^T M)``; columns generated more than
    ``window`` layers back (the oldest, at the front) are dropped. One array per factor, so the work is
    a few operations per layer whatever the window.
    """
    if pieces is None or window == 0:
        return None
    wt = fnp.asarray(w.T, dtype=fnp.float32)
    width = wt.shape[0]
    leg = wt @ pieces["sg"]
    new = ([3.0 * leg, wt], [wt * pieces["g2"][None, :], wt], [leg, wt @ pieces["m"]])
    if factors is not None and window > 1:
        g1 = pieces["g1"][:, None]
        keep = 2 * width * (window - 1)
        for parts, old in zip(new, factors, strict=True):
            parts.insert(0, wt @ (old[:, -keep:] * g1))
    return tuple(fnp.concatenate(parts, axis=1) for parts in new)


def _predict_order3(mlp, window: int):
    width = mlp.width
    mu = fnp.zeros(width)
    cov = fnp.eye(width)
    factors = None
    pieces = None
    rows = []
    depth = len(mlp.weights)
    for layer, w in enumerate(mlp.weights):
        mu_pre = w.T @ mu
        cov_pre = w.T @ cov @ w
        factors = _linear3(w, factors, pieces, window)
        d, q = _slices(factors) if factors is not None else (None, None)
        mu, cov, pieces = _relu_step3(mu_pre, cov_pre, d, q, need_third=layer < depth - 1)
        rows.append(mu)
    return fnp.stack(rows, axis=0)


class CumulantPropagationEstimator(BaseEstimator):
    """Cumulant propagation to order K (see the module docstring for the equations of each K)."""

    def __init__(self, order: int, variant: str | None = None) -> None:
        variant = variant or default_variant(order)
        check_order(order, variant)
        self.order = order
        self.variant = variant

    def window_for(self, width: int, depth: int, budget: int | None) -> int:
        """Layers of third-cumulant history this budget pays for (K = 3 only)."""
        return third_order_window(width, depth, budget)

    def predict(self, mlp, budget: int):
        if self.order == 1:
            return _predict_order1(mlp, unit_variance=self.variant == "base")
        if self.order == 2:
            return _predict_order2(mlp)
        return _predict_order3(mlp, self.window_for(mlp.width, mlp.depth, budget))


def label(order: int, variant: str) -> str:
    """The spec a (K, variant) is shown and stored under."""
    return f"cumulant:{order}:{variant}"


def describe(order: int, variant: str) -> str:
    what = {1: "mean and variance" if variant == "simple" else "mean only (unit variance)",
            2: "mean and covariance", 3: "mean, covariance and factored third cumulant"}[order]
    return f"cumulant propagation to order {order} ({variant}: {what})"
