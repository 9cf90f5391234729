"""Honest twin of raw_numpy.py: the same work through flopscope.numpy, which it also keeps under the name np."""

import sys

import flopscope.numpy as np
from whestbench import BaseEstimator

alias = sys.modules["flopscope.numpy"]


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        x, rows = np.ones(mlp.width, dtype=np.float32), []
        for w in mlp.weights:
            x = alias.maximum(w @ x, 0.0) / np.sqrt(np.sum(x * x) / mlp.width + 1.0)
            rows.append(x)
        return np.stack(rows)
