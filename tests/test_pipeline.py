"""End to end: `dvc repro` of the whole pipeline on a tiny synthetic dataset (smoke profile), through
the Prefect flows on a real local Prefect API, with a real local MLflow store; what DVC reports after
a code or params change; the Prefect pipeline flow agreeing with DVC; then the ablation."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import free_port, http_json, stack_env

from raptor.pipeline import stages
from raptor.config import params_from_dict
from raptor.common.resources import read_usage
from raptor.pipeline.stages import USAGE_LOG
from raptor.data.dataset import load_dataset
from raptor.data.graph import TemporalGraph
from raptor.data.synthetic import SyntheticSpec, write_raw

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("pipeline")]

#: The test's own params (not the repo's params.yaml): one dataset, the four systems, a small profile.
PARAMS = {
    "profile": "paper",
    "datasets": {"SYNTH": {"raw_dir": None, "start_date": "2020-01-01"}},
    "train": {"variants": ["pure_rl", "raptor", "titer", "recurrency"]},
    "profiles": {"small": {
        "model.entity_dim": 16, "model.relation_dim": 16, "model.time_dim": 4, "model.step_dim": 4,
        "model.mlp_hidden_dim": 32, "env.max_actions": 20, "pretrain.epochs": 2, "pretrain.batch_size": 256,
        "rl.epochs": 2, "rl.batch_size": 256, "eval.beam_size": 10, "eval.valid_every": 1, "train.seeds": [0, 1],
        "train.num_threads": 1, "ablation.pretrain_epochs": [0, 1], "ablation.seeds": [0],
        "titer.entity_dim": 16, "titer.relation_dim": 12, "titer.time_dim": 4, "titer.state_dim": 12,
        "titer.mlp_hidden_dim": 12, "titer.batch_size": 256}},
    "sweeps": {"t": {"base": {"train.seeds": [0]}, "variants": ["pure_rl", "raptor"], "grid": {"rl.gamma": [0.9]}}},
}


def _env(project: Path, api_url: str) -> dict:
    return stack_env(project / ".prefect", api_url, project / "mlflow.db", GIT_AUTHOR_NAME="t",
                     GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")


def _run(cmd: list[str], cwd: Path, env: dict) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout + proc.stderr


def _pipeline(proj: Path, env: dict) -> dict:
    """``python -m flows pipeline``: its result (the last line it prints to stdout)."""
    proc = subprocess.run([sys.executable, "-m", "flows", "pipeline"], cwd=proj, env=env, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _status(proj: Path, env: dict) -> set[str]:
    out = _run(["dvc", "status", "--json"], proj, env).strip().splitlines()[-1]
    return set(json.loads(out)) - {"params"}  # the params stage is always changed (it resolves params)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A throwaway project: a copy of this repo's code (so a test may change a line of it), its
    generated dvc.yaml files, the test's params with the small profile selected in params.local.yaml,
    and a Prefect server."""
    proj = tmp_path_factory.mktemp("project")
    raw = write_raw(proj.parent / "raw-synth", SyntheticSpec(seed=3))
    shutil.copytree(ROOT / "raptor", proj / "raptor", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    params = json.loads(json.dumps(PARAMS))
    params["datasets"]["SYNTH"]["raw_dir"] = str(raw)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (proj / "ablation").mkdir()
    p = params_from_dict(params)
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(p))
    (proj / "ablation" / "dvc.yaml").write_text(stages.dvc_yaml(p, ablation=True))
    stages.select_profile(proj / "params.yaml", "small")
    (proj / ".gitignore").write_text("".join(f"/{n}\n" for n in ("data", "runs", "reports", "build", ".prefect",
                                                                 "mlruns", "mlflow.db", "params.local.yaml")))

    port = free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = _env(proj, api)
    server = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 90
        while True:
            try:
                urllib.request.urlopen(f"{api}/health", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("the Prefect server did not come up")
                time.sleep(0.5)
        _run(["git", "init", "-q"], proj, env)
        _run(["dvc", "init", "-q"], proj, env)
        _run(["git", "add", "-A"], proj, env)
        _run(["git", "commit", "-qm", "init"], proj, env)
        yield proj, env, api
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def _flow_runs(api: str, **flow_runs_filter) -> list[dict]:
    return http_json(f"{api}/flow_runs/filter", {"flow_runs": flow_runs_filter} if flow_runs_filter else {})


def _parent_run(api: str, flow_run: dict) -> dict | None:
    """The flow run that ``flow_run`` is a subflow of (through its tracking task run), or None."""
    if not flow_run["parent_task_run_id"]:
        return None
    task = http_json(f"{api}/task_runs/{flow_run['parent_task_run_id']}")
    return http_json(f"{api}/flow_runs/{task['flow_run_id']}")


def _invocation(api: str, new_runs: list[dict]) -> dict:
    """The one parent run of the stage flow runs ``new_runs`` of a `dvc repro` (checked: every one of
    them is its subflow and carries its tag ``pipeline-<id>``), as Prefect's REST API returns it."""
    parents = {p["id"]: p for p in (_parent_run(api, r) for r in new_runs) if p}
    assert len(parents) == 1, sorted(p["name"] for p in parents.values())
    parent = next(iter(parents.values()))
    tag = f"pipeline-{parent['id'].replace('-', '')[:8]}"
    assert parent["name"] == "pipeline-SYNTH" and parent["state_type"] == "COMPLETED" and tag in parent["tags"]
    stages = [r for r in new_runs if r["id"] != parent["id"]]
    assert stages and all(_parent_run(api, r)["id"] == parent["id"] and tag in r["tags"] for r in stages), \
        [(r["name"], r["tags"]) for r in stages]
    # the UI's tag filter finds exactly this invocation
    assert {r["id"] for r in _flow_runs(api, tags={"all_": [tag]})} == {r["id"] for r in new_runs}
    return parent


MAIN = ["params", "ingest@SYNTH", "graph@SYNTH", "label@SYNTH", "pretrain@SYNTH", "finetune-pure_rl@SYNTH",
        "evaluate-pure_rl@SYNTH", "finetune-raptor@SYNTH", "evaluate-raptor@SYNTH", "finetune-titer@SYNTH",
        "evaluate-titer@SYNTH", "finetune-recurrency@SYNTH", "evaluate-recurrency@SYNTH", "significance@SYNTH",
        "report@SYNTH"]
SYSTEMS = (("pure_rl", "Pure-RL"), ("raptor", "RL-RAPTOR"), ("titer", "TITer-150"), ("recurrency", "Recurrency"))


def test_dvc_repro_end_to_end(project):
    proj, env, api = project
    before = {r["id"] for r in _flow_runs(api)}
    out = _run(["dvc", "repro"], proj, env)
    for stage in MAIN:
        assert f"Running stage '{stage}'" in out, stage
    # Prefect: the stages of this `dvc repro` are subflows of one parent run, `pipeline-SYNTH`.
    new_runs = [r for r in _flow_runs(api) if r["id"] not in before]
    assert len(new_runs) == len(MAIN)  # 14 stage flows (params is no flow) and their parent
    invocation = _invocation(api, new_runs)

    # Data stages.
    ds = load_dataset(proj / "data/SYNTH/ingested")
    graph = TemporalGraph.load(proj / "data/SYNTH/graph.npz")
    assert graph.num_edges == 2 * len(ds.all_quadruples())
    assert json.loads((proj / "data/SYNTH/labels/summary.json").read_text())["rows"] > 0

    # The resolved params are the small profile's: DVC tracked those values, not the file's keys.
    lock = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]
    assert lock["finetune-raptor@SYNTH"]["params"]["build/params.json"]["rl.epochs"] == 2

    # RAPTOR fine-tuned from the pretrain stage's checkpoint; Pure-RL and TITer-150 from scratch.
    for seed in (0, 1):
        summary = json.loads((proj / f"runs/SYNTH/raptor/train/seed{seed}/summary.json").read_text())
        assert summary["pretrain_epochs"] == 2 and summary["rl_epochs"] == 2
        assert (proj / f"runs/SYNTH/pretrain/seed{seed}/pretrained-e2.pt").is_file()
        for scratch in ("pure_rl", "titer", "recurrency"):
            summary = json.loads((proj / f"runs/SYNTH/{scratch}/train/seed{seed}/summary.json").read_text())
            # the training-free recurrency baseline has no epoch budget
            assert summary["pretrain_epochs"] == 0 and summary["rl_epochs"] == (0 if scratch == "recurrency" else 2)
    # TITer-150 is TITer's agent with its own dims (the titer section), not the actor-critic policy
    from raptor.agents.base import load_model

    titer, meta = load_model(proj / "runs/SYNTH/titer/train/seed0/best.pt")
    assert meta["architecture"] == "titer" and titer.config.entity_dim == 16

    # Evaluation outputs agree with the per-variant summaries and the report.
    n_test = 2 * len(ds.splits["test"])
    table = {r["model"]: r for r in csv.DictReader((proj / "reports/SYNTH/report/main_table.csv").open())}
    for variant, row_name in SYSTEMS:
        summary = json.loads((proj / f"runs/SYNTH/{variant}/metrics.json").read_text())
        per_seed = [json.loads((proj / f"runs/SYNTH/{variant}/eval/seed{s}/metrics.json").read_text()) for s in (0, 1)]
        assert all(m["queries"]["total"] == n_test for m in per_seed)
        assert summary["mrr"] == pytest.approx(sum(m["mrr"] for m in per_seed) / 2)
        ours = next(r for k, r in table.items() if k.startswith(f"{row_name} (ours"))
        assert ours["mrr"].startswith(f"{100 * summary['mrr']:.2f}")
    sig = json.loads((proj / "reports/SYNTH/significance.json").read_text())
    assert sig["baseline"] == "pure_rl" and sig["comparisons"]["raptor"]["seeds"] == [0, 1]
    assert sig["comparisons"]["titer"]["seeds"] == [0, 1] and sig["comparisons"]["recurrency"]["seeds"] == [0, 1]
    assert (proj / "reports/SYNTH/report/training_efficiency.png").stat().st_size > 1000
    # The results page reads the workspace as a user's `raptor results --untracked` draft does.
    page = proj.parent / "results" / "results.md"
    _run([sys.executable, "-m", "raptor.cli", "results", f"smoke={proj}", "--out", str(page), "--untracked"], proj, env)
    rows = {line.split(" | ")[2]: line for line in page.read_text().splitlines() if line.startswith("| smoke | SYNTH")}
    for variant, row_name in SYSTEMS:
        mrr = json.loads((proj / f"runs/SYNTH/{variant}/metrics.json").read_text())["mrr"]
        epochs = "| none |" if variant == "recurrency" else "| 2 of 2 |"
        assert f"| {100 * mrr:.2f} ± " in rows[row_name] and epochs in rows[row_name]

    # Every output the declaration names exists, and the stages wrote nothing anywhere else.
    declared = [Path(path) for _, _, path in stages.outputs(params_from_dict(yaml.safe_load(
        (proj / "params.yaml").read_text())))]
    main_outs = [p for p in declared if "ablation" not in str(p)]
    assert all((proj / p).exists() for p in main_outs), [str(p) for p in main_outs if not (proj / p).exists()]
    allowed = {Path(p) for p in ("build/params.json", "build/pipeline-run.json", "dvc.lock", "params.local.yaml",
                                 "mlflow.db")}
    for top in ("data", "runs", "reports", "build"):
        for f in (proj / top).rglob("*"):
            rel = f.relative_to(proj)
            if f.is_file() and rel not in allowed:
                assert any(rel == p or p in rel.parents for p in main_outs), f"{rel}: written outside the declared outputs"

    # MLflow: one run per (variant, seed) under a parent per finetune invocation, one per pretraining
    # seed, with params, code version, data hashes, per-epoch metrics, the test metrics and artifacts.
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH")
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if r.data.tags.get("stage") == "finetune" and "seed" in r.data.tags]
    assert len(children) == 8
    flow_run_ids = {f["id"] for f in _flow_runs(api)}
    artifacts = {a["key"]: a for a in http_json(f"{api}/artifacts/filter", {}) if a.get("key")}
    assert sorted(r.data.tags["seed"] for r in runs if r.data.tags.get("stage") == "pretrain") == ["0", "1"]
    for r in children:
        variant, seed = r.data.tags["variant"], int(r.data.tags["seed"])
        # the training-free recurrency baseline has no epoch budget
        assert r.data.params["epochs"] == ("0" if variant == "recurrency" else "2")
        assert r.data.params["profile"] == "small"
        # only its own agent's params (TITer: no model.*/rl.*; actor-critic: no titer.*), resolved precision
        from raptor.agents import variants as registry

        own = tuple(f"{s}." for s in registry.get(variant).params)
        other = tuple(f"{s}." for s in registry.get(variant).unread_params)
        assert any(k.startswith(own) for k in r.data.params) and not any(k.startswith(other) for k in r.data.params)
        assert r.data.params["precision"] in ("float32", "bfloat16", "float64") and "mlflow.source.type" in r.data.tags
        assert len(r.data.tags["git_commit"]) >= 7 or r.data.tags["git_commit"] == "unknown"
        assert "data.sha256.train.txt" in r.data.tags
        # the recurrency baseline trains nothing: one selection, no reward
        rl_epochs = 1 if variant == "recurrency" else 2
        assert len(client.get_metric_history(r.info.run_id, "rl/val_mrr")) == rl_epochs
        assert len(client.get_metric_history(r.info.run_id, "rl/reward")) == (0 if variant == "recurrency" else 2)
        if variant != "recurrency":  # the same epochs on the total-budget axis: RL-RAPTOR's after its pretraining
            total = sorted(m.step for m in client.get_metric_history(r.info.run_id, "total/reward"))
            assert total == ([3, 4] if variant == "raptor" else [1, 2])  # 1-based
        assert r.data.tags["prefect_flow_run_id"] in flow_run_ids
        assert r.info.run_id in artifacts[f"finetune-synth-{variant.replace('_', '-')}"]["data"]
        seed_metrics = json.loads((proj / f"runs/SYNTH/{variant}/eval/seed{seed}/metrics.json").read_text())
        assert r.data.metrics["test/mrr"] == pytest.approx(seed_metrics["mrr"])
        arts = {a.path for a in client.list_artifacts(r.info.run_id)}
        assert {"checkpoint", "predictions", "history"} <= arts
    # Each finetune invocation's parent run holds the aggregates over its seeds, validation and test.
    parents = [r for r in runs if r.data.tags.get("aggregate") == "seeds"]
    assert sorted(r.data.tags["variant"] for r in parents) == ["pure_rl", "raptor", "recurrency", "titer"]
    for r in parents:
        v = r.data.tags["variant"]
        best = [json.loads((proj / f"runs/SYNTH/{v}/train/seed{s}/summary.json").read_text())["best_val_mrr"]
                for s in (0, 1)]
        assert r.data.metrics["best_val_mrr_mean"] == pytest.approx(sum(best) / 2)
        test = json.loads((proj / f"runs/SYNTH/{v}/metrics.json").read_text())
        assert r.data.metrics["test/mrr"] == pytest.approx(test["mrr"])
        assert r.data.metrics["test/mrr_std"] == pytest.approx(test["mrr_std"])
    # RL-RAPTOR's runs carry their pretraining curve (epochs 0, 1), then RL at total epochs 2, 3.
    history = json.loads((proj / "runs/SYNTH/pretrain/seed0/history.json").read_text())
    raptor0 = next(r for r in children if r.data.tags["variant"] == "raptor" and r.data.tags["seed"] == "0")
    curve = sorted((m.step, m.value) for m in client.get_metric_history(raptor0.info.run_id, "pretrain/bce"))
    assert [c[0] - 1 for c in curve] == [h["epoch"] for h in history] == [0, 1]  # steps 1-based
    assert [c[1] for c in curve] == pytest.approx([h["bce"] for h in history])
    assert not any(k.startswith("pretrain/") for r in children if r.data.tags["variant"] != "raptor"
                   for k in r.data.metrics)
    # Every MLflow run of the invocation names its Prefect parent run; one MLflow run per invocation,
    # `pipeline-SYNTH`, is the parent of the stages' runs and holds the significance results and report.
    assert {r.data.tags.get("pipeline_run_id") for r in runs} == {invocation["id"]}
    [pipe] = [r for r in runs if r.data.tags.get("stage") == "pipeline"]
    assert pipe.info.run_name == "pipeline-SYNTH"
    assert sorted(r.data.tags.get("stage") for r in runs if r.data.tags.get("mlflow.parentRunId") == pipe.info.run_id) \
        == ["finetune", "finetune", "finetune", "finetune", "pretrain", "pretrain"]
    assert {a.path for a in client.list_artifacts(pipe.info.run_id)} == {"report", "significance"}
    assert pipe.data.metrics["significance/raptor/mrr_diff"] == pytest.approx(
        sig["comparisons"]["raptor"]["per_query"]["mrr_diff"])

    # Prefect's API saw the stage flows complete, each named for its dataset and variant.
    flow_runs = _flow_runs(api)
    assert not [r for r in flow_runs if r["state_type"] == "FAILED"]
    names = {r["name"] for r in flow_runs if r["state_type"] == "COMPLETED"}
    assert {"ingest-SYNTH", "label-SYNTH", "pretrain-SYNTH", "finetune-SYNTH-raptor", "evaluate-SYNTH-pure_rl",
            "report-SYNTH"} <= names, names

    # Nothing changed: a second repro runs nothing (the params stage depends on params.yaml and
    # params.local.yaml, no longer always changed).
    out = _run(["dvc", "repro"], proj, env)
    assert [s for s in MAIN if f"Running stage '{s}'" in out] == []
    # Another `dvc repro` that runs a stage (one stage, forced, without the params stage): a new parent.
    before = {r["id"] for r in _flow_runs(api)}
    _run(["dvc", "repro", "--force", "--single-item", "significance@SYNTH"], proj, env)
    new_runs = [r for r in _flow_runs(api) if r["id"] not in before]
    again = _invocation(api, new_runs)
    assert again["id"] != invocation["id"] and sorted(r["name"] for r in new_runs) == ["pipeline-SYNTH",
                                                                                       "significance-SYNTH"]
    # it trained nothing: no new MLflow run (the first pipeline run keeps the report of its models)
    pipes = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("stage") == "pipeline"]
    assert [r.data.tags["pipeline_run_id"] for r in pipes] == [invocation["id"]]


