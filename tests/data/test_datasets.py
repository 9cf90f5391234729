"""Both dataset formats yield exactly what whestbench's own loader yields."""

from __future__ import annotations

import gc
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.upstream import SEEDS, make_official, whestbench_mlps
from whestboard.data import _compact
from whestboard.data._bake import bake, plan_from_args
from whestboard.data._datasets import DatasetError, MLPNotFound, WeightsMismatch, open_dataset

WIDTH, DEPTH, SAMPLES = 24, 3, 3000


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    return make_official(tmp_path_factory.mktemp("official") / "ds", width=WIDTH, depth=DEPTH, n_samples=SAMPLES)


@pytest.fixture(scope="module")
def reference(official, tmp_path_factory):
    return whestbench_mlps(official, tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def compact_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("compact") / "ds"
    plan = plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=SAMPLES, seeds=SEEDS)
    bake(out, plan, explicit_seeds=True, show_progress=False)
    return out


def _assert_matches_whestbench(ds, reference):
    assert ds.info.n_mlps == len(reference)
    summary = ds.summary()
    for i, ref in enumerate(reference):
        mlp = ds.mlp(i)
        assert mlp.seed == ref["mlp"].seed
        assert mlp.name == ref["mlp"].name == ref["mlp_name"]
        assert (mlp.width, mlp.depth) == (WIDTH, DEPTH)
        for got, want in zip(mlp.weights, ref["mlp"].weights, strict=True):
            assert np.asarray(got).dtype == np.float32
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
        means, avg_var = ds.truth(i)
        np.testing.assert_array_equal(means, ref["all_layer_means"])
        assert avg_var == ref["avg_variance"]
        assert summary.loc[i, "mlp_seed"] == ref["mlp_seed"]
        assert summary.loc[i, "mlp_name"] == ref["mlp_name"]
        assert summary.loc[i, "avg_variance"] == ref["avg_variance"]


def test_official_directory_matches_whestbench(official, reference):
    ds = open_dataset(official)
    assert ds.info.format == "schema-3.0"
    assert ds.info.n_samples == SAMPLES
    _assert_matches_whestbench(ds, reference)


def test_compact_bake_matches_create_dataset(compact_dir, reference):
    ds = open_dataset(compact_dir)
    assert ds.info.format == "compact"
    _assert_matches_whestbench(ds, reference)


def test_whestbench_engine_bakes_the_same_truth(tmp_path, compact_dir):
    plan = plan_from_args(round_tag=None, width=WIDTH, depth=DEPTH, n_mlps=None, n_samples=SAMPLES, seeds=SEEDS[:2])
    bake(tmp_path / "wb", plan, engine="whestbench", explicit_seeds=True, show_progress=False)
    metered, fast = open_dataset(tmp_path / "wb"), open_dataset(compact_dir)
    for i in range(2):
        np.testing.assert_array_equal(metered.truth(i)[0], fast.truth(i)[0])
        assert metered.truth(i)[1] == fast.truth(i)[1]
    breakdown = metered.provenance(0)["sampling_budget_breakdown"]
    assert breakdown is not None and breakdown["flops_used"] > 0


def test_summary_statistics_come_from_the_truth(official):
    ds = open_dataset(official)
    summary = ds.summary()
    for i in ds.indices:
        means, avg_var = ds.truth(i)
        assert summary.loc[i, "final_mean_avg"] == pytest.approx(float(means[-1].mean()))
        assert summary.loc[i, "dead_fraction"] == pytest.approx(float((means <= 1e-6).mean()))
        assert summary.loc[i, "noise_floor"] == pytest.approx(avg_var / SAMPLES)
    assert ds.noise_floor == pytest.approx(summary["avg_variance"].mean() / SAMPLES)


def test_rebuilt_weights_that_differ_are_refused(tmp_path, compact_dir):
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(compact_dir, copy)
    rec = _compact.read_mlp_record(copy, 1)
    _compact.write_mlp_record(copy, 1, all_layer_means=rec["all_layer_means"], avg_variance=rec["avg_variance"],
                             weights_sha256="0" * 64, provenance=rec["provenance"])
    ds = open_dataset(copy)
    ds.mlp(0)  # untouched MLPs still load
    with pytest.raises(WeightsMismatch, match="does not match"):
        ds.mlp(1)


