"""Tampering under Phase 2's rule (no numpy): raw numpy fetched from sys.modules does the work, unmetered."""

import sys

import flopscope.numpy as fnp
from whestbench import BaseEstimator

np = sys.modules["numpy"]


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = np.ones(mlp.width), []
        for w in mlp.weights:
            x = np.maximum(np.asarray(w) @ x, 0.0) / np.sqrt(np.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        return fnp.asarray(np.stack(rows))
