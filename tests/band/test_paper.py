"""The paper's figure, measured: numbers against flopscope's own meter and a Monte Carlo reference drawn
independently with whestbench's sampler; the job resumes; the CLI bakes a tiny version; the figure shows
what the view holds.
"""

from __future__ import annotations

import json

import flopscope as flops
import flopscope.numpy as fnp
import numpy as np
import pytest
from whestbench.generation import sample_mlp
from whestbench.seeds import derive_seed_streams
from whestbench.simulation import sample_layer_statistics

from components.figures.paper import paper_figure
from whestboard.band import measure_paper_shape, paper_view, sampling_line
from whestboard.cli import main
from whestboard.rules import metered_mc_flops_per_sample
from whestboard.scoring import CUMULANT_KINDS, CumulantPropagationEstimator

WIDTH, DEPTH, SEEDS, N_REF = 12, 3, (0, 1), 4096


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("paper")
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS, n_ref=N_REF, out=folder, log=lambda _: None) == len(SEEDS)
    return folder


def test_each_number_is_flopscopes_and_the_references(baked):
    """FLOPs are flopscope's count of predict; MSE is against the MLP's own-stream Monte Carlo mean, which
    whestbench's sampler reproduces from the same seed."""
    for seed in SEEDS:
        record = json.loads((baked / f"{WIDTH}x{DEPTH}" / f"mlp-{seed}.json").read_text())
        weight_ss, sample_ss, _ = derive_seed_streams(seed)
        mlp = sample_mlp(WIDTH, DEPTH, fnp.random.default_rng(weight_ss))
        means, _final, avg_variance = sample_layer_statistics(mlp, N_REF, rng=fnp.random.default_rng(sample_ss))
        assert record["avg_variance"] == pytest.approx(float(avg_variance), rel=1e-9)
        assert set(record["results"]) == set(CUMULANT_KINDS)
        for spec, result in record["results"].items():
            order, *variant = spec.split(":")[1:]
            estimator = CumulantPropagationEstimator(int(order), variant[0] if variant else None)
            with flops.BudgetContext(flop_budget=10**17, quiet=True) as ctx:
                estimate = np.asarray(estimator.predict(mlp, 10**16), dtype=np.float64)
            assert result["flops"] == ctx.flops_used
            mse = float(np.mean((estimate[-1] - np.asarray(means, dtype=np.float64)[-1]) ** 2))
            assert result["final_layer_mse"] == pytest.approx(mse, rel=1e-6)
            assert result["mse_over_var"] == pytest.approx(mse / float(avg_variance), rel=1e-6)


def test_the_view_averages_the_mlps_and_keeps_each_points_floor(baked):
    view = paper_view(baked)
    (shape,) = view.shapes
    assert shape.key == f"{WIDTH}x{DEPTH}" and shape.n_ref == N_REF and not view.problems
    assert shape.flops_per_sample == metered_mc_flops_per_sample(WIDTH, DEPTH)
    records = [json.loads((baked / shape.key / f"mlp-{s}.json").read_text()) for s in SEEDS]
    for point in shape.points:
        ratios = [r["results"][point.spec]["mse_over_var"] for r in records]
        assert point.mse_over_var == pytest.approx(np.mean(ratios), rel=1e-12)
        assert point.low <= point.mse_over_var <= point.high
        assert point.noise_floor == pytest.approx(1 / N_REF, rel=1e-12)  # sigma^2/N_ref over sigma^2
    xs, ys = sampling_line(shape, (1e3, 1e9))
    np.testing.assert_allclose(xs * ys, shape.flops_per_sample, rtol=1e-12)  # MSE/Var = 1/m