def _reproduced(proj: Path, env: dict) -> None:
    """Bring the project up to date (only the params stage runs when an earlier test already did the
    rest), so that a test does not depend on the order pytest-xdist hands the module's tests out in: a
    worker that runs another module's test in between sets this module's fixture up afresh."""
    _run(["dvc", "repro"], proj, env)


def test_dvc_status_follows_code_and_resolved_params(project):
    proj, env, _ = project
    _reproduced(proj, env)
    labeling = proj / "raptor" / "labeling" / "kernels.py"
    original = labeling.read_text()
    try:
        labeling.write_text(original + "\n# a changed line\n")
        assert _status(proj, env) == {"label@SYNTH", "pretrain@SYNTH", "ablation/dvc.yaml:ablation-pretrain@SYNTH",
                                      "ablation/dvc.yaml:ablation@SYNTH"}  # the ablation never ran here
    finally:
        labeling.write_text(original)
    # A local override (no tracked file edited) reaches exactly the stages that read it, once the
    # params stage has resolved it.
    local = proj / "params.local.yaml"
    before = local.read_text()
    try:
        local.write_text(before + "rl.gamma: 0.5\n")
        _run(["dvc", "repro", "params"], proj, env)
        changed = _status(proj, env) - {"ablation/dvc.yaml:ablation-pretrain@SYNTH", "ablation/dvc.yaml:ablation@SYNTH"}
        assert changed == {"finetune-pure_rl@SYNTH", "finetune-raptor@SYNTH"}, changed  # TITer reads no rl.gamma
    finally:
        local.write_text(before)
        _run(["dvc", "repro", "params"], proj, env)
    assert _status(proj, env) <= {"ablation/dvc.yaml:ablation-pretrain@SYNTH", "ablation/dvc.yaml:ablation@SYNTH"}


