"""Task runners for the training fan-out: threads by default, a real Dask cluster on loopback."""

from __future__ import annotations

import threading

import pytest

from flows.runners import fan_out, task_runner

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("runners")]


@pytest.fixture(scope="module")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture
def no_runner_env(monkeypatch):
    for name in ("RAPTOR_DASK_ADDRESS", "RAPTOR_TASK_RUNNER", "RAPTOR_MAX_WORKERS", "RAPTOR_DASK_WORKERS"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture(scope="module")
def dask_cluster():
    from distributed import LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://", host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    try:
        yield cluster
    finally:
        cluster.close()


def train_one(variant: str, seed: int) -> dict:
    """Stands in for one (variant, seed) training task; says where it ran."""
    try:
        from distributed import get_worker

        worker = get_worker().address
    except ValueError:
        worker = None
    return {"variant": variant, "seed": seed, "score": seed * 10 + len(variant), "worker": worker,
            "thread": threading.get_ident()}


def boom(seed: int) -> int:
    if seed == 2:
        raise RuntimeError(f"seed {seed} diverged")
    return seed


GRID = [{"variant": v, "seed": s} for v in ("pure_rl", "raptor") for s in range(3)]


def test_task_runner_choice(no_runner_env):
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    assert isinstance(task_runner(), ThreadPoolTaskRunner)
    assert task_runner(max_workers=3)._max_workers == 3
    r = task_runner(address="tcp://127.0.0.1:8786")
    assert isinstance(r, DaskTaskRunner) and r.address == "tcp://127.0.0.1:8786"
    no_runner_env.setenv("RAPTOR_DASK_ADDRESS", "tcp://127.0.0.1:9999")
    assert task_runner().address == "tcp://127.0.0.1:9999"
    assert isinstance(task_runner("thread"), ThreadPoolTaskRunner)  # an explicit kind wins
    no_runner_env.delenv("RAPTOR_DASK_ADDRESS")
    local = task_runner("dask")
    assert local.address is None and local.cluster_kwargs["host"] == "127.0.0.1"
    assert local.cluster_kwargs["dashboard_address"].startswith("127.0.0.1:")
    with pytest.raises(ValueError, match="kind 'ray'"):
        task_runner("ray")
    no_runner_env.setenv("RAPTOR_MAX_WORKERS", "zero")
    with pytest.raises(ValueError, match="RAPTOR_MAX_WORKERS"):
        task_runner()


def test_fan_out_threads(prefect_api, no_runner_env):
    results = fan_out(train_one, GRID, task_runner(max_workers=2))
    assert [(r["variant"], r["seed"]) for r in results] == [(g["variant"], g["seed"]) for g in GRID]
    assert all(r["worker"] is None for r in results)
    assert fan_out(train_one, []) == []


def test_fan_out_on_dask_cluster(prefect_api, dask_cluster, no_runner_env):
    no_runner_env.setenv("RAPTOR_DASK_ADDRESS", dask_cluster.scheduler_address)
    assert dask_cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    results = fan_out(train_one, GRID)  # the runner comes from RAPTOR_DASK_ADDRESS
    assert [r["score"] for r in results] == [s * 10 + len(v) for v in ("pure_rl", "raptor") for s in range(3)]
    workers = {r["worker"] for r in results}
    assert None not in workers and workers <= set(dask_cluster.scheduler_info["workers"])


def test_fan_out_local_dask_cluster_and_failure(prefect_api, no_runner_env):
    no_runner_env.setenv("RAPTOR_DASK_PROCESSES", "false")
    results = fan_out(train_one, GRID[:2], task_runner("dask"))
    assert [r["seed"] for r in results] == [0, 1] and all(r["worker"] for r in results)
    with pytest.raises(RuntimeError, match="seed 2 diverged"):
        fan_out(boom, [{"seed": s} for s in range(4)], task_runner("thread"))


def test_label_parts_on_dask_cluster(prefect_api, dask_cluster, no_runner_env, tiny_raw, tmp_path):
    """labeling.partitions > 1: the label flow maps its parts over the Dask cluster of
    RAPTOR_DASK_ADDRESS and merges them into the same table as one piece."""
    from flows.stages import label_flow
    from raptor.pipeline.stages import resolve_params
    from raptor.data.graph import build_graph
    from raptor.data.ingest import ingest
    from raptor.labeling.stage import label_dataset
    from raptor.labeling.store import load_label_table

    no_runner_env.setenv("RAPTOR_DASK_ADDRESS", dask_cluster.scheduler_address)
    ingest(tiny_raw, tmp_path / "data")
    build_graph(tmp_path / "data", tmp_path / "graph.npz")
    src = tmp_path / "params.yaml"
    src.write_text("datasets:\n  TINY: {raw_dir: raw}\nlabeling: {partitions: 3}\n")
    resolved = tmp_path / "build" / "params.json"
    resolve_params(src, tmp_path / "params.local.yaml", resolved)
    out = tmp_path / "labels"
    summary = label_flow("TINY", str(resolved), {"data": str(tmp_path / "data"), "graph": str(tmp_path / "graph.npz")},
                         {"out": str(out)})
    assert summary["parts"] == ["part-00000", "part-00001", "part-00002"]
    assert None not in summary["part_workers"] and set(summary["part_workers"]) <= set(dask_cluster.scheduler_info["workers"])
    label_dataset(tmp_path / "data", tmp_path / "one", max_path_length=3, show_progress=False)
    assert load_label_table(out).to_dict() == load_label_table(tmp_path / "one").to_dict()
    assert not (tmp_path / "labels.parts").exists()
