"""The compare page's figures draw exactly the numbers of the verdict and anatomy they are given."""

from __future__ import annotations

import numpy as np
import pytest

from components.compare_panels import compare_url, merged_options, upload_options
from components.figures import compare as figs
from whestboard.compare import class_shares, error_by_truth, error_heatmap, paired_stat, squared_errors


def _verdict(a, b, variance, noise=None) -> dict:
    n = len(a)
    return {
        "n_shared": n, "public_suite_mlps": 50,
        "score": paired_stat(np.array(a), np.array(b), metric="score").as_dict(),
        "final_layer_mse": paired_stat(np.array(a), np.array(b), metric="final_layer_mse").as_dict(),
        "noise": noise or {"available": False, "reason": "needs stored predictions of B"},
        "per_mlp": {"mlp_index": list(range(n)), "mlp_name": [f"m{i}" for i in range(n)], "score_a": a, "score_b": b,
                    "mse_a": a, "mse_b": b, "avg_variance": variance},
    }


def test_scatter_puts_each_mlp_at_b_a_and_pins_a_zero_to_the_edge():
    a, b = [1e-6, 2e-6, 0.0, 4e-6], [2e-6, 1e-6, 3e-6, 8e-6]
    fig = figs.pair_scatter(_verdict(a, b, [0.1, 0.2, 0.3, 0.4]), "score")
    line, dots = fig.data[0], fig.data[1]
    assert line.name.startswith("y = x") and line.x[0] == line.y[0] and line.x[1] == line.y[1]
    np.testing.assert_allclose(dots.x, [2e-6, 1e-6, 8e-6])
    np.testing.assert_allclose(dots.y, [1e-6, 2e-6, 4e-6])
    np.testing.assert_allclose(dots.marker.color, np.round(np.log10([0.1, 0.2, 0.4]), 3))
    pinned = [t for t in fig.data[2:] if "outside" in t.name]
    assert len(pinned) == 1 and pinned[0].name == "1 outside (bottom)" and pinned[0].customdata[0][0] == 2


def test_interval_and_noise_figures_draw_the_verdicts_numbers(foreign_template):
    noise = {"available": True, "reference": 1e-7, "spread": 3e-7, "total": np.hypot(1e-7, 3e-7),
             "limited_by": "MLP-to-MLP spread"}
    verdict = _verdict([1.0, 2.0, 3.0, 5.0], [2.0, 2.5, 4.0, 9.0], [1, 1, 1, 1], noise)
    fig = figs.interval_figure(verdict)
    stat = verdict["score"]
    assert list(fig.data[0].x) == [stat["ratio"], verdict["final_layer_mse"]["ratio"]]
    assert fig.data[0].error_x.array[0] == pytest.approx(stat["ratio_high"] - stat["ratio"])
    assert fig.data[0].error_x.arrayminus[0] == pytest.approx(stat["ratio"] - stat["ratio_low"])
    bars = figs.noise_figure(verdict)
    assert list(bars.data[0].x) == [1e-7, 3e-7, noise["total"]]
    assert "MLP-to-MLP spread" in bars.layout.title.text
    assert bars.layout.template.layout.paper_bgcolor == foreign_template  # no template of its own
    missing = figs.noise_figure(_verdict([1.0, 2.0], [2.0, 3.0], [1, 1]))
    assert "stored predictions" in missing.layout.annotations[0].text.replace("<br>", " ")
    assert not missing.layout.xaxis.visible and not missing.layout.yaxis.visible


def test_anatomy_figures_draw_shares_bins_and_heatmap():
    rng = np.random.default_rng(0)
    truth = np.abs(rng.normal(0, 1, (3, 4, 32)))
    pred_a, pred_b = truth + rng.normal(0, 0.1, truth.shape), truth + rng.normal(0, 0.05, truth.shape)
    sq_a, sq_b = squared_errors(pred_a[:, -1], truth[:, -1]), squared_errors(pred_b[:, -1], truth[:, -1])
    dead, on = truth[:, -1] < 0.2, truth[:, -1] > 1.5
    anatomy = {"per_layer_mse_a": [1e-3, 2e-3, 3e-3, 4e-3], "per_layer_mse_b": [1e-4, 2e-4, 3e-4, 4e-4],
               "shares_a": class_shares(sq_a, dead, on).as_dict(), "shares_b": class_shares(sq_b, dead, on).as_dict(),
               "by_truth": error_by_truth(truth[:, -1], sq_a, sq_b).as_dict()}
    shares = figs.shares_figure(anatomy)
    totals = np.sum([np.array(t.x) for t in shares.data], axis=0)
    np.testing.assert_allclose(totals, 1.0)
    per_layer = figs.per_layer_figure(anatomy)
    assert list(per_layer.data[0].y) == anatomy["per_layer_mse_a"] and list(per_layer.data[0].x) == [1, 2, 3, 4]
    bins = figs.truth_bins_figure(anatomy)
    assert list(bins.data[0].y) == anatomy["by_truth"]["mean_a"] and bins.data[0].x[0] == "dead"
    heat = error_heatmap(1, pred_a[1], truth[1], pred_b[1])
    fig = figs.heatmap_figure(heat)
    np.testing.assert_allclose(np.array(fig.data[0].z), heat.values)
    assert fig.data[0].zmid == 0


def test_compare_url_and_the_sessions_uploads():
    assert compare_url("run:abc", "sub:team x/1") == "/compare?a=run%3Aabc&b=sub%3Ateam+x%2F1"
    assert compare_url("run:abc") == "/compare?a=run%3Aabc" and compare_url(None) == "/compare"
    uploads = [{"upload": "s1", "label": "first.py", "run_id": "r1", "dataset": "v1-warmup", "round": "v1-warmup"},
               {"upload": "s2", "label": "broken.py", "run_id": None}, "junk",
               {"upload": "s3", "label": "last.py", "run_id": "r3", "dataset": "v1-warmup"}]
    options = upload_options(uploads)
    assert [o["value"] for o in options] == ["run:r3", "run:r1"] and "last.py" in options[0]["label"]
    assert upload_options(None) == [] and upload_options({"not": "a list"}) == []
    merged = merged_options(options, [{"label": "r1 again", "value": "run:r1"}, {"label": "x", "value": "run:x"}])
    assert [o["value"] for o in merged] == ["run:r3", "run:r1", "run:x"]
