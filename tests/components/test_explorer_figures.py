"""Every explorer figure plots the numbers numpy computes from the same MLP, and its CSV holds them."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from components.figures import explorer as figs
from whestboard.data import (
    ALWAYS_ON_RELATIVE_CLIP,
    DEAD_MEAN_THRESHOLD,
    build_weights,
    compute_mlp_stats,
    final_histogram,
    heatmap_bins,
    layer_statistics,
    reference_pre_activation_means,
)


@pytest.fixture(scope="module")
def mlp():
    weights = build_weights(16, 4, 31)
    means, avg_var = layer_statistics(list(weights), 2048, np.random.default_rng(31))
    return weights, means, compute_mlp_stats(means, weights, avg_var, 2048)


def _trace(fig, name):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, f"expected one trace named {name!r}, got {[t.name for t in fig.data]}"
    return matches[0]


def _arr(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


# -- ribbon --------------------------------------------------------------------


def test_ribbon_plots_the_percentiles_of_each_layer(mlp):
    _, means, stats = mlp
    fig = figs.ribbon_figure(stats.ribbon)
    m64 = means.astype(np.float64)
    layers = np.arange(1, means.shape[0] + 1)
    np.testing.assert_array_equal(_arr(_trace(fig, "median").x), layers)
    np.testing.assert_allclose(_arr(_trace(fig, "median").y), np.median(m64, axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "min–max").y), m64.max(axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "min–max low").y), m64.min(axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "5–95%").y), np.percentile(m64, 95, axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "5–95% low").y), np.percentile(m64, 5, axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "25–75%").y), np.percentile(m64, 75, axis=1))
    np.testing.assert_allclose(_arr(_trace(fig, "25–75% low").y), np.percentile(m64, 25, axis=1))
    for band in ("min–max", "5–95%", "25–75%"):  # each band fills down to its own lower edge
        names = [t.name for t in fig.data]
        assert names[names.index(band) - 1] == f"{band} low"
        assert _trace(fig, band).fill == "tonexty"


def test_ribbon_table_holds_the_plotted_numbers(mlp):
    _, means, stats = mlp
    table = figs.ribbon_table(stats.ribbon)
    assert list(table.columns) == ["layer", "min", "p5", "p25", "median", "p75", "p95", "max"]
    np.testing.assert_allclose(table["median"], np.median(means.astype(np.float64), axis=1))
    np.testing.assert_allclose(table["p95"], np.percentile(means.astype(np.float64), 95, axis=1))


# -- heatmap -------------------------------------------------------------------


def test_heatmap_bins_wide_layers_to_256_columns():
    means = np.random.default_rng(4).random((3, 1024)).astype(np.float32)
    bins = heatmap_bins(means)
    fig = figs.heatmap_figure(bins)
    heat = fig.data[0]
    z = _arr(heat.z)
    assert z.shape == (3, 256)
    np.testing.assert_allclose(z, means.astype(np.float64).reshape(3, 256, 4).mean(axis=-1))
    np.testing.assert_array_equal(_arr(heat.y), [1, 2, 3])
    custom = np.asarray(heat.customdata)
    np.testing.assert_array_equal(custom[..., 0], bins.representative)
    np.testing.assert_allclose(custom[..., 1], means.reshape(3, 256, 4).min(axis=-1), rtol=1e-6)
    np.testing.assert_allclose(custom[..., 2], means.reshape(3, 256, 4).max(axis=-1), rtol=1e-6)
    assert "4 neurons each" in fig.layout.xaxis.title.text


def test_heatmap_ordered_shows_sorted_layers(mlp):
    _, means, _ = mlp
    fig = figs.heatmap_figure(heatmap_bins(means, ordered=True))
    np.testing.assert_allclose(_arr(fig.data[0].z), np.sort(means.astype(np.float64), axis=1))
    assert "sorted" in fig.layout.xaxis.title.text


def test_heatmap_table_is_full_resolution(mlp):
    _, means, stats = mlp
    table = figs.heatmap_table(stats.means, stats.dead, stats.always_on, stats.mean_field.post_mean)
    depth, width = means.shape
    assert len(table) == depth * width
    np.testing.assert_array_equal(table["truth_mean"].to_numpy().reshape(depth, width), means)
    np.testing.assert_array_equal(table["dead"].to_numpy().reshape(depth, width), means <= DEAD_MEAN_THRESHOLD)
    ranks = table["rank_in_layer"].to_numpy().reshape(depth, width)
    for layer in range(depth):
        assert np.array_equal(np.sort(means[layer]), means[layer][np.argsort(ranks[layer])])


# -- fractions and histogram ---------------------------------------------------------------


def test_fractions_stack_dead_kinked_and_always_on(mlp):
    _, means, stats = mlp
    fig = figs.fractions_figure(stats.dead_fraction, stats.always_on_fraction)
    dead = _arr(_trace(fig, "dead").y)
    on = _arr(_trace(fig, "always-on").y)
    kinked = _arr(_trace(fig, "kinked (sometimes clipped)").y)
    np.testing.assert_allclose(dead, (means <= DEAD_MEAN_THRESHOLD).mean(axis=1))
    clipped = means.astype(np.float64) - reference_pre_activation_means(means, mlp[0])
    expected_on = ((means > DEAD_MEAN_THRESHOLD) & (clipped <= ALWAYS_ON_RELATIVE_CLIP * means)).mean(axis=1)
    np.testing.assert_allclose(on, expected_on)
    np.testing.assert_allclose(dead + on + kinked, 1.0)
    assert fig.layout.barmode == "stack"
    table = figs.fractions_table(stats.dead_fraction, stats.always_on_fraction)
    np.testing.assert_allclose(table["kinked_fraction"], kinked)


def test_histogram_plots_numpy_counts(mlp):
    _, means, stats = mlp
    counts, edges = final_histogram(means[-1], bins=10)
    fig = figs.histogram_figure(counts, edges, int((means[-1] <= DEAD_MEAN_THRESHOLD).sum()))
    final = means[-1].astype(np.float64)
    expected, expected_edges = np.histogram(final, bins=10, range=(final.min(), final.max()))
    bar = fig.data[0]
    np.testing.assert_array_equal(_arr(bar.y), expected)
    np.testing.assert_allclose(_arr(bar.x), (expected_edges[:-1] + expected_edges[1:]) / 2)
    np.testing.assert_allclose(_arr(bar.width), np.diff(expected_edges))
    n_dead = int((means[-1] <= DEAD_MEAN_THRESHOLD).sum())
    assert f"{n_dead} dead" in fig.layout.annotations[0].text
    table = figs.histogram_table(counts, edges)
    assert table["neurons"].sum() == means.shape[1]


# -- weights -----------------------------------------------------------------------------


def test_weight_figure_plots_numpy_weight_statistics(mlp):
    weights, _, stats = mlp
    fig = figs.weight_stats_figure(stats.weights)
    w64 = weights.astype(np.float64)
    np.testing.assert_allclose(_arr(_trace(fig, "entry std").y), [w.std() for w in w64], rtol=1e-9)
    np.testing.assert_allclose(_arr(_trace(fig, "entry mean").y), [w.mean() for w in w64], rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(_arr(_trace(fig, "He init sqrt(2/width)").y), np.sqrt(2 / 16))
    box = _trace(fig, "incoming norm")
    norms = np.linalg.norm(w64, axis=1)
    np.testing.assert_allclose(_arr(box.median), np.median(norms, axis=1), rtol=1e-9)
    np.testing.assert_allclose(_arr(box.q1), np.percentile(norms, 25, axis=1), rtol=1e-9)
    np.testing.assert_allclose(_arr(box.upperfence), norms.max(axis=1), rtol=1e-9)
    np.testing.assert_allclose(_arr(_trace(fig, "spectral norm").y), [np.linalg.norm(w, 2) for w in w64], rtol=1e-4)
    table = figs.weights_table(stats.weights)
    np.testing.assert_allclose(table["incoming_norm_median"], np.median(norms, axis=1), rtol=1e-9)
    np.testing.assert_allclose(table["entry_std"], [w.std() for w in w64], rtol=1e-9)


# -- network ---------------------------------------------------------------------------------


def test_network_colours_neurons_by_mean_and_draws_every_weight(mlp):
    weights, means, _ = mlp
    fig = figs.network_figure(means, weights)
    nodes = _trace(fig, "neurons")
    np.testing.assert_allclose(_arr(nodes.marker.color), means.reshape(-1).astype(np.float64))
    np.testing.assert_array_equal(_arr(nodes.x), np.repeat(np.arange(1, 5), 16))
    np.testing.assert_array_equal(_arr(nodes.y), np.tile(np.arange(16), 4))
    drawn = {1: set(), -1: set()}
    for trace in fig.data:
        if trace.mode != "lines":
            continue
        sign = 1 if "214,39,40" in trace.line.color else -1
        xs, ys = _arr(trace.x), _arr(trace.y)
        for k in range(0, len(xs), 3):
            drawn[sign].add((int(xs[k]), int(ys[k]), int(ys[k + 1])))
            assert xs[k + 1] == xs[k] + 1 and np.isnan(xs[k + 2])
    layer, source, target = np.nonzero(weights > 0)
    assert drawn[1] == set(zip(layer.tolist(), source.tolist(), target.tolist(), strict=True))
    layer, source, target = np.nonzero(weights < 0)
    assert drawn[-1] == set(zip(layer.tolist(), source.tolist(), target.tolist(), strict=True))


def test_network_edges_table_lists_every_weight(mlp):
    weights, _, _ = mlp
    table = figs.network_edges(weights)
    assert len(table) == weights.size
    row = table[(table.source_layer == 2) & (table.source == 3) & (table.target == 7)]
    assert row["weight"].item() == float(weights[2][3, 7])


# -- CSV and glossary ----------------------------------------------------------------------


def test_csv_round_trips_float32_values(mlp):
    _, means, stats = mlp
    table = figs.heatmap_table(stats.means, stats.dead, stats.always_on, stats.mean_field.post_mean)
    back = pd.read_csv(io.StringIO(figs.csv_text(table)))
    np.testing.assert_array_equal(back["truth_mean"].to_numpy(np.float32).reshape(means.shape), means)
    assert list(back.columns) == list(table.columns)


def test_glossary_explains_every_named_quantity():
    for term in ("E[h]", "avg_variance", "dead", "always-on", "noise floor", "mean field", "spectral norm"):
        assert len(figs.GLOSSARY[term]) > 40
    assert f"{DEAD_MEAN_THRESHOLD:g}" in figs.GLOSSARY["dead"]


def test_the_figures_draw_on_the_default_template_without_naming_one(mlp, foreign_template):
    _, _, stats = mlp
    assert figs.ribbon_figure(stats.ribbon).layout.template.layout.paper_bgcolor == foreign_template
