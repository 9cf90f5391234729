"""Asks for 64 GiB, a gigabyte at a time: the address-space limit must turn it into a MemoryError."""

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        hoard = []
        for _ in range(64):
            hoard.append(bytes(1 << 30))  # calloc: the kernel hands out zero pages lazily
        return hoard
