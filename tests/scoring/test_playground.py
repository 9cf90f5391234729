"""Every estimator on a generated MLP reports exactly what ``whestbench.scoring.evaluate_estimator`` does."""

from __future__ import annotations

import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.estimators import CombinedEstimator, CovariancePropagationEstimator, MeanPropagationEstimator
from whestbench.scoring import ContestData, evaluate_estimator

from tests.conftest import HOSTILE
from tests.scoring.test_runs import assert_entries_equal
from whestboard.data import TRUTH_CACHE, parse_shape
from whestboard.sandbox import ingest_upload
from whestboard.scoring import CumulantPropagationEstimator, _playground, builtin_choices, rulebook_for
from whestboard.scoring._estimators import MonteCarloEstimator

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]
SHAPE = (24, 3, 1234567)
SAMPLES = 3000
MC_SAMPLES = 500
REFERENCE = {"mean": MeanPropagationEstimator, "cov": CovariancePropagationEstimator,
             "combined": CombinedEstimator, "cumulant:3": lambda: CumulantPropagationEstimator(3),
             "cumulant:3:simple": lambda: CumulantPropagationEstimator(3, "simple"),
             "cumulant:3:augment-factored": lambda: CumulantPropagationEstimator(3, "augment-factored"),
             "cumulant:3:augment": lambda: CumulantPropagationEstimator(3, "augment"),
             f"mc:{MC_SAMPLES}": lambda: MonteCarloEstimator(n_samples=MC_SAMPLES)}


def grader_entry(gen, drawn, rulebook, estimator) -> dict:
    """``evaluate_estimator`` on a one-MLP suite built by hand from whestbench's own objects."""
    spec = rulebook.contest_spec(width=gen.shape.width, depth=gen.shape.depth, n_mlps=1,
                                 n_samples=drawn.n_samples)
    data = ContestData(spec=spec, mlps=[gen.mlp], all_layer_targets=[fnp.asarray(drawn.means)],
                       final_targets=[fnp.asarray(drawn.means[-1])], avg_variances=[drawn.avg_variance])
    return evaluate_estimator(estimator, data)["per_mlp"][0]


@pytest.mark.parametrize("round_tag", ["v2-phase2", None])
def test_every_estimator_equals_evaluate_estimator(round_tag):
    """Under the gated round every field is deterministic; under the shape's own (priced) round the
    residual time moves the compute, so the untimed fields are compared there."""
    shape = parse_shape(*SHAPE)
    rulebook = _playground.rulebook_for_shape(shape, round_tag)
    specs = _playground.estimator_specs(MC_SAMPLES)
    result = _playground.play(shape, SAMPLES, specs, rulebook)
    assert [s.spec for s in result.results] == list(REFERENCE)
    for scored in result.results:
        theirs = grader_entry(result.generated, result.truth, rulebook, REFERENCE[scored.spec]())
        if rulebook.residual_mode == "gated":
            assert_entries_equal(scored.entry, theirs)
        else:
            for key in ("final_layer_mse", "all_layers_mse", "per_layer_mse", "flops_used", "budget_exhausted"):
                assert scored.entry[key] == theirs[key], key
        assert scored.entry["noise_floor"] == result.truth.noise_floor
        assert scored.predictions.shape == (shape.depth, shape.width)
        errors = (scored.predictions.astype(np.float64) - result.truth.means) ** 2
        assert float(np.mean(errors[-1])) == pytest.approx(scored.entry["final_layer_mse"], rel=1e-5)


def test_a_result_is_served_again_from_the_state_folder():
    shape = parse_shape(*SHAPE)
    rulebook = rulebook_for("v2-phase2")
    specs = _playground.estimator_specs(MC_SAMPLES)
    _playground._SCORES.clear()
    TRUTH_CACHE.clear()
    assert _playground.cached_playground(shape, SAMPLES, specs, rulebook) is None
    first = _playground.play(shape, SAMPLES, specs, rulebook)
    _playground._SCORES.clear()
    TRUTH_CACHE.clear()
    again = _playground.cached_playground(shape, SAMPLES, specs, rulebook)
    assert again is not None
    for a, b in zip(first.results, again.results, strict=True):
        assert a.entry == b.entry and a.predictions.tobytes() == b.predictions.tobytes()


def test_progress_reaches_the_end_and_rises():
    seen: list[float] = []
    shape = parse_shape(16, 2, 9)
    specs = _playground.estimator_specs(100)
    _playground.play(shape, 20_000, specs, rulebook_for(None),
                    progress=lambda _what, fraction: seen.append(fraction))
    # one step draws the truth, one scores each estimator; the last report is before the last one ends
    assert seen == sorted(seen) and seen[-1] == pytest.approx(len(specs) / (1 + len(specs)))


def test_an_upload_of_the_session_runs_sandboxed_beside_the_built_ins():
    upload = ingest_upload((HOSTILE / "good.py").read_bytes(), "good.py")
    shape = parse_shape(16, 2, 8)
    rulebook = rulebook_for("v2-phase2")
    result = _playground.play(shape, 2000, _playground.estimator_specs(100, [upload.sha256]), rulebook)
    uploaded = result.results[-1]
    assert uploaded.spec == f"upload:{upload.sha256}" and uploaded.label == "good.py"
    assert not uploaded.failed, uploaded.entry.get("failure_reason")
    assert uploaded.entry["flops_used"] > 0
    assert float(uploaded.entry["final_layer_mse"]) == pytest.approx(
        float(np.mean((uploaded.predictions[-1].astype(np.float64) - result.truth.means[-1]) ** 2)), rel=1e-5)


def test_an_upload_gone_from_the_store_is_left_out_in_words():
    shape = parse_shape(8, 2, 8)
    gone = "ab" * 32
    result = _playground.play(shape, 1000, _playground.estimator_specs(100, [gone]), rulebook_for(None))
    assert [s.spec for s in result.results] == _playground.estimator_specs(100)
    assert result.problems == (f"upload:{gone} was left out: no upload {gone!r}. Upload it again on the Upload page.",)


def test_the_table_names_each_cumulant_variant_as_the_lab_menu_does():
    """"cumulant propagation, K = 3 (BASE)" had dropped what the menu and the convergence legend say of BASE."""
    menu = {c["value"]: c["label"] for c in builtin_choices()}
    played = [spec for spec in _playground.BUILTIN_SPECS if spec.startswith("cumulant:")]
    assert played
    for spec in played:
        assert _playground.BUILTIN_LABELS[spec] == menu[spec][:1].lower() + menu[spec][1:], spec