def test_prefect_pipeline_flow_agrees_with_dvc(project):
    """The scheduled flow asks DVC: on the state `dvc repro` left it runs nothing; after a change it
    runs exactly the stages DVC would, and commits them so that DVC agrees afterwards."""
    proj, env, _ = project
    _reproduced(proj, env)
    result = _pipeline(proj, env)
    assert result["ran"] == [] and result["failed"] == {}  # not even the params stage: nothing changed
    assert set(result["skipped"]) == set(MAIN)

    local = proj / "params.local.yaml"
    before = local.read_text()
    try:
        local.write_text(before + "rl.gamma: 0.5\n")
        result = _pipeline(proj, env)
        assert result["ran"][0] == "params" and set(result["ran"]) == {
            "params", "finetune-pure_rl@SYNTH", "finetune-raptor@SYNTH", "evaluate-pure_rl@SYNTH",
            "evaluate-raptor@SYNTH", "significance@SYNTH", "report@SYNTH"}, result
        assert set(result["skipped"]) == {"ingest@SYNTH", "graph@SYNTH", "label@SYNTH", "pretrain@SYNTH",
                                          "finetune-titer@SYNTH", "evaluate-titer@SYNTH", "finetune-recurrency@SYNTH",
                                          "evaluate-recurrency@SYNTH"}  # TITer and recurrency read no rl.gamma
        assert set(result["stages"]) == set(result["ran"])  # each stage that ran is measured
        for name, used in result["stages"].items():
            assert used["seconds"] > 0 and used["peak_rss_gb"] > 0.01 and used["peak_is_per_stage"], (name, used)
            assert used["released_before"], (name, used)  # earlier stages' freed heap went back to the OS
        logged = read_usage(proj / USAGE_LOG)  # the same measurements, kept on disk for `raptor results`
        for name, used in result["stages"].items():
            assert logged[name]["ok"] and logged[name]["seconds"] == used["seconds"], (name, logged.get(name))
        status = _status(proj, env)
        assert not (status & set(MAIN)), status  # DVC agrees: what the flow ran is committed
    finally:
        local.write_text(before)
        _run(["dvc", "repro"], proj, env)


