"""Baseline variant: covariance propagation on the first half of the layers, mean propagation after.

Covariance propagation costs about 4 w^3 FLOPs per layer, mean propagation
about 4 w^2: stopping the covariance halfway spends roughly half of
covariance propagation's FLOPs, and shows how much of its accuracy the deep
layers' correlations carry. Self-contained like a participant's file: only
whestbench and flopscope, loaded by path.
"""

from __future__ import annotations

import flopscope as flops
import flopscope.numpy as fnp
from whestbench.sdk import BaseEstimator

COVARIANCE_LAYER_FRACTION = 0.5


def _relu_moments(mu_pre, var_pre):
    """Mean and variance of ReLU(z) for z ~ N(mu_pre, var_pre), elementwise."""
    var_pre = fnp.maximum(var_pre, 1e-12)
    sigma_pre = fnp.sqrt(var_pre)
    alpha = mu_pre / sigma_pre
    pdf = flops.stats.norm.pdf(alpha)
    cdf = flops.stats.norm.cdf(alpha)
    mu = mu_pre * cdf + sigma_pre * pdf
    ez2 = (mu_pre * mu_pre + var_pre) * cdf + mu_pre * sigma_pre * pdf
    return mu, fnp.maximum(ez2 - mu * mu, 0.0), sigma_pre, cdf


class Estimator(BaseEstimator):
    """Full covariance for the first half of the layers, diagonal (mean propagation) after."""

    def predict(self, mlp, budget):
        width, depth = mlp.width, mlp.depth
        n_cov = max(1, int(round(depth * COVARIANCE_LAYER_FRACTION)))
        mu = fnp.zeros(width)
        cov = fnp.eye(width)
        var = fnp.ones(width)
        rows = []
        for layer, w in enumerate(mlp.weights):
            mu_pre = w.T @ mu
            if layer < n_cov:
                cov_pre = w.T @ cov @ w
                mu, var, sigma_pre, cdf = _relu_moments(mu_pre, fnp.diag(cov_pre))
                gain = fnp.where(sigma_pre > 1e-12, cdf, 0.0)
                cov = fnp.multiply(fnp.outer(gain, gain), cov_pre)
                fnp.fill_diagonal(cov, var)
            else:
                if layer == n_cov:
                    var = fnp.diag(cov)
                mu, var, _, _ = _relu_moments(mu_pre, (w * w).T @ var)
            rows.append(mu)
        return fnp.stack(rows, axis=0)
