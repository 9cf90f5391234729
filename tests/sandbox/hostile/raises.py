"""Raises from predict."""

from whestbench import BaseEstimator


def deep_helper(depth):
    raise ZeroDivisionError(f"exploded at depth {depth}")


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        deep_helper(mlp.depth)