def test_unknown_index_is_a_clear_error(compact_dir):
    ds = open_dataset(compact_dir)
    with pytest.raises(MLPNotFound, match="indices 0..3"):
        ds.truth(17)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "neither metadata.json"),
        (lambda p: (p / "metadata.json").write_text("{not json"), "not valid JSON"),
        (lambda p: (p / "metadata.json").write_text(json.dumps({"schema_version": "2.0"})), "schema_version 2.0"),
        (
            lambda p: (p / "metadata.json").write_text(
                json.dumps({"schema_version": "3.0", "width": 4, "depth": 2, "n_samples": 10,
                            "seed_protocol": {"version": "3.0"}, "split": "public"})
            ),
            "no parquet files",
        ),
        (lambda p: (p / _compact.MANIFEST_NAME).write_text(json.dumps({"format": "other"})), "not a Whestboard compact"),
    ],
)
def test_malformed_directories_say_what_is_wrong(tmp_path, make, message):
    d = tmp_path / "bad"
    d.mkdir()
    make(d)
    with pytest.raises(DatasetError, match=message):
        open_dataset(d)


def test_missing_directory(tmp_path):
    with pytest.raises(DatasetError, match="no such directory"):
        open_dataset(tmp_path / "nowhere")


@pytest.mark.parametrize("width, depth", [(7, 2), (256, 2)])
def test_weights_rebuild_equals_whestbench_sample_mlp(width, depth):
    import flopscope.numpy as fnp
    from whestbench import sample_mlp
    from whestbench.seeds import derive_seed_streams

    from whestboard.data._bake import build_weights

    seed = 2**40 + 3
    mlp = sample_mlp(width, depth, fnp.random.default_rng(derive_seed_streams(seed)[0]))
    np.testing.assert_array_equal(build_weights(width, depth, seed), np.stack([np.asarray(w) for w in mlp.weights]))


# -- damaged files: contained to the MLP they hold ---------------------------------------


def _copy(compact_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(compact_dir, copy)
    return copy


def _truncate(path, fraction=0.5):
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.truncate(int(size * fraction))


def test_a_truncated_record_damages_only_its_mlp(tmp_path, compact_dir):
    from whestboard.data._datasets import MLPDamaged

    intact = open_dataset(compact_dir)
    copy = _copy(compact_dir, tmp_path)
    _truncate(_compact.mlp_path(copy, 1))
    ds = open_dataset(copy)

    assert ds.info.n_mlps == 4 and ds.indices == [0, 2, 3] and ds.held_indices == [0, 1, 2, 3]
    damage = ds.damaged[1]
    assert damage.path == _compact.mlp_path(copy, 1)
    assert damage.reason == "the archive is truncated or corrupt (BadZipFile: File is not a zip file)"
    assert damage.name == intact.mlp_name(1) and damage.seed == SEEDS[1]
    assert f"--n-mlps 4 --samples {SAMPLES} --out {copy}" in damage.remedy
    for call in (ds.truth, ds.weights, ds.mlp, ds.mlp_name, ds.estimator_seed):
        with pytest.raises(MLPDamaged, match="MLP 1 of copy is damaged: .*00001.npz: the archive is truncated"):
            call(1)
    with pytest.raises(MLPDamaged, match="00001.npz.*MLP\\(s\\) 1 of the selection"):
        ds.refuse_damaged([0, 1, 1, 2])
    ds.refuse_damaged([0, 2])  # a selection of readable MLPs passes
    for i in ds.indices:  # every other MLP is exactly what it was
        np.testing.assert_array_equal(ds.truth(i)[0], intact.truth(i)[0])
        assert ds.truth(i)[1] == intact.truth(i)[1]
        np.testing.assert_array_equal(ds.weights(i), intact.weights(i))

    readable_variances = [intact.truth(i)[1] for i in (0, 2, 3)]
    assert ds.mean_avg_variance == pytest.approx(np.mean(readable_variances), rel=1e-15)
    assert ds.noise_floor == pytest.approx(np.mean(readable_variances) / SAMPLES, rel=1e-15)
    assert ds.avg_variances == {i: intact.truth(i)[1] for i in (0, 2, 3)}
    assert ds.aggregate_basis() == "3 of 4 MLPs (1 damaged, left out)"
    assert intact.aggregate_basis() == "all 4 MLPs"

    summary = ds.summary()
    assert list(summary["index"]) == [0, 1, 2, 3] and list(summary["damaged"]) == [False, True, False, False]
    row = summary.iloc[1]
    assert row["damage"] == damage.problem and row["mlp_name"] == damage.name and row["mlp_seed"] == SEEDS[1]
    assert np.isnan(row["avg_variance"]) and np.isnan(row["final_mean_avg"])
    good = intact.summary().drop(index=1).reset_index(drop=True)
    mine = summary.drop(index=1).reset_index(drop=True)[good.columns]
    pd.testing.assert_frame_equal(mine, good, check_dtype=False)


def _write_npz(path, **arrays):
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)