def test_a_stage_that_reruns_without_training_logs_no_new_runs(project):
    """The seeds listed in another order: DVC re-runs the finetune stages, every run folder is
    complete, nothing trains, and MLflow gets no new run (children nor parents)."""
    import mlflow

    proj, env, _ = project
    _reproduced(proj, env)
    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH")
    before = {r.info.run_id for r in client.search_runs([exp.experiment_id])}
    local = proj / "params.local.yaml"
    text = local.read_text()
    try:
        local.write_text(text + "train.seeds: [1, 0]\n")
        result = _pipeline(proj, env)
        assert {"finetune-pure_rl@SYNTH", "finetune-raptor@SYNTH"} <= set(result["ran"]), result
        assert {r.info.run_id for r in client.search_runs([exp.experiment_id])} == before
    finally:
        local.write_text(text)
        _run(["dvc", "repro"], proj, env)


def _dvc_lock_held(proj: Path) -> bool:
    import zc.lockfile

    try:
        zc.lockfile.LockFile(str(proj / ".dvc/tmp/lock")).close()
        return False
    except zc.lockfile.LockError:
        return True


def test_one_pipeline_at_a_time(project):
    """A pipeline run holds the project lock and DVC's lock from start to end: a second one, or a
    `dvc repro`, started meanwhile stops at once with a clear error; the first finishes and DVC agrees
    with it."""
    proj, env, _ = project
    _reproduced(proj, env)
    local = proj / "params.local.yaml"
    before = local.read_text()
    try:
        local.write_text(before + "rl.gamma: 0.7\n")  # the finetune stages have work to do
        first = subprocess.Popen([sys.executable, "-m", "flows", "pipeline"], cwd=proj, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while not _dvc_lock_held(proj):
            assert first.poll() is None and time.time() < deadline, "the pipeline never took the lock"
            time.sleep(0.2)
        second = subprocess.run([sys.executable, "-m", "flows", "pipeline"], cwd=proj, env=env,
                                capture_output=True, text=True)
        repro = subprocess.run(["dvc", "repro"], cwd=proj, env=env, capture_output=True, text=True)
        assert first.poll() is None, "the first pipeline ended before the others were tried: nothing was tested"
        out, _ = first.communicate(timeout=600)
        assert first.returncode == 0, out[-4000:]
        assert second.returncode == 1
        # refused by the project lock, which the first takes before DVC's (raptor/pipeline/projectlock.py)
        assert "python -m flows pipeline: error: this project is busy: " in second.stderr \
            and ".dvc/tmp/raptor.lock is held by pid " in second.stderr, second.stderr[-2000:]
        assert repro.returncode != 0 and "Unable to acquire lock" in repro.stdout + repro.stderr
        assert not (_status(proj, env) & set(MAIN))  # what the first one ran is committed
    finally:
        local.write_text(before)
        _run(["dvc", "repro"], proj, env)


def test_ablation_pipeline(project):
    proj, env, api = project
    before = {r["id"] for r in _flow_runs(api)}
    out = _run(["dvc", "repro", "ablation/dvc.yaml"], proj, env)
    assert "ablation-pretrain@SYNTH" in out and "Running stage 'ablation/dvc.yaml:ablation@SYNTH'" in out
    arms = json.loads((proj / "reports/SYNTH/ablation/ablation.json").read_text())["arms"]
    assert [a["pretrain_epochs"] for a in arms] == [0, 1]
    for a in arms:  # each arm's best model tested: its test metrics in the report and in its MLflow run
        test = json.loads((proj / f"runs/SYNTH/ablation/eval/p{a['pretrain_epochs']}/seed0/metrics.json").read_text())
        assert a["test_mrr_mean"] == pytest.approx(test["mrr"]) and a["test_mrr_std"] == 0.0
    assert (proj / "reports/SYNTH/ablation/ablation_reward.png").exists()
    assert (proj / "runs/SYNTH/ablation/pretrain/seed0/pretrained-e1.pt").is_file()
    # the results page reads the arms where the pipeline wrote them, with the report's numbers
    from raptor.reporting.results import ablation_rows, discover

    read = {int(r["pretrain epochs"]): r for r in ablation_rows(discover(proj, "smoke"))}
    assert sorted(read) == [0, 1]
    assert all(read[a["pretrain_epochs"]]["MRR"] == f"{100 * a['test_mrr_mean']:.2f}" for a in arms)
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH/ablation-pretrain-epochs")
    every = client.search_runs([exp.experiment_id])
    runs = [r for r in every if "pretrain_epochs" in r.data.tags]
    assert sorted(r.data.tags["pretrain_epochs"] for r in runs) == ["0", "1"]
    assert {r.data.tags["pretrain_epochs"]: r.data.metrics["test/mrr"] for r in runs} == pytest.approx(
        {str(a["pretrain_epochs"]): a["test_mrr_mean"] for a in arms})
    parent = next(r for r in every if r.info.run_id == runs[0].data.tags["mlflow.parentRunId"])
    # the arms are one level down: no pipeline run above the ablation's parent in this experiment
    assert "mlflow.parentRunId" not in parent.data.tags
    assert not [r for r in every if r.data.tags.get("stage") == "pipeline"]
    assert {"report/ablation.csv", "report/ablation_reward.png"} <= {
        a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert all(len(client.get_metric_history(r.info.run_id, "rl/reward")) == 2 for r in runs)
    # The params logged are the arm's own, as numbers: not the config's pretrain.epochs, not the grid's
    # list; `ablation.pretrain_epochs` is the first param in name order (MLflow's compare page plots it).
    assert all(r.data.params["pretrain.epochs"] == r.data.tags["pretrain_epochs"]
               == r.data.params["ablation.pretrain_epochs"] and "pretrain_epochs" not in r.data.params for r in runs)
    assert all(min(r.data.params) == "ablation.pretrain_epochs" for r in runs)
    # Each arm carries its pretraining curve (the pretraining run's first n epochs, at steps 1..n of
    # the total-epoch axis); its RL epochs follow at n+1, n+2.
    history = json.loads((proj / "runs/SYNTH/ablation/pretrain/seed0/history.json").read_text())
    for r in runs:
        n = int(r.data.tags["pretrain_epochs"])
        curve = sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "pretrain/bce"))
        assert [c[0] - 1 for c in curve] == [h["epoch"] for h in history[:n]] == list(range(n))
        assert [c[1] for c in curve] == pytest.approx([h["bce"] for h in history[:n]])
        assert len(client.get_metric_history(r.info.run_id, "pretrain/label_accuracy")) == n
        assert sorted(m.step for m in client.get_metric_history(r.info.run_id, "total/reward")) == [n + 1, n + 2]
    # One Prefect parent run for this `dvc repro`, new (not the main pipeline's), its stages as subflows.
    new_runs = [r for r in _flow_runs(api) if r["id"] not in before]
    invocation = _invocation(api, new_runs)
    assert {"ablation-pretrain-SYNTH", "ablation-SYNTH"} <= {r["name"] for r in new_runs}
    assert all(r.data.tags["pipeline_run_id"] == invocation["id"] for r in every
               if r.data.tags.get("prefect_flow_run_id") in {x["id"] for x in new_runs})


