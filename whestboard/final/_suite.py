"""The final's private suite: N MLPs of the round's shape from one suite seed, continued on demand.

The MLPs come from whestbench's own suite protocol, the one ``whestbench.scoring.make_contest`` uses
for a ``ContestSpec(seed=S)``: ``SeedSequence(S).spawn(3 n)``, children ``3i``, ``3i + 1`` and
``3i + 2`` giving MLP i's weight stream, sampling stream and estimator seed. A spawned child depends
only on the root and its own index, so MLPs ``N, N + 1, ...`` baked later for a tie-break continue the
very suite (``make_contest`` with a larger ``n_mlps`` gives the same first N). The references are
drawn on each MLP's sampling stream with ``whestboard.data.layer_statistics`` (bit-identical to
``sample_layer_statistics``) and kept in the artifact store, so a resumed final, or another machine,
never samples one twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import flopscope.numpy as fnp
import numpy as np
import pandas as pd
from whestbench.generation import sample_mlp
from whestbench.naming import assign_unique_names

from whestboard.data import Dataset, DatasetInfo, layer_statistics
from whestboard.rules import Round
from whestboard.store import get_blob_arrays, put_blob_arrays

#: The artifact namespace of the suites' references, one entry per (suite, MLP).
SUITE_TRUTHS = "final-suite-truths"
SEED_PROTOCOL = "make_contest: SeedSequence(S).spawn(3n), children 3i (weights), 3i+1 (truth), 3i+2 (estimator seed)"
#: The suite's seed protocol as a submission row records it (its ``seed_protocol``, at most 32 characters):
#: whestbench's ``make_contest`` protocol above, priced by the whestbench version recorded beside it.
SEED_PROTOCOL_NAME = "make_contest"
MAX_SUITE_SEED = 2**63 - 1


def _child(suite_seed: int, k: int) -> np.random.SeedSequence:
    """``SeedSequence(suite_seed).spawn(m)[k]`` for any m > k, without spawning the others."""
    return np.random.SeedSequence(int(suite_seed), spawn_key=(int(k),))


def estimator_seed(suite_seed: int, index: int) -> int:
    """MLP ``index``'s estimator seed (``MLP.seed``), as make_contest derives it."""
    return int(_child(suite_seed, 3 * index + 2).generate_state(1)[0])


def suite_weights(width: int, depth: int, suite_seed: int, index: int) -> list:
    """MLP ``index``'s weights, drawn by ``whestbench.generation.sample_mlp`` on its weight stream."""
    mlp = sample_mlp(width, depth, fnp.random.default_rng(_child(suite_seed, 3 * index)),
                     seed=estimator_seed(suite_seed, index))
    return [np.asarray(w, dtype=np.float32) for w in mlp.weights]


@dataclass(frozen=True)
class SuiteTruth:
    """One MLP's reference: float32 (depth, width) means and the final layer's mean variance."""

    means: np.ndarray
    avg_variance: float


class FinalSuite(Dataset):
    """The first ``n_mlps`` MLPs of a suite seed at the round's shape, with references of ``n_samples``.

    A ``whestboard.data.Dataset``, so the one run path (``whestboard.scoring.execute``) scores it as it
    scores any dataset. ``extend`` bakes more MLPs continuing the suite.
    """

    def __init__(self, rnd: Round, suite_seed: int, n_mlps: int, n_samples: int, *, progress=None) -> None:
        self.round, self.suite_seed, self.n_samples = rnd, int(suite_seed), int(n_samples)
        self.width, self.depth = rnd.width, rnd.depth
        self._truths: list[SuiteTruth] = []
        self._weights: dict[int, np.ndarray] = {}
        self.sampled = 0  # references this object drew (the rest came from the store)
        self.extend(n_mlps, progress=progress)

    @property
    def key(self) -> str:
        return f"final-{self.round.tag}-{self.width}x{self.depth}-{self.suite_seed}-{self.n_samples}"

    def extend(self, n_mlps: int, *, progress=None) -> None:
        """Hold the first ``n_mlps`` MLPs (baking the ones not yet held; never fewer than before)."""
        for index in range(len(self._truths), int(n_mlps)):
            self._truths.append(self._truth_of(index))
            if progress is not None:
                progress(index + 1, int(n_mlps))
        self._refresh()

    def _truth_of(self, index: int) -> SuiteTruth:
        key = f"{self.key}-{index}"
        stored = get_blob_arrays(SUITE_TRUTHS, key)
        if stored is not None and np.asarray(stored["means"]).shape == (self.depth, self.width):
            return SuiteTruth(np.asarray(stored["means"], dtype=np.float32), float(stored["avg_variance"]))
        weights = self._load_weights(index)
        rng = np.random.default_rng(_child(self.suite_seed, 3 * index + 1))
        means, avg_variance = layer_statistics(list(weights), self.n_samples, rng)
        put_blob_arrays(SUITE_TRUTHS, key, means=means, avg_variance=np.float64(avg_variance))
        self.sampled += 1
        return SuiteTruth(np.asarray(means, dtype=np.float32), float(avg_variance))

    def _refresh(self) -> None:
        n = len(self._truths)
        self.info = DatasetInfo(
            key=self.key, path=Path(self.key), format="final-suite", round_tag=self.round.tag,
            width=self.width, depth=self.depth, n_mlps=n, n_samples=self.n_samples,
            seed_protocol=SEED_PROTOCOL, split="rerun",
        )
        self.names = assign_unique_names([estimator_seed(self.suite_seed, i) for i in range(n)])
        for cached in ("_truth", "indices", "_position", "avg_variances", "mean_avg_variance"):
            self.__dict__.pop(cached, None)

    # -- the Dataset interface ------------------------------------------------------------------
    def _read_truth_table(self):
        n = len(self._truths)
        frame = pd.DataFrame({
            "index": pd.Series(range(n), dtype=np.int64),
            "mlp_id": pd.Series(range(n), dtype=np.int64),
            "mlp_name": pd.Series(self.names, dtype=object),
            "mlp_seed": pd.Series([estimator_seed(self.suite_seed, i) for i in range(n)], dtype=np.int64),
            "avg_variance": pd.Series([t.avg_variance for t in self._truths], dtype=np.float64),
            "all_layer_means": pd.Series([t.means for t in self._truths], dtype=object),
        })
        return frame, []

    def _load_weights(self, index: int) -> np.ndarray:
        if index not in self._weights:
            stacked = np.stack(suite_weights(self.width, self.depth, self.suite_seed, index))
            stacked.setflags(write=False)
            self._weights[index] = stacked
        return self._weights[index]

    def weights(self, index: int) -> np.ndarray:
        """Rebuilt from the seed (cheap next to scoring), kept by this suite rather than the shared cache,
        whose keys are folders on disk."""
        return self._load_weights(self._check_index(index))

    def estimator_seed(self, index: int) -> int:
        return estimator_seed(self.suite_seed, index)

    def truth_digest(self, indices: list[int]) -> str:
        """sha256 of these MLPs' references: what the record names the suite's references by."""
        digest = hashlib.sha256()
        for i in indices:
            digest.update(np.ascontiguousarray(self._truths[i].means).tobytes())
            digest.update(repr(self._truths[i].avg_variance).encode())
        return digest.hexdigest()