def _record_like(compact_dir, **overrides):
    rec = _compact.read_mlp_record(compact_dir, 2)
    arrays = {"all_layer_means": rec["all_layer_means"], "avg_variance": np.float64(rec["avg_variance"]),
              "weights_sha256": np.array(rec["weights_sha256"]), "provenance": np.array(json.dumps(rec["provenance"]))}
    arrays.update(overrides)
    return {k: v for k, v in arrays.items() if v is not None}


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda p, src: p.write_bytes(b""), "the file is empty (0 bytes)"),
        (lambda p, src: p.write_bytes(b"not an archive at all"), "not an .npz archive (it starts with b'not '"),
        (lambda p, src: np.save(open(p, "wb"), np.zeros(3)), "not an .npz archive (it starts with b'\\x93NUM'"),
        (lambda p, src: _write_npz(p, **_record_like(src, provenance=None)), "lacks provenance"),
        (lambda p, src: _write_npz(p, **_record_like(src, all_layer_means=np.zeros((DEPTH, WIDTH + 1), np.float32))),
         f"all_layer_means has shape ({DEPTH}, {WIDTH + 1}), expected ({DEPTH}, {WIDTH})"),
        (lambda p, src: _write_npz(p, **_record_like(src, all_layer_means=np.zeros((DEPTH, 100 * WIDTH), np.float32))),
         "all_layer_means declares"),
        (lambda p, src: _write_npz(p, **_record_like(src, avg_variance=np.float64("nan"))), "avg_variance is nan"),
        (lambda p, src: _write_npz(p, **_record_like(src, weights_sha256=np.array("x"))), "not a sha256 hex digest"),
        (lambda p, src: _write_npz(p, **_record_like(src, provenance=np.array("[1, 2]"))), "provenance is not a JSON"),
    ],
    ids=["empty", "garbage", "bare-npy", "missing-member", "wrong-shape", "oversized-member", "nan-variance",
         "bad-checksum-field", "provenance-not-object"],
)
def test_every_kind_of_damaged_record_names_its_file_and_reason(tmp_path, compact_dir, damage, reason):
    copy = _copy(compact_dir, tmp_path)
    path = _compact.mlp_path(copy, 2)
    damage(path, compact_dir)
    with pytest.raises(_compact.RecordDamaged) as caught:
        _compact.read_mlp_record(copy, 2, depth=DEPTH, width=WIDTH)
    assert caught.value.path == path and reason in caught.value.reason
    ds = open_dataset(copy)
    assert list(ds.damaged) == [2] and reason in ds.damaged[2].reason and ds.indices == [0, 1, 3]


