"""Fills the temporary folder (the private /tmp when there is one) file after file."""

import os
import tempfile

from whestbench import BaseEstimator


class Estimator(BaseEstimator):
    def predict(self, mlp, budget):
        chunk = b"x" * (1 << 20)
        for index in range(10_000):
            with open(os.path.join(tempfile.gettempdir(), f"fill-{index}.bin"), "wb") as out:
                for _ in range(8):
                    out.write(chunk)
