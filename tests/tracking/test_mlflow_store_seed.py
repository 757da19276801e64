"""A new local MLflow store is a copy of an empty one made once per MLflow version (start-up: MLflow's schema
migration runs once per machine, not once per run): the copy is at MLflow's schema version, its Default experiment
is MLflow's own for the copy's directory, and a store that exists is never touched."""

from __future__ import annotations

import sqlite3

from rlhf.tracking.mlflow_tracker import _client


def _schema(db) -> tuple[str, list[str]]:
    with sqlite3.connect(db) as c:
        version = c.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        tables = sorted(r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    return version, tables


def test_a_seeded_store_matches_one_mlflow_makes_and_keeps_its_own_default_location(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_CACHE", str(tmp_path / "cache"))
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    monkeypatch.chdir(first)
    _client(f"sqlite:///{first / 'mlflow.db'}").search_experiments()  # makes the template, then seeds from it
    assert (tmp_path / "cache" / "mlflow").is_dir()
    monkeypatch.chdir(second)
    client = _client(f"sqlite:///{second / 'mlflow.db'}")
    (default,) = client.search_experiments()
    assert default.name == "Default" and default.artifact_location == str(second / "mlruns" / "0")
    exp = client.create_experiment("rlhf")
    run = client.create_run(exp)
    client.log_metric(run.info.run_id, "loss", 1.5, step=3)
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [1.5]

    from mlflow import MlflowClient

    fresh = tmp_path / "fresh.db"
    MlflowClient(tracking_uri=f"sqlite:///{fresh}").search_experiments()  # MLflow's own, no template
    assert _schema(second / "mlflow.db") == _schema(fresh)


def test_an_existing_store_is_opened_as_it_is(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHF_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    exp = _client(uri).create_experiment("kept")
    assert _client(uri).get_experiment(exp).name == "kept"