def test_a_record_the_manifest_does_not_list_is_damaged_not_fatal(tmp_path, compact_dir):
    import shutil

    copy = _copy(compact_dir, tmp_path)
    shutil.copyfile(_compact.mlp_path(copy, 0), _compact.mlp_path(copy, 9))
    ds = open_dataset(copy)
    assert ds.indices == [0, 1, 2, 3] and list(ds.damaged) == [9]
    assert ds.damaged[9].reason == "the manifest lists only 4 MLPs (0..3)" and ds.damaged[9].name is None
    assert ds.summary()["index"].tolist() == [0, 1, 2, 3, 9]


@pytest.mark.parametrize(
    "mangle, message",
    [
        (lambda m: m.pop("width"), "lacks or mangles a field"),
        (lambda m: m.update(mlp_seeds=m["mlp_seeds"][:2]), "mlp_seeds must list n_mlps = 4"),
        (lambda m: m.update(n_samples="many"), "lacks or mangles a field"),
    ],
)
def test_a_mangled_manifest_is_one_clear_error(tmp_path, compact_dir, mangle, message):
    copy = _copy(compact_dir, tmp_path)
    manifest = _compact.read_manifest(copy)
    mangle(manifest)
    _compact.manifest_path(copy).write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match=message):
        open_dataset(copy)


def test_an_unreadable_parquet_row_group_damages_only_its_mlps(tmp_path, official):
    """A corrupt page in row group 1 of 2: its two MLPs are damaged, the other two are served as before."""
    import pyarrow.parquet as pq

    from whestboard.data._datasets import MLPDamaged

    intact = open_dataset(official)
    copy = _copy(official, tmp_path)
    (file,) = sorted((copy / "data").glob("*.parquet"))
    pq.write_table(pq.read_table(file), file, row_group_size=2, compression="none")
    meta = pq.ParquetFile(file).metadata
    group = meta.row_group(1)
    (chunk,) = [group.column(j) for j in range(group.num_columns)
                if group.column(j).path_in_schema.startswith("all_layer_means.")]
    offset = chunk.data_page_offset
    with open(file, "r+b") as fh:
        fh.seek(offset)
        fh.write(b"\xff" * 32)  # the page header: no reader gets past it
    ds = open_dataset(copy)
    assert ds.indices == [0, 1] and list(ds.damaged) == [2, 3]
    assert ds.damaged[2].path == file and ds.damaged[2].reason.startswith("row group 1 (rows 2..3) cannot be read (")
    assert "Re-download" in ds.damaged[2].remedy
    with pytest.raises(MLPDamaged, match="MLP 3 of copy is damaged"):
        ds.truth(3)
    for i in (0, 1):
        np.testing.assert_array_equal(ds.truth(i)[0], intact.truth(i)[0])
        np.testing.assert_array_equal(ds.weights(i), intact.weights(i))
        assert ds.estimator_seed(i) == intact.estimator_seed(i) and ds.mlp_name(i) == intact.mlp_name(i)
    summary = ds.summary()
    assert summary["damaged"].tolist() == [False, False, True, True] and summary["mlp_seed"].isna().tolist()[2:] == [
        True, True]


def test_an_unreadable_parquet_footer_is_a_clear_dataset_error(tmp_path, official):
    copy = _copy(official, tmp_path)
    (file,) = sorted((copy / "data").glob("*.parquet"))
    _truncate(file)
    with pytest.raises(DatasetError, match=f"{file}: not a readable parquet file .*re-download it"):
        open_dataset(copy)


