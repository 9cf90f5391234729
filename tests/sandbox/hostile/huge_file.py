"""Writes one enormous file into its working folder."""

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        chunk = b"x" * (1 << 20)
        with open("huge.bin", "wb") as out:
            for _ in range(100_000):
                out.write(chunk)
