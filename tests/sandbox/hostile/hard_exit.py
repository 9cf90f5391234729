"""Leaves without a word: os._exit in the middle of predict."""

import os

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        os._exit(3)
