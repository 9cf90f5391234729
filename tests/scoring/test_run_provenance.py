"""Every run made here records the installed whestbench and flopscope and its suite's seed protocol."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest
import sqlalchemy

from tests.upstream import make_official
from whestboard import config
from whestboard.data import open_dataset
from whestboard.scoring import _run_records, _runs, resolve_estimator, rulebook_for
from whestboard.store import engine, reset_engines

pytestmark = [pytest.mark.filterwarnings("ignore::whestbench.scoring.ScoringExhaustionWarning"),
              pytest.mark.usefixtures("private_state")]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = make_official(tmp_path_factory.mktemp("prov") / "ds", width=16, depth=2, n_samples=500, seeds=[5, 6])
    return open_dataset(path)


def _run(dataset) -> str:
    request = _runs.RunRequest(dataset, "0:2", resolve_estimator("mean"), rulebook_for(None), source="cli")
    return _runs.run_and_record(request).run_id


def test_a_run_records_the_installed_versions_and_its_suites_seed_protocol(dataset):
    run_id = _run(dataset)
    listed = {r["run_id"]: r for r in _run_records.list_runs()}[run_id]
    assert listed["whestbench_version"] == version("whestbench")
    assert listed["flopscope_version"] == version("flopscope")
    assert listed["seed_protocol"] == dataset.info.seed_protocol
    assert json.loads(open(dataset.info.path / "metadata.json").read())["seed_protocol"]["version"] == \
        listed["seed_protocol"]
    assert listed["rescore_of"] is None
    report = _run_records.get_run(run_id)
    assert report["versions"]["flopscope_version"] == version("flopscope")
    assert report["dataset"]["seed_protocol"] == dataset.info.seed_protocol


def test_a_runs_table_made_before_the_columns_opens_and_gains_them(dataset):
    url = config.database_url()
    old = sqlalchemy.create_engine(url)
    with old.begin() as conn:
        conn.execute(sqlalchemy.text("""
            CREATE TABLE runs (run_id VARCHAR(32) PRIMARY KEY, created_at TIMESTAMP, cache_key VARCHAR(64),
                dataset_key VARCHAR(200), round_tag VARCHAR(40), estimator_label VARCHAR(300),
                estimator_kind VARCHAR(20), code_sha256 VARCHAR(64), team VARCHAR(200), source VARCHAR(20),
                budget BIGINT, mlp_indices TEXT, n_mlps INTEGER, mean_flops_used FLOAT,
                mean_effective_compute FLOAT, final_layer_mse FLOAT, all_layers_mse FLOAT, adjusted_score FLOAT,
                mean_multiplier FLOAT, n_failed INTEGER, per_layer_mse TEXT, noise_floor FLOAT,
                whestbench_version VARCHAR(40), flopscope_version VARCHAR(40), report TEXT, predictions BLOB)"""))
        conn.execute(sqlalchemy.text("""
            INSERT INTO runs VALUES ('old', '2026-05-01 12:00:00', NULL, 'k', NULL, 'mean', 'builtin', 'x', NULL,
                'cli', 1, '[0]', 1, 1.0, 1.0, 1e-4, 1e-4, 1e-5, 0.1, 0, '[1e-4]', NULL, '0.16.0', '0.12.0', '{}',
                NULL)"""))
    old.dispose()
    reset_engines()
    run_id = _run(dataset)
    columns = {c["name"] for c in sqlalchemy.inspect(engine()).get_columns("runs")}
    assert {"seed_protocol", "rescore_of"} <= columns
    listed = {r["run_id"]: r for r in _run_records.list_runs()}
    assert (listed["old"]["whestbench_version"], listed["old"]["flopscope_version"]) == ("0.16.0", "0.12.0")
    assert listed["old"]["seed_protocol"] is None  # unknown: that run predates the record
    assert listed[run_id]["seed_protocol"] == dataset.info.seed_protocol
