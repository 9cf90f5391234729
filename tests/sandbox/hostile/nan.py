"""Returns NaN everywhere."""

import flopscope.numpy as fnp
from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        return fnp.full((mlp.depth, mlp.width), float("nan"))
