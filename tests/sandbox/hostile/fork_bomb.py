"""Tries to start processes (the grader prohibits subprocesses): the worker must be stopped."""

import os

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        while True:
            os.fork()