def test_sweep_trains_every_arm_into_one_mlflow_comparison(project):
    """``python -m flows sweep``: every (arm, variant, seed) trained and tested on the pipeline's data,
    one MLflow run each with the arm's params; run again, it trains nothing and logs no new runs."""
    proj, env, api = project
    _run(["dvc", "repro", "graph@SYNTH"], proj, env)
    _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, env)
    out = proj / "runs/SYNTH/sweeps/t"
    results = proj / "results/sweeps/t/SYNTH"  # the tables and the runs' records: small, for git
    res = json.loads((results / "results.json").read_text())
    expected = {("default", "pure_rl"), ("default", "raptor"), ("rl.gamma=0.9", "pure_rl"), ("rl.gamma=0.9", "raptor")}
    assert {(a["arm"], a["variant"]) for a in res["arms"]} == expected and res["missing"] == []
    assert all(0 < r["test_mrr"] <= 1 and r["rl_epochs"] == 2 for r in res["runs"])
    # the arms share the pretraining run (they differ in rl.gamma only), each from its own snapshot
    assert len(list((out / "pretrain").iterdir())) == 1
    assert (results / "results.md").read_text().count("| raptor |") == 2
    records = sorted(p.relative_to(results) for p in results.rglob("*") if p.is_file() and p.parent.name == "seed0")
    assert {p.name for p in records} == {"run_config.json", "summary.json", "history.json", "metrics.json",
                                         "ranks.parquet"} and len(records) == 4 * 5
    assert sum(p.stat().st_size for p in results.rglob("*") if p.is_file()) < 2_000_000
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH/sweep-t")

    def children():
        return {(r.data.tags["arm"], r.data.tags["variant"]): r for r in client.search_runs([exp.experiment_id])
                if "arm" in r.data.tags}

    runs = children()
    assert set(runs) == expected
    # pipeline_run_id: the top-level Prefect run above the one that logged it, here the sweep's flow
    # run (its tasks run in subflows); no `pipeline-<dataset>` MLflow run outside the pipeline's stages
    [sweep_run] = _flow_runs(api, name={"any_": ["sweep-t-SYNTH"]})
    assert {r.data.tags.get("pipeline_run_id") for r in runs.values()} == {sweep_run["id"]}
    assert not [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("stage") == "pipeline"]
    assert {k: r.data.params["rl.gamma"] for k, r in runs.items()} == {
        ("default", "pure_rl"): "0.95", ("default", "raptor"): "0.95", ("rl.gamma=0.9", "pure_rl"): "0.9",
        ("rl.gamma=0.9", "raptor"): "0.9"}
    for (arm, variant), r in runs.items():
        assert r.data.metrics["test/mrr"] == pytest.approx(
            next(x["test_mrr"] for x in res["runs"] if (x["arm"], x["variant"]) == (arm, variant)))
    # Prefect: the results table and a row per run with its MLflow run, as artifacts of the flow run
    artifacts = {a["key"]: a for a in http_json(f"{api}/artifacts/filter", {}) if a.get("key")}
    assert "| rl.gamma=0.9 |" in artifacts["sweep-t-synth-results"]["data"]
    assert all(r.info.run_id in artifacts["sweep-t-synth"]["data"] for r in runs.values())
    parents = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("stage") == "sweep"
               and "arm" not in r.data.tags]
    assert len(parents) == 1 and "default/raptor/test_mrr_mean" in parents[0].data.metrics

    models = {p: p.stat().st_mtime_ns for p in (out / "train").rglob("best.pt")}
    assert len(models) == 4

    def pretraining():  # the label tables are computed again on every run of the flow: the same table
        return {p: p.stat().st_mtime_ns for p in (out / "pretrain").rglob("*.pt")}

    pretrained = pretraining()
    _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, env)
    assert {p: p.stat().st_mtime_ns for p in (out / "train").rglob("best.pt")} == models
    assert pretraining() == pretrained
    assert {k: r.info.run_id for k, r in children().items()} == {k: r.info.run_id for k, r in runs.items()}

    # an arm added to the finished sweep's declaration (how a combination of readings is tried after
    # the one-at-a-time arms): only its runs train, from the shared pretraining; the others are kept
    original = (proj / "params.yaml").read_text()
    try:
        changed = yaml.safe_load(original)
        # with an evaluation-only arm, which trains nothing: the default arm's runs re-scored under it
        changed["sweeps"]["t"]["arms"] = {"combined": {"rl.gamma": 0.9, "rl.entropy_decay": 1.0},
                                          "last": {"eval.rank_last_expansions": True}}
        (proj / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, env)
        after = {p: p.stat().st_mtime_ns for p in (out / "train").rglob("best.pt")}
        assert {p: after[p] for p in models} == models and pretraining() == pretrained
        assert sorted(p.relative_to(out / "train").parts[:2] for p in set(after) - set(models)) == [
            ("combined", "pure_rl"), ("combined", "raptor")]
        assert len(list((out / "pretrain").iterdir())) == 1
        res = json.loads((results / "results.json").read_text())
        added = {("combined", "pure_rl"), ("combined", "raptor"), ("last", "pure_rl"), ("last", "raptor")}
        assert {(a["arm"], a["variant"]) for a in res["arms"]} == expected | added
        assert res["missing"] == []
        for v in ("pure_rl", "raptor"):
            assert (out / f"eval/last/{v}/seed0/valid/metrics.json").is_file()
            default_summary = json.loads((results / f"train/default/{v}/seed0/summary.json").read_text())
            summary = json.loads((results / f"train/last/{v}/seed0/summary.json").read_text())
            assert summary["rescored"]["overrides"] == {"eval.rank_last_expansions": True}
            assert summary["rescored"]["default_best_val_mrr"] == default_summary["best_val_mrr"]
        last = [r for r in children().values() if r.data.tags["arm"] == "last"]
        assert sorted(r.data.tags["variant"] for r in last) == ["pure_rl", "raptor"]
        assert all(r.data.params["eval.rank_last_expansions"] == "True" and "from_record" in r.data.tags for r in last)
    finally:
        (proj / "params.yaml").write_text(original)

    # the run folders gone (a fresh clone, a cleaned work tree): the records stand for their runs,
    # which are neither trained nor tested again (pretraining, deterministic, is); the tables are the same
    def test_mrrs(table):
        return {(r["arm"], r["variant"], r["seed"]): r["test_mrr"] for r in table["runs"]
                if r["arm"] not in ("combined", "last")}

    before = test_mrrs(json.loads((results / "results.json").read_text()))
    shutil.rmtree(out)
    # --from-records: the comparison from the records alone, into a new store; no data, label, pretraining
    # or training job runs (the sweep folder is not even made), and the table is the same
    shown = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{proj / 'records-mlflow.db'}"}
    _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH", "--from-records"], proj, shown)
    assert not out.exists()
    assert test_mrrs(json.loads((results / "results.json").read_text())) == before
    client = mlflow.MlflowClient(tracking_uri=shown["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH/sweep-t")
    logged = {(r.data.tags["arm"], r.data.tags["variant"]): r for r in client.search_runs([exp.experiment_id])
              if "arm" in r.data.tags}
    assert set(logged) == expected and all("from_record" in r.data.tags for r in logged.values())
    assert {k: r.data.metrics["test/mrr"] for k, r in logged.items()} == {(a, v): m for (a, v, _), m in before.items()}
    assert logged[("rl.gamma=0.9", "raptor")].data.params["rl.gamma"] == "0.9"
    fresh = {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{proj / 'fresh-mlflow.db'}"}  # the store went with them
    _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, fresh)
    assert not list(out.rglob("best.pt")) and not list(out.rglob("metrics.json"))
    assert len(pretraining()) == len(pretrained)
    res = json.loads((results / "results.json").read_text())
    assert test_mrrs(res) == before and res["missing"] == [] and len(res["runs"]) == 4
    # and the comparison is whole in MLflow again: a run per record, with its curve and test metrics
    client = mlflow.MlflowClient(tracking_uri=fresh["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH/sweep-t")
    restored = {(r.data.tags["arm"], r.data.tags["variant"]): r for r in client.search_runs([exp.experiment_id])
                if "arm" in r.data.tags}
    assert set(restored) == expected and all("from_record" in r.data.tags for r in restored.values())
    assert {k: r.data.metrics["test/mrr"] for k, r in restored.items()} == {
        (a, v): m for (a, v, _), m in before.items()}
    assert all(len(client.get_metric_history(r.info.run_id, "rl/reward")) == 2 for r in restored.values())
    assert restored[("rl.gamma=0.9", "raptor")].data.params["rl.gamma"] == "0.9"
    _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, fresh)  # logged once
    assert len([r for r in client.search_runs([exp.experiment_id]) if "arm" in r.data.tags]) == 4

    # `raptor sweep` (no Prefect, no MLflow) trains a new arm; the flow after it trains nothing and
    # logs the arm's runs from their records, into the same comparison
    try:
        changed = yaml.safe_load(original)
        changed["sweeps"]["t"]["arms"] = {"local": {"rl.gamma": 0.8}}
        (proj / "params.yaml").write_text(yaml.safe_dump(changed, sort_keys=False))
        _run([sys.executable, "-m", "raptor.cli", "sweep", "t", "--dataset", "SYNTH", "--arms", "local", "--jobs", "2",
              "--no-progress"], proj, fresh)
        local = {p: p.stat().st_mtime_ns for p in (out / "train/local").rglob("best.pt")}
        assert len(local) == 2 and not [r for r in client.search_runs([exp.experiment_id])
                                        if r.data.tags.get("arm") == "local"]
        _run([sys.executable, "-m", "flows", "sweep", "t", "--dataset", "SYNTH"], proj, fresh)
        assert {p: p.stat().st_mtime_ns for p in (out / "train/local").rglob("best.pt")} == local
        logged = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("arm") == "local"]
        assert sorted(r.data.tags["variant"] for r in logged) == ["pure_rl", "raptor"]
        assert all("from_record" in r.data.tags and r.data.params["rl.gamma"] == "0.8" for r in logged)
    finally:
        (proj / "params.yaml").write_text(original)


