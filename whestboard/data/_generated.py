"""Any MLP from (width, depth, seed), made by whestbench's own generator, and its Monte Carlo truth.

The playground's MLPs are not read from a dataset: ``whestbench.seeds.derive_seed_streams(seed)``
gives the weight stream, ``whestbench.generation.sample_mlp`` draws the weights from it and the
estimator seed rides along, exactly as ``create_dataset`` does under seed protocol 3.0. So the
``mlp_seed`` column of an official dataset typed in here gives that dataset's MLP, bit for bit (the
tests compare with ``create_dataset`` output).

The truth is drawn on the seed's own sampling stream with ``whestboard.data._sampling`` (bit-identical
to ``sample_layer_statistics``), so keeping the MLP (``keep``) bakes the very numbers shown. Each
truth is cached per (shape, seed, samples): in this process, and in the shared artifact store
(``whestboard.store._blobs``), where a background job on any machine writes it and every web process
reads it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import flopscope.numpy as fnp
import numpy as np
from whestbench.generation import sample_mlp
from whestbench.naming import assign_unique_names
from whestbench.seeds import derive_seed_streams

from whestboard import config
from whestboard.data import _compact
from whestboard.data._bake import BakePlan, bake_known_truth, prepare_bake
from whestboard.data import _kept
from whestboard.data._registry import KEPT, forget_kept
from whestboard.data._sampling import final_sums
from whestboard.cache import Region
from whestboard.rules import round_for_shape
from whestboard.store import (
    blob_exists,
    fetch_blob_folder,
    get_blob_arrays,
    prune_blobs,
    put_blob_arrays,
    put_blob_folder,
)

MIN_WIDTH, MAX_WIDTH = 4, 1024
MIN_DEPTH, MAX_DEPTH = 1, 32
MAX_SEED = 2**63 - 1
#: Truth sample counts the page offers; the default is picked from these by shape.
SAMPLE_CHOICES = (1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)
MIN_SAMPLES, MAX_SAMPLES = 100, 100_000_000
#: Forward-pass work (2 d w^2 per sample) the default sample count may cost: ~0.15 s of one core.
DEFAULT_TRUTH_WORK = 1e10
#: The default never goes past this many samples: below ~64 neurons per-chunk overhead, not work, dominates.
DEFAULT_SAMPLES_CAP = 300_000
#: Above this much forward-pass work (truth plus estimators) the page hands the job to the background.
BACKGROUND_WORK = 6e10
TRUTH_FILES_KEPT = 512
ProgressFn = Callable[[int, int], None]


class GeneratedMLPError(ValueError):
    """A width, depth, seed or sample count the playground cannot use; the message says what to type."""


@dataclass(frozen=True)
class Shape:
    """A checked (width, depth, seed): what every cache of the playground is keyed by."""

    width: int
    depth: int
    seed: int

    @property
    def label(self) -> str:
        return f"{self.width} x {self.depth}"

    @property
    def round_tag(self) -> str | None:
        """The round whose MLPs have this shape, if any."""
        rnd = round_for_shape(self.width, self.depth)
        return rnd.tag if rnd else None


@dataclass(frozen=True)
class GeneratedMLP:
    """One MLP exactly as ``create_dataset`` would make it from ``mlp_seed``."""

    shape: Shape
    mlp: object  # whestbench.MLP, seed and name set as a dataset row would give them
    weights: np.ndarray  # float32 (depth, width, width), read-only

    @property
    def name(self) -> str:
        return str(self.mlp.name)

    @property
    def estimator_seed(self) -> int:
        return int(self.mlp.seed)


@dataclass(frozen=True)
class Truth:
    """Monte Carlo ground truth of one MLP with what its own noise is."""

    means: np.ndarray  # float32 (depth, width), what create_dataset would store
    avg_variance: float  # mean final-layer variance, as whestbench forms it
    layer_variances: np.ndarray  # float64 (depth,): mean per-neuron variance of every layer
    n_samples: int

    @property
    def noise_floor(self) -> float:
        """Expected final-layer MSE the truth's own sampling adds to any estimator's: sigma^2 / N."""
        return self.avg_variance / self.n_samples

    @property
    def layer_noise_floors(self) -> np.ndarray:
        return self.layer_variances / self.n_samples


def _whole(value, what: str, low: int, high: int) -> int:
    """``value`` as a whole number in [low, high] (digits read exactly, ``1e5`` accepted), or a sentence
    saying what to type."""
    text = str(value).strip().replace("_", "") if value is not None else ""
    if not text:
        raise GeneratedMLPError(f"{what} is empty: type a whole number from {low} to {high}")
    if len(text) > 40:
        raise GeneratedMLPError(f"{what} is too long to be a number: type a whole number from {low} to {high}")
    if re.fullmatch(r"[+-]?[0-9]+", text):
        number = int(text)  # exactly: a 63-bit seed does not survive a float
    else:
        try:
            approximate = float(text)
        except ValueError:
            raise GeneratedMLPError(f"{what} {text!r} is not a number: type a whole number from {low} to {high}") \
                from None
        if not math.isfinite(approximate) or approximate != int(approximate):
            raise GeneratedMLPError(f"{what} {text!r} is not a whole number: type one from {low} to {high}")
        number = int(approximate)
    if not low <= number <= high:
        raise GeneratedMLPError(f"{what} {number} is outside {low}–{high}: type a whole number in that range")
    return number


def parse_shape(width, depth, seed) -> Shape:
    """What the URL or the form gives, checked: GeneratedMLPError names the field and its range."""
    return Shape(_whole(width, "width", MIN_WIDTH, MAX_WIDTH), _whole(depth, "depth", MIN_DEPTH, MAX_DEPTH),
                 _whole(seed, "seed", 0, MAX_SEED))


def parse_samples(value, what: str = "truth samples", *, low: int = MIN_SAMPLES) -> int:
    return _whole(value, what, low, MAX_SAMPLES)


#: What the sampler's per-element passes (ReLU, float64 casts, sums, squares) cost, in matmul FLOPs per
#: activation: at 64 neurons they take as long as the matrix product itself.
ELEMENTWISE_COST = 128


def forward_work(width: int, depth: int, n_samples: int) -> float:
    """Cost of ``n_samples`` forward passes of the sampler in matmul-FLOP units (2 w^2 per layer for the
    product, ``ELEMENTWISE_COST`` w for the rest): the unit every sizing rule here uses."""
    return float(depth) * (2.0 * width * width + ELEMENTWISE_COST * width) * n_samples


def default_samples(width: int, depth: int) -> int:
    """The most truth samples of ``SAMPLE_CHOICES`` that cost about ``DEFAULT_TRUTH_WORK``: at least 10,000
    (the official Explorer's count), at most ``DEFAULT_SAMPLES_CAP``."""
    affordable = [n for n in SAMPLE_CHOICES if forward_work(width, depth, n) <= DEFAULT_TRUTH_WORK]
    return min(max(max(affordable, default=10_000), 10_000), DEFAULT_SAMPLES_CAP)


def playground_work(shape: Shape, n_samples: int, mc_samples: int) -> float:
    """The truth plus every built-in estimator on one MLP, in matmul-FLOP units: its cost, before it runs."""
    work = forward_work(shape.width, shape.depth, n_samples + 3 * mc_samples)
    covariance = 2.0 * shape.depth * shape.width**3 * 4  # cov propagation's matrix products, twice over
    return work + covariance


def needs_background(shape: Shape, n_samples: int, mc_samples: int) -> bool:
    """Whether the truth plus every estimator would hold a web worker for more than about a second."""
    return playground_work(shape, n_samples, mc_samples) > BACKGROUND_WORK


# ---------------------------------------------------------------------------
# the MLP
# ---------------------------------------------------------------------------


#: Each entry holds the weights twice (whestbench's MLP and the stacked array the figures read): 256 MiB
#: keeps two 1024 x 16 MLPs.
_MLPS: Region[GeneratedMLP] = Region("generated-mlps", share=1 / 4, size_of=lambda g: 2 * int(g.weights.nbytes))


def generate(shape: Shape) -> GeneratedMLP:
    """The MLP ``create_dataset`` makes from ``shape.seed`` (seed protocol 3.0), cached by bytes."""
    return _MLPS.get_or_load(shape, lambda: _generate(shape))


def _generate(shape: Shape) -> GeneratedMLP:
    weight_ss, _sample_ss, estimator_seed = derive_seed_streams(shape.seed)
    mlp = sample_mlp(shape.width, shape.depth, fnp.random.default_rng(weight_ss), seed=estimator_seed)
    (name,) = assign_unique_names([estimator_seed])
    mlp = dataclasses.replace(mlp, name=name)
    weights = np.stack([np.asarray(w, dtype=np.float32) for w in mlp.weights])
    weights.setflags(write=False)
    return GeneratedMLP(shape, mlp, weights)


# ---------------------------------------------------------------------------
# the truth
# ---------------------------------------------------------------------------


TRUTH_CACHE: Region[Truth] = Region("generated-truths", share=1 / 16, size_of=lambda t: int(t.means.nbytes) + 64)


TRUTHS = "playground-truth"


def truth_key(shape: Shape, n_samples: int) -> str:
    return f"truth-{shape.width}x{shape.depth}-{shape.seed}-{n_samples}"


def cached_truth(shape: Shape, n_samples: int) -> Truth | None:
    """The truth if this process or any other (on any machine) has drawn it already, else None (nothing
    is sampled)."""
    if (shape, n_samples) not in TRUTH_CACHE and _read_truth(truth_key(shape, n_samples), shape, n_samples) is None:
        return None
    return generated_truth(shape, n_samples)


def generated_truth(shape: Shape, n_samples: int, *, progress: ProgressFn | None = None) -> Truth:
    """Monte Carlo truth on the seed's sampling stream: cached, else drawn (and stored for others)."""
    return TRUTH_CACHE.get_or_load((shape, n_samples), lambda: _read_truth(truth_key(shape, n_samples), shape, n_samples)
                               or _draw_and_store(shape, n_samples, progress))


def _draw_and_store(shape: Shape, n_samples: int, progress: ProgressFn | None) -> Truth:
    _weight_ss, sample_ss, _ = derive_seed_streams(shape.seed)
    sums = final_sums(list(generate(shape).weights), n_samples, np.random.default_rng(sample_ss),
                      progress=progress, layer_squares=True)
    drawn = Truth(sums.layer_means(), sums.avg_variance(), sums.layer_variances(), n_samples)
    _write_truth(truth_key(shape, n_samples), drawn)
    return drawn


def _write_truth(key: str, drawn: Truth) -> None:
    put_blob_arrays(TRUTHS, key, means=drawn.means, avg_variance=np.float64(drawn.avg_variance),
                     layer_variances=drawn.layer_variances, n_samples=np.int64(drawn.n_samples))
    prune_blobs(TRUTHS, max_count=TRUTH_FILES_KEPT)


def _read_truth(key: str, shape: Shape, n_samples: int) -> Truth | None:
    """A stored truth, or None when there is none or it is not whole (it is then drawn again)."""
    archive = get_blob_arrays(TRUTHS, key)
    try:
        means = np.asarray(archive["means"], dtype=np.float32)
        found = Truth(means, float(archive["avg_variance"]), np.asarray(archive["layer_variances"]),
                      int(archive["n_samples"]))
    except (TypeError, ValueError, KeyError):
        return None
    if means.shape != (shape.depth, shape.width) or found.n_samples != n_samples or not np.isfinite(means).all():
        return None
    return found


# ---------------------------------------------------------------------------
# keeping it
# ---------------------------------------------------------------------------


def kept_name(shape: Shape, n_samples: int) -> str:
    return f"playground-{shape.width}x{shape.depth}-{shape.seed}-{n_samples}"


def kept_path(shape: Shape, n_samples: int) -> Path:
    return config.kept_datasets_dir() / kept_name(shape, n_samples)


def truth_work(shape: Shape, n_samples: int) -> float:
    """What drawing the truth alone costs (keeping an MLP draws nothing else), in matmul-FLOP units."""
    return forward_work(shape.width, shape.depth, n_samples)


def keep_generated(shape: Shape, n_samples: int, *, owner: str | None = None,
                   progress: ProgressFn | None = None) -> Path:
    """Bake this MLP and its truth into a one-MLP compact dataset the registry serves, on every machine
    (the folder goes to the shared store, :data:`whestboard.data._registry.KEPT`), recorded as ``owner``'s.

    The record is the truth the page shows (same sampler, same stream), so nothing is drawn twice; a
    second keep of the same MLP finds it stored and returns it. The bake is staged outside the kept folder
    and the served copy is unpacked from the store, as every other process and machine unpacks it, so a
    kept folder is always the store's (a forgotten one leaves every cache at its next sync). A new one must
    fit the kept datasets' bounds (``whestboard.data._kept``): ``KeepRefused`` before any work when it
    cannot, and after storing when another keep took the room meanwhile (it is removed again).
    """
    directory = kept_path(shape, n_samples)
    if not blob_exists(KEPT, directory.name):
        _kept.check_room(owner, shape.width, shape.depth)
        drawn = generated_truth(shape, n_samples, progress=progress)
        staging = config.state_dir() / "kept-staging"
        staging.mkdir(parents=True, exist_ok=True)
        baked = Path(tempfile.mkdtemp(prefix=f"{directory.name[:80]}-", dir=staging)) / directory.name
        try:
            plan = BakePlan(shape.round_tag, shape.width, shape.depth, n_samples, (shape.seed,))
            manifest = prepare_bake(baked, plan, engine="numpy", explicit_seeds=True)
            bake_known_truth(baked, manifest, 0, generate(shape).weights, drawn.means, drawn.avg_variance,
                             origin={"made_by": "playground"})
            put_blob_folder(KEPT, directory.name, baked, meta={"made_by": "playground", "owner": owner},
                            replace=False)
        finally:
            shutil.rmtree(baked.parent, ignore_errors=True)
        beyond = _kept.past_bounds(directory.name)
        if beyond is not None:
            forget_kept(directory.name)
            raise _kept.KeepRefused(f"another keep took the last room meanwhile: {beyond}")
    fetch_blob_folder(KEPT, directory.name, directory)
    return directory


def describe_generated(shape: Shape, gen: GeneratedMLP) -> str:
    """One sentence naming where the MLP comes from, shown under the title."""
    return (f"{gen.name}: seed {shape.seed} under seed protocol 3.0, weights by whestbench's sample_mlp "
            f"(estimator seed {gen.estimator_seed}); the mlp_seed of an official {shape.label} dataset row "
            "gives that row's MLP exactly.")


def manifest_summary(directory: Path) -> dict:
    """The kept dataset's key facts (for the page's confirmation)."""
    manifest = json.loads(_compact.manifest_path(directory).read_text())
    return {"key": directory.name, "width": manifest["width"], "depth": manifest["depth"],
            "n_samples": manifest["n_samples"], "mlp_name": manifest["mlp_names"][0]}
