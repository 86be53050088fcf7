"""flows.invocation: when a stage runs as a Prefect flow, and the invocation a stage run without Prefect
belongs to (the end-to-end runs are in test_pipeline.py)."""

from __future__ import annotations

import json

import pytest

from flows import invocation


@pytest.fixture
def no_prefect(tmp_path, monkeypatch):
    """No Prefect API, no Dask runner, no setting; an empty PREFECT_HOME; cwd = a project folder."""
    for name in ("PREFECT_API_URL", "PREFECT_PROFILE", "PREFECT_PROFILES_PATH", "RAPTOR_PREFECT",
                 "RAPTOR_DASK_ADDRESS", "RAPTOR_TASK_RUNNER"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / ".prefect"))
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_a_stage_runs_without_prefect_only_where_no_prefect_api_is_configured(no_prefect, tmp_path):
    assert not invocation.use_prefect()  # a plain `dvc repro`: DVC orchestrates
    no_prefect.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")  # python -m flows.server -- dvc repro
    assert invocation.use_prefect()
    no_prefect.setenv("RAPTOR_PREFECT", "0")
    assert not invocation.use_prefect()
    no_prefect.delenv("PREFECT_API_URL")
    for value, expected in (("1", True), ("auto", False), ("", False)):
        no_prefect.setenv("RAPTOR_PREFECT", value)
        assert invocation.use_prefect() is expected, value
    no_prefect.setenv("RAPTOR_PREFECT", "sometimes")
    with pytest.raises(ValueError, match="RAPTOR_PREFECT='sometimes'"):
        invocation.use_prefect()
    no_prefect.delenv("RAPTOR_PREFECT")
    no_prefect.setenv("RAPTOR_DASK_ADDRESS", "tcp://10.0.0.5:8786")  # a Dask runner is a Prefect task runner
    assert invocation.use_prefect()


def test_a_server_set_in_the_active_prefect_profile_counts(no_prefect, tmp_path):
    """`prefect config set PREFECT_API_URL=...` writes the active profile, not the environment."""
    home = tmp_path / ".prefect"
    home.mkdir()
    (home / "profiles.toml").write_text('active = "local"\n\n[profiles.local]\n'
                                        'PREFECT_API_URL = "http://127.0.0.1:4200/api"\n\n[profiles.ephemeral]\n')
    assert invocation.use_prefect()
    no_prefect.setenv("PREFECT_PROFILE", "ephemeral")
    assert not invocation.use_prefect()


def test_the_stages_of_one_dvc_process_share_one_invocation_id(no_prefect, tmp_path):
    first = {"pid": 4242, "start": 1000, "command": "dvc repro"}
    inv = invocation.invocation_outside_prefect(first)
    assert invocation.invocation_outside_prefect(dict(first)) == inv  # the next stage of the same dvc repro
    rec = json.loads((tmp_path / "build" / "pipeline-run.json").read_text())
    assert rec == {"dvc_pid": 4242, "dvc_start": 1000, "command": "dvc repro", "invocation_id": inv}
    # another dvc repro (a new process, or the same pid reused later): another invocation
    assert invocation.invocation_outside_prefect({**first, "start": 2000}) not in (inv, None)
    assert invocation.invocation_outside_prefect({**first, "pid": 4343}) != inv


def test_a_stage_without_prefect_names_its_invocation_in_its_mlflow_runs(no_prefect, tmp_path, monkeypatch, capsys):
    """run_stage_plain: the flow's function called directly, its runs tagged with the `dvc repro` it
    runs under (none by hand), and its start and end in the log."""
    from tasks import tracking

    seen = []

    def stage(dataset: str) -> str:
        seen.append(tracking.prefect_ids())
        return dataset

    monkeypatch.setattr(invocation, "dvc_process", lambda: {"pid": 7, "start": 8, "command": "dvc repro"})
    try:
        assert invocation.run_stage_plain(stage, {"dataset": "SYN"}, "graph-SYN") == "SYN"
        monkeypatch.setattr(invocation, "dvc_process", lambda: None)
        invocation.run_stage_plain(stage, {"dataset": "SYN"}, "graph-SYN")
    finally:
        from tasks.invocation import set_invocation

        set_invocation(None)
    recorded = json.loads((tmp_path / "build" / "pipeline-run.json").read_text())["invocation_id"]
    assert seen == [{"pipeline_run_id": recorded}, {}]
    err = capsys.readouterr().err
    assert "Beginning stage 'graph-SYN' (without Prefect" in err and "Finished stage 'graph-SYN' in " in err