def test_a_spec_added_later_is_measured_alone_against_the_same_reference(baked, tmp_path, monkeypatch):
    """A file made before a spec existed keeps its results and only the new spec is measured, against the
    reference drawn again from the same stream: what rerunning ``python -m whestboard paper`` does after a new
    cumulant variant. The file then holds what a bake with every spec holds."""
    from whestboard.band import _paper

    folder = tmp_path / "paper"
    older = [s for s in CUMULANT_KINDS if s != "cumulant:3:augment"]
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS, n_ref=N_REF, out=folder, specs=older, log=lambda _: None) == 2
    before = json.loads((folder / f"{WIDTH}x{DEPTH}" / "mlp-0.json").read_text())
    asked: list[list[str]] = []
    measure = _paper.measure_mlp
    monkeypatch.setattr(_paper, "measure_mlp", lambda *args: asked.append(list(args[-1])) or measure(*args))
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS, n_ref=N_REF, out=folder, log=lambda _: None) == 2
    assert asked == [["cumulant:3:augment"]] * 2
    for seed in SEEDS:
        record = json.loads((folder / f"{WIDTH}x{DEPTH}" / f"mlp-{seed}.json").read_text())
        assert record == json.loads((baked / f"{WIDTH}x{DEPTH}" / f"mlp-{seed}.json").read_text())
    after = json.loads((folder / f"{WIDTH}x{DEPTH}" / "mlp-0.json").read_text())
    assert {s: after["results"][s] for s in older} == before["results"]


def test_the_job_resumes_and_remeasures_other_settings(baked, tmp_path):
    import shutil

    folder = tmp_path / "paper"
    shutil.copytree(baked, folder)
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS, n_ref=N_REF, out=folder, log=lambda _: None) == 0
    (folder / f"{WIDTH}x{DEPTH}" / "mlp-1.json").write_text("{not json")
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS, n_ref=N_REF, out=folder, log=lambda _: None) == 1
    assert measure_paper_shape(WIDTH, DEPTH, SEEDS[:1], n_ref=2 * N_REF, out=folder, log=lambda _: None) == 1


def test_an_unreadable_file_is_named_not_drawn(baked, tmp_path):
    import shutil

    folder = tmp_path / "paper"
    shutil.copytree(baked, folder)
    (folder / f"{WIDTH}x{DEPTH}" / "mlp-9.json").write_text("[]")
    view = paper_view(folder)
    assert view.shapes[0].points[0].n_mlps == len(SEEDS)
    assert any("mlp-9.json" in p for p in view.problems)


def test_the_cli_bakes_a_tiny_version(tmp_path, capsys):
    out = tmp_path / "paper"
    assert main(["paper", "--widths", "8", "--depth", "2", "--mlps", "1", "--samples", "1024", "--out", str(out)]) == 0
    assert "1 MLP(s) measured" in capsys.readouterr().out
    assert main(["paper", "--widths", "8", "--depth", "2", "--mlps", "1", "--samples", "1024", "--out", str(out)]) == 0
    assert "0 MLP(s) measured" in capsys.readouterr().out
    assert paper_view(out).shapes[0].key == "8x2"
    assert main(["paper", "--widths", "3", "--out", str(out)]) == 2
    assert "--widths" in capsys.readouterr().err
    assert main(["paper", "--widths", "", "--rounds", "v9", "--out", str(out)]) == 2


def test_the_figure_draws_the_sampling_line_every_point_and_its_floor(baked):
    shape = paper_view(baked).shapes[0]
    figure = paper_figure(shape)
    names = [t.name for t in figure.data]
    sampling = next(t for t in figure.data if t.name == "sampling: MSE / Var = 1/m")
    np.testing.assert_allclose(np.asarray(sampling.x) * np.asarray(sampling.y), shape.flops_per_sample, rtol=1e-12)
    for point in shape.points:
        (trace,) = [t for t in figure.data if t.legendgroup == point.spec]
        assert trace.name.startswith(point.label) and trace.customdata[0][0] == point.spec
        if trace.error_y and trace.error_y.array is not None:  # inside the frame: drawn where it is
            assert trace.x[0] == point.flops and trace.y[0] == point.mse_over_var
    floors = next(t for t in figure.data if t.name.startswith("each point's noise floor"))
    assert list(floors.y) == [p.noise_floor for p in shape.points]
    assert names[0].startswith("below the reference's noise floor")
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