def test_the_registry_notices_a_record_damaged_and_repaired_in_place(tmp_path, compact_dir, monkeypatch):
    """In place: the folders' modification times do not move, only the file's size and time do."""
    from server import health
    from whestboard.data import _registry
    from whestboard.data._mlp_stats import summary_for

    root = tmp_path / "data"
    root.mkdir()
    copy = _copy(compact_dir, root)
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(root))
    monkeypatch.setenv("WHESTBOARD_DATASETS", "")
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    assert not _registry.get_dataset("copy").damaged
    assert summary_for(_registry.get_dataset("copy"))["damaged"].sum() == 0

    path = _compact.mlp_path(copy, 3)
    good = path.read_bytes()
    folder_times = (copy.stat().st_mtime_ns, path.parent.stat().st_mtime_ns)
    _truncate(path)
    assert (copy.stat().st_mtime_ns, path.parent.stat().st_mtime_ns) == folder_times
    ds = _registry.get_dataset("copy")
    assert list(ds.damaged) == [3] and summary_for(ds)["damaged"].tolist() == [False, False, False, True]
    report = health.check()
    assert report["ok"] is True and report["degraded"] is True
    assert report["checks"]["datasets"]["damaged"] == {"copy": {str(path): ds.damaged[3].reason}}
    assert _registry.damaged_mlps() == {"copy": [ds.damaged[3]]}

    with open(path, "r+b") as fh:  # repaired in place, as `cp good-copy 00003.npz` does
        fh.write(good)
    repaired = _registry.get_dataset("copy")
    assert not repaired.damaged and repaired.indices == [0, 1, 2, 3]
    assert summary_for(repaired)["damaged"].sum() == 0
    report = health.check()
    assert report["degraded"] is False and report["checks"]["datasets"]["damaged"] == {}


def test_an_unopenable_dataset_stays_broken_and_healthz_stays_up(tmp_path, monkeypatch):
    from server import health

    root = tmp_path / "data"
    (root / "broken").mkdir(parents=True)
    (root / "broken" / _compact.MANIFEST_NAME).write_text("{")
    monkeypatch.setenv("WHESTBOARD_DATA_DIR", str(root))
    monkeypatch.setenv("WHESTBOARD_DATASETS", "")
    monkeypatch.setenv("WHESTBOARD_STATE_DIR", str(tmp_path / "state"))
    report = health.check()
    datasets = report["checks"]["datasets"]
    assert report["ok"] is False and datasets["ok"] is False and datasets["served"] == []
    assert "not valid JSON" in datasets["broken"]["broken"] and datasets["damaged"] == {}


def test_reading_an_official_mlp_keeps_no_arrow_buffers(official):
    """A dataset keeps its parquet files open; none of them may keep the raw pages of the row group it
    last read (pyarrow's pre-buffering does, ~105 MB per 1024 x 16 MLP), only the copied-out weights."""
    gc.collect()
    before = pa.total_allocated_bytes()
    ds = open_dataset(official)
    weights = ds.weights(0)
    ds.mlp(1)
    gc.collect()
    assert pa.total_allocated_bytes() - before < weights.nbytes // 4


def test_one_dataset_identity_reads_band_manifests_written_before_it():
    """The shipped bands' manifests name the reference samples ``reference_samples``: still the same dataset."""
    import json

    from whestboard.data import dataset_identity, _registry, same_dataset
    from whestboard.data._registry import data_dir

    dataset = _registry.get_dataset("v1-phase1")
    stored = json.loads((data_dir() / "v1-phase1" / "band" / "band.json").read_text())["dataset"]
    ident = dataset_identity(dataset)
    assert "reference_samples" in stored and ident["n_samples"] == stored["reference_samples"]
    assert same_dataset(stored, ident)
    assert not same_dataset(stored | {"reference_samples": stored["reference_samples"] // 2}, ident)
    assert not same_dataset(stored | {"width": 2 * stored["width"]}, ident)


def test_dataset_identity_of_chosen_mlps_hashes_only_their_references(tmp_path):
    from whestboard.data import dataset_identity, open_dataset
    from whestboard.data._bake import bake, plan_from_args

    plan = plan_from_args(round_tag=None, width=8, depth=2, n_mlps=3, n_samples=256, seeds=[1, 2, 3])
    bake(tmp_path / "d", plan, show_progress=False, explicit_seeds=True)
    dataset = open_dataset(tmp_path / "d")
    whole = dataset_identity(dataset)
    assert "references_sha256" not in whole and whole["n_samples"] == 256 and whole["width"] == 8
    first, both = dataset_identity(dataset, [0]), dataset_identity(dataset, [0, 1])
    assert first["references_sha256"] != both["references_sha256"]
    assert dataset_identity(dataset, [0]) == first
    assert {k: v for k, v in first.items() if k != "references_sha256"} == whole
