"""The playground's figures plot exactly the core's numbers: MSEs, floors, errors and predictions."""

from __future__ import annotations

import numpy as np
import pytest

from components.figures import playground as figs
from whestboard.data import heatmap_bins, parse_shape
from whestboard.scoring import estimator_specs, play, rulebook_for_shape

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHESTBOARD_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        shape = parse_shape(300, 3, 17)  # wider than the heatmap's 256 columns: binned
        yield play(shape, 2000, estimator_specs(100), rulebook_for_shape(shape))


def test_per_layer_mse_draws_each_estimator_and_the_truths_floor(result):
    fig = figs.per_layer_mse_figure(result)
    floor, *curves = fig.data
    np.testing.assert_array_equal(floor.y, result.truth.layer_noise_floors)
    assert [c.name.split(" (= ")[0] for c in curves] == [s.label for s in result.results]
    cov, combined = result.results[1], result.results[2]
    assert combined.entry["per_layer_mse"] == cov.entry["per_layer_mse"]  # B affords covariance propagation
    assert curves[2].name == "combined (= covariance propagation, drawn dashed)"
    assert curves[2].line.dash == "dash" and curves[1].line.dash == "solid"
    for curve, scored in zip(curves, result.results, strict=True):
        np.testing.assert_array_equal(curve.y, np.asarray(scored.entry["per_layer_mse"], dtype=np.float64))
    assert fig.layout.yaxis.type == "log"


def test_error_heatmap_bins_the_absolute_error_like_the_mlp_page(result):
    scored = result.results[0]
    fig = figs.error_heatmap_figure(result, scored)
    expected = heatmap_bins(np.abs(scored.predictions.astype(np.float64) - result.truth.means))
    np.testing.assert_allclose(fig.data[0].z, expected.values)
    assert fig.data[0].z.shape == (3, expected.columns) and expected.columns <= 256 and expected.bin_size == 2


def test_predicted_vs_true_is_one_point_per_neuron_of_the_layer(result):
    scored = result.results[1]
    fig = figs.predicted_vs_true_figure(result, scored, 1)
    points = fig.data[1]
    np.testing.assert_array_equal(points.x, result.truth.means[1].astype(np.float64))
    np.testing.assert_array_equal(points.y, scored.predictions[1].astype(np.float64))


def test_truth_figures_draw_the_graph_only_for_small_widths(result):
    assert set(figs.truth_figures(result)) == {"means", "ribbon", "weights"}
    small = parse_shape(8, 2, 3)
    small_result = play(small, 1000, estimator_specs(100), rulebook_for_shape(small))
    assert "network" in figs.truth_figures(small_result)