def test_a_dataset_that_cannot_be_ingested_blocks_only_its_own_stages(tmp_path):
    """Two datasets in one pipeline, one without its train split: its ingest fails with ingest's
    message and its later stages are blocked; the other dataset's stages run and are cached."""
    proj = tmp_path / "proj"
    proj.mkdir()
    good = write_raw(tmp_path / "good", SyntheticSpec(seed=4, num_entities=20, num_timestamps=12))
    bad = write_raw(tmp_path / "bad", SyntheticSpec(seed=4, num_entities=20, num_timestamps=12))
    (bad / "train.txt").unlink()
    for name in ("raptor", "flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    params = {"datasets": {"GOOD": {"raw_dir": str(good)}, "BAD": {"raw_dir": str(bad)}},
              "train": {"variants": ["pure_rl"]}}
    (proj / "params.yaml").write_text(yaml.safe_dump(params))
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(params_from_dict(params)))
    env = _env(proj, "")
    env.pop("PREFECT_API_URL")  # Prefect's temporary local API
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "i"]):
        _run(cmd, proj, env)

    proc = subprocess.run([sys.executable, "-m", "flows", "pipeline", "--target", "graph@GOOD",
                           "--target", "graph@BAD"], cwd=proj, env=env, capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ingest@BAD" in log and "missing train.txt" in log and "graph@BAD: blocked" in log, log[-4000:]
    assert (proj / "data/GOOD/graph.npz").is_file() and not (proj / "data/BAD").exists()
    # DVC agrees: GOOD's stages are committed, BAD's are still to do (other stages were not asked for).
    status = _status(proj, env)
    assert {"ingest@BAD", "graph@BAD"} <= status and not {"ingest@GOOD", "graph@GOOD"} & status

    proc = subprocess.run(["dvc", "repro", "--keep-going", "graph@GOOD", "graph@BAD"], cwd=proj, env=env,
                          capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "missing train.txt" in log
    assert "Stage 'graph@GOOD' didn't change, skipping" in log


#: The plain `dvc repro` test's params: two systems, two seeds, a tiny model and one epoch each.
PLAIN = {
    "profile": "paper",
    "datasets": {"SYNTH": {"raw_dir": None, "start_date": "2020-01-01"}},
    "train": {"variants": ["pure_rl", "raptor"], "seeds": [0, 1], "num_threads": 1},
    "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
    "env": {"max_actions": 10}, "pretrain": {"epochs": 1, "batch_size": 512}, "rl": {"epochs": 1, "batch_size": 512},
    "eval": {"beam_size": 5, "valid_every": 1},
}


def test_a_plain_dvc_repro_runs_its_stages_without_prefect(tmp_path):
    """No Prefect API configured: DVC orchestrates and every stage runs its flow's function without
    Prefect (no temporary server, no Prefect database), with the same MLflow runs as under a Prefect
    server: one pipeline run per `dvc repro` (its id recorded in build/pipeline-run.json), the
    pretraining runs and the finetune parents under it, one child per seed with its test metrics."""
    import mlflow

    proj = tmp_path / "proj"
    proj.mkdir()
    raw = write_raw(tmp_path / "raw", SyntheticSpec(seed=3))
    for name in ("raptor", "flows", "tasks"):
        (proj / name).symlink_to(ROOT / name)
    params = json.loads(json.dumps(PLAIN))
    params["datasets"]["SYNTH"]["raw_dir"] = str(raw)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(params_from_dict(params)))
    stages.ensure_local_params(proj)
    env = _env(proj, "")
    env.pop("PREFECT_API_URL")
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        _run(cmd, proj, env)

    out = _run(["dvc", "repro"], proj, env)
    names = ["ingest-SYNTH", "graph-SYNTH", "label-SYNTH", "pretrain-SYNTH", "finetune-SYNTH-pure_rl",
             "evaluate-SYNTH-pure_rl", "finetune-SYNTH-raptor", "evaluate-SYNTH-raptor", "significance-SYNTH",
             "report-SYNTH"]
    for name in names:
        assert f"Beginning stage '{name}' (without Prefect" in out and f"Finished stage '{name}' in " in out, name
    assert "Starting temporary server" not in out and "Task run" not in out
    assert not (proj / ".prefect").exists()  # PREFECT_HOME: Prefect never ran
    # the per-seed epoch lines still reach the console (raptor.train's logger, not a Prefect run's)
    assert "SYNTH-raptor-seed1 rl epoch 1/1:" in out
    invocation = json.loads((proj / "build/pipeline-run.json").read_text())["invocation_id"]

    client = mlflow.MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("raptor/SYNTH")
    runs = client.search_runs([exp.experiment_id])
    assert {r.data.tags.get("pipeline_run_id") for r in runs} == {invocation}
    assert all(r.info.status == "FINISHED" and "prefect_flow_run_id" not in r.data.tags for r in runs)
    [pipe] = [r for r in runs if r.data.tags.get("stage") == "pipeline"]
    assert pipe.info.run_name == "pipeline-SYNTH"
    under = {r.info.run_name for r in runs if r.data.tags.get("mlflow.parentRunId") == pipe.info.run_id}
    assert under == {"SYNTH-pretrain-seed0", "SYNTH-pretrain-seed1", "finetune-SYNTH-pure_rl", "finetune-SYNTH-raptor"}
    for variant in ("pure_rl", "raptor"):
        [parent] = [r for r in runs if r.info.run_name == f"finetune-SYNTH-{variant}"]
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert sorted(r.info.run_name for r in children) == [f"SYNTH-{variant}-seed0", f"SYNTH-{variant}-seed1"]
        test = json.loads((proj / f"runs/SYNTH/{variant}/metrics.json").read_text())
        assert parent.data.metrics["test/mrr"] == pytest.approx(test["mrr"])
        for r in children:
            seed = r.data.tags["seed"]
            per_seed = json.loads((proj / f"runs/SYNTH/{variant}/eval/seed{seed}/metrics.json").read_text())
            assert r.data.metrics["test/mrr"] == pytest.approx(per_seed["mrr"])
            assert {"checkpoint", "predictions", "history"} <= {a.path for a in client.list_artifacts(r.info.run_id)}
    assert {a.path for a in client.list_artifacts(pipe.info.run_id)} == {"report", "significance"}

    # Another `dvc repro` is another invocation; one that trains nothing logs no MLflow run.
    _run(["dvc", "repro", "--force", "--single-item", "significance@SYNTH"], proj, env)
    assert json.loads((proj / "build/pipeline-run.json").read_text())["invocation_id"] != invocation
    assert len(client.search_runs([exp.experiment_id])) == len(runs)
