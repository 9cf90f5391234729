"""Returns the transposed array: (width, depth) instead of (depth, width)."""

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.zeros((mlp.width, mlp.depth))
