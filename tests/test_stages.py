"""The stage graph declared once: dvc.yaml is generated from it, and its code deps cover what runs."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import yaml

from raptor.pipeline import stages
from raptor.config import ConfigError, Params, load_params, params_from_dict
from raptor.common.provenance import code_hash, content_hash, module_files

ROOT = Path(__file__).resolve().parents[1]


def _stage_shape(dvc_file: Path) -> Params:
    """The params that shape a generated dvc.yaml (its datasets, their raw folders, its variants), read
    back from the file itself: the repo's params.yaml is a user's file, which tests do not read."""
    import yaml

    from raptor.config import params_from_dict

    graph = yaml.safe_load(dvc_file.read_text())["stages"]
    datasets = {name: dict(item) for name, item in graph["ingest"]["foreach"].items()}
    variants = [name.split("-", 1)[1] for name in graph if name.startswith("finetune-")]
    return params_from_dict({"datasets": datasets, "train": {"variants": variants}})


def test_committed_dvc_files_are_the_generated_ones():
    """The repo's dvc.yaml and ablation/dvc.yaml equal what the declaration and the code generate for
    the datasets and variants dvc.yaml lists (the files are generated, not typed: a change of imports
    or of stages.py without `python -m raptor.pipeline.stages write` fails here)."""
    shape = _stage_shape(ROOT / "dvc.yaml")
    assert list(shape.datasets) and shape.train.variants
    assert stages.check_dvc_files(ROOT, shape) == []


def test_the_stage_shape_is_read_back_from_a_generated_file(tmp_path):
    from raptor.config import params_from_dict

    p = params_from_dict({"datasets": {"ICEWS14": {}, "ICEWS18": {}}, "train": {"variants": ["pure_rl", "titer"]}})
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(p))
    shape = _stage_shape(tmp_path / "dvc.yaml")
    assert list(shape.datasets) == ["ICEWS14", "ICEWS18"] and shape.train.variants == ["pure_rl", "titer"]
    assert stages.dvc_yaml(shape) == stages.dvc_yaml(p)


def test_check_names_a_stale_file(tmp_path):
    (tmp_path / "ablation").mkdir()
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(Params()).replace("raptor/labeling/kernels.py", "raptor/x.py"))
    (tmp_path / "ablation" / "dvc.yaml").write_text(stages.dvc_yaml(Params(), ablation=True))
    (tmp_path / stages.CURVE_TEMPLATE_FILE).parent.mkdir(parents=True)
    (tmp_path / stages.CURVE_TEMPLATE_FILE).write_text(stages.CURVE_TEMPLATE_SOURCE.read_text())
    problems = stages.check_dvc_files(tmp_path, Params())
    assert len(problems) == 1 and "dvc.yaml is out of date" in problems[0] and "python -m raptor.pipeline.stages write" in problems[0]


def test_variants_come_from_params():
    one = params_from_dict({"train": {"variants": ["pure_rl"]}})
    doc = yaml.safe_load(stages.dvc_yaml(one))["stages"]
    assert "finetune-pure_rl" in doc and "finetune-raptor" not in doc
    assert "pretrain" not in doc and "significance" not in doc  # nothing pretrained, nothing to compare
    both = yaml.safe_load(stages.dvc_yaml(Params()))["stages"]
    assert {"pretrain", "finetune-raptor", "evaluate-raptor", "significance"} <= set(both)
    assert both["finetune-raptor"]["do"]["deps"][2] == "runs/${key}/pretrain"
    assert "runs/${key}/pretrain" not in both["finetune-pure_rl"]["do"]["deps"]
    assert "finetune-titer" in both and "runs/${key}/pretrain" not in both["finetune-titer"]["do"]["deps"]
    assert "raptor/agents/titer/training.py" in both["finetune-titer"]["do"]["deps"]
    with pytest.raises(ConfigError, match="train.variants"):
        params_from_dict({"train": {"variants": ["pure_rl", "xerte"]}})


def _calls(fn: ast.AST) -> set[str]:
    return {n.func.id if isinstance(n.func, ast.Name) else n.func.attr
            for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))}


def _raptor_imports(tree: ast.Module) -> dict[str, str]:
    """name -> raptor module it is imported from (module-level and in-function ``from raptor... import``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("raptor"):
            for a in node.names:
                out[a.asname or a.name] = node.module
        if isinstance(node, ast.ImportFrom) and node.module == "raptor":
            for a in node.names:
                out[a.asname or a.name] = f"raptor.{a.name}"
    return out


def _library_modules_used(kind: str) -> set[str]:
    """The raptor modules whose names the flow of ``kind`` and the tasks it calls use (by AST)."""
    flows_tree = ast.parse((ROOT / "flows/stages.py").read_text())
    tasks_trees = {p.stem: ast.parse(p.read_text()) for p in (ROOT / "tasks").glob("*.py")}
    flow_funcs = {n.name: n for n in flows_tree.body if isinstance(n, ast.FunctionDef)}
    task_funcs = {n.name: (n, t) for t in tasks_trees.values() for n in t.body if isinstance(n, ast.FunctionDef)}
    from flows.stages import FLOWS

    todo, seen, used = [FLOWS[kind].fn.__name__], set(), set()
    imports = {"flows": _raptor_imports(flows_tree), **{k: _raptor_imports(t) for k, t in tasks_trees.items()}}
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in flow_funcs:
            node, imp = flow_funcs[name], imports["flows"]
        elif name in task_funcs:
            node, tree = task_funcs[name]
            imp = next(v for k, v in imports.items() if tasks_trees.get(k) is tree)
        else:
            continue
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | _calls(node)
        used |= {imp[n] for n in names if n in imp}
        todo.extend(n for n in names if n in flow_funcs or n in task_funcs)
    return used


@pytest.mark.parametrize("stage", [s for s in stages.main_stages(["pure_rl", "raptor"]) + stages.ablation_stages()
                                   if s.per_dataset], ids=lambda s: s.name)
def test_stage_code_deps_cover_the_library_code_its_flow_calls(stage):
    """Independent of the declaration: read the flow and its tasks, collect every raptor module
    they take a name from, and check each one's source files are among the stage's DVC deps."""
    used = _library_modules_used(stage.flow)
    assert used, f"{stage.name}: found no library call in its flow (the AST walk is broken)"
    deps = set(stages.code_deps(stage))
    for module in used:
        files = {str(p.relative_to(ROOT)) for p in module_files([module])}
        assert files <= deps, f"{stage.name} runs {module} but its deps miss {sorted(files - deps)}"


@pytest.mark.parametrize("module", ["kernels", "store"])
def test_labeling_reaches_label_and_pretraining_but_not_pure_rl(module):
    doc = yaml.safe_load(stages.dvc_yaml(Params()))["stages"]
    with_labeling = {name for name, s in doc.items() if f"raptor/labeling/{module}.py" in s.get("do", s)["deps"]}
    assert with_labeling == {"label", "pretrain"}
    # the stage entry is the label stage's alone (raptor/labeling/__init__.py imports nothing)
    assert {name for name, s in doc.items() if "raptor/labeling/stage.py" in s.get("do", s)["deps"]} == {"label"}


def test_the_significance_tests_reach_evaluation_and_reports_but_no_training():
    """An edit in the t-tests and bootstraps (raptor/evaluation/stats.py) re-runs the stages that test and report,
    never training: the fine-tuning stages' seed aggregates come from raptor/evaluation/summary.py."""
    doc = yaml.safe_load(stages.dvc_yaml(Params()))["stages"]
    deps = {name: s.get("do", s)["deps"] for name, s in doc.items()}
    finetune = [n for n in deps if n.startswith("finetune-")]
    assert finetune and all("raptor/evaluation/summary.py" in deps[n] for n in finetune)
    with_stats = {n for n, d in deps.items() if "raptor/evaluation/stats.py" in d}
    assert with_stats and not with_stats & {*finetune, "pretrain", "label", "graph", "ingest"}, with_stats


def test_stage_params_are_resolved_values_of_the_declared_keys(tmp_path):
    src = tmp_path / "params.yaml"
    src.write_text(yaml.safe_dump({"datasets": {"D": {"raw_dir": "raw"}},
                                   "profiles": {"small": {"rl.epochs": 3, "labeling.workers": 1}}}))
    out = tmp_path / "build" / "params.json"
    p = stages.resolve_params(src, tmp_path / "params.local.yaml", out)  # no local file: the paper's values
    assert p.rl.epochs == 400 and json.loads(out.read_text())["rl"]["epochs"] == 400
    (tmp_path / "params.local.yaml").write_text("profile: small\nrl.gamma: 0.5\n")
    stamp = out.stat().st_mtime_ns
    p = stages.resolve_params(src, tmp_path / "params.local.yaml", out)
    resolved = json.loads(out.read_text())
    assert (resolved["profile"], resolved["rl"]["epochs"], resolved["rl"]["gamma"]) == ("small", 3, 0.5)
    assert out.stat().st_mtime_ns != stamp
    stamp = out.stat().st_mtime_ns
    stages.resolve_params(src, tmp_path / "params.local.yaml", out)
    assert out.stat().st_mtime_ns == stamp  # unchanged content: not rewritten
    assert stages.load_resolved(out) == p
    # Keys tracked per stage: NO_EFFECT fields of a section are left out, named leaves stay.
    label = next(s for s in stages.main_stages(["pure_rl", "raptor"]) if s.name == "label")
    keys = stages.expand_params(label.params, p)
    assert "labeling.max_in_edges" in keys and "labeling.workers" not in keys


def test_local_overrides_and_profiles_cannot_change_the_stage_graph(tmp_path):
    src = tmp_path / "params.yaml"
    src.write_text("profile: paper\n")
    (tmp_path / "params.local.yaml").write_text("train:\n  variants: [pure_rl]\n")
    with pytest.raises(ConfigError, match="train.variants shapes DVC's stage list"):
        load_params(src, local=tmp_path / "params.local.yaml")
    (tmp_path / "params.local.yaml").write_text("datasets.X.raw_dir: y\n")
    with pytest.raises(ConfigError, match="datasets shapes DVC's stage list"):
        load_params(src, local=tmp_path / "params.local.yaml")


def test_select_profile_keeps_other_local_keys_and_refuses_unknown(tmp_path):
    src = tmp_path / "params.yaml"
    src.write_text("profiles:\n  quick: {rl.epochs: 5}\n")
    local = tmp_path / "params.local.yaml"
    local.write_text("rl.gamma: 0.5\n")
    stages.select_profile(src, "quick")
    p = load_params(src, local=local)
    assert (p.profile, p.rl.epochs, p.rl.gamma) == ("quick", 5, 0.5)
    before = local.read_text()
    with pytest.raises(ConfigError, match="unknown profile 'fast'"):
        stages.select_profile(src, "fast")
    assert local.read_text() == before
    local.write_text("rl.gamma: 0.5\nrl.epochs: -3\n")  # a bad value of the local file is named as its own
    before = local.read_text()
    with pytest.raises(ConfigError, match=r"params\.local\.yaml, line 2: rl\.epochs"):
        stages.select_profile(src, "quick")
    assert local.read_text() == before


def test_resolve_fails_when_dvc_yaml_is_stale(tmp_path, capsys):
    (tmp_path / "params.yaml").write_text("train:\n  variants: [pure_rl]\n")
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(Params()))  # generated for both variants
    rc = stages.main(["resolve", "--params", str(tmp_path / "params.yaml"), "--local", str(tmp_path / "l.yaml"),
                      "--out", str(tmp_path / "p.json")])
    assert rc == 1 and "out of date" in capsys.readouterr().err


def test_params_stage_checks_everything_before_it_writes(tmp_path, capsys):
    """A refused `params` stage leaves build/params.json as it was (a running stage and DVC read it):
    a stale dvc.yaml, an absent raw folder and invalid params each stop it with nothing written."""
    (tmp_path / "raw").mkdir()
    src, local, out = tmp_path / "params.yaml", tmp_path / "params.local.yaml", tmp_path / "build" / "params.json"
    src.write_text("datasets:\n  D: {raw_dir: raw}\ntrain:\n  variants: [pure_rl]\n")
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(load_params(src)))
    argv = ["resolve", "--params", str(src), "--local", str(local), "--out", str(out)]
    assert stages.main(argv) == 0 and json.loads(out.read_text())["rl"]["gamma"] == 0.95
    capsys.readouterr()
    before = (out.read_bytes(), out.stat().st_mtime_ns)
    local.write_text("rl.gamma: 0.5\n")  # what a refused run would have written

    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(Params()))  # stale: generated for other variants
    assert stages.main(argv) == 1 and "out of date" in capsys.readouterr().err
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(load_params(src)))
    (tmp_path / "raw").rename(tmp_path / "elsewhere")
    assert stages.main(argv) == 1 and "raw data folder not found" in capsys.readouterr().err
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before
    (tmp_path / "elsewhere").rename(tmp_path / "raw")
    local.write_text("rl.gamma: x\n")
    assert stages.main(argv) == 1 and "rl.gamma" in capsys.readouterr().err
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before
    local.write_text("rl.gamma: 0.5\n")  # every check passes: written
    assert stages.main(argv) == 0 and json.loads(out.read_text())["rl"]["gamma"] == 0.5


def test_provenance_hashes_change_with_content(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a").write_text("1")
    h1 = content_hash(d)
    (d / "a").write_text("2")
    assert content_hash(d) != h1
    (d / "a").write_text("1")
    assert content_hash(d) == h1
    (d / "b").write_text("")
    assert content_hash(d) != h1
    with pytest.raises(FileNotFoundError):
        content_hash(tmp_path / "nope")
    paths = module_files(["raptor.data.graph"])
    files = {p.name for p in paths}
    assert {"graph.py", "dataset.py", "io.py", "constants.py"} <= files and not any("labeling" in p.parts for p in paths)
    assert len(code_hash(["raptor.data.graph"])) == 64


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            roots.add(node.module.split(".")[0])
    return roots


def test_layers_import_downwards_only():
    """raptor/ imports no orchestration library nor the shell around it; tasks/ never imports flows/."""
    for f in (ROOT / "raptor").rglob("*.py"):
        bad = _imported_roots(f) & {"prefect", "mlflow", "dvc", "tasks", "flows", "prefect_dask"}
        assert not bad, f"{f.relative_to(ROOT)} imports {sorted(bad)}"
    for f in (ROOT / "tasks").glob("*.py"):
        assert "flows" not in _imported_roots(f), f"{f.relative_to(ROOT)} imports flows"


#: raptor's modules, lowest layer first: a module imports only from its own layer or the ones
#: below (a new module must be placed here). ``x.*``: every submodule of ``x``.
LAYERS: list[tuple[str, set[str]]] = [
    ("base utilities", {"raptor", "constants", "common", "common.io", "common.progress", "common.provenance",
                        "common.runtime", "common.resources", "pipeline", "pipeline.runenv", "pipeline.projectlock",
                        "reporting", "reporting.pages", "reporting.paper", "evaluation", "evaluation.stats", "evaluation.summary", "agents.sampling",
                        "data.names"}),
    ("params, registries, files", {"agents", "agents.variants", "data", "data.registry", "config", "runs",
                                   "runs.checkpoints", "runs.rundir", "reporting.runs_reader", "reporting.records"}),
    ("data and graph", {"data.dataset", "data.graph", "data.ingest", "data.synthetic", "evaluation.ranking"}),
    ("environment and labeling", {"mdp", "mdp.env", "mdp.device_env", "labeling", "labeling.kernels", "labeling.table",
                                  "labeling.reference", "labeling.actions", "labeling.device", "labeling.compute", "labeling.store",
                                  "labeling.stage", "runs.context"}),
    ("policies and agents", {"agents.policy", "agents.rollout", "agents.beam", "agents.flops", "runs.loop",
                             "agents.actor_critic", "agents.actor_critic.rl", "agents.actor_critic.seeds", "agents.actor_critic.stack",
                             "agents.actor_critic.graph_step", "agents.titer",
                             "agents.titer.training", "agents.titer.dirichlet", "agents.recurrency", "agents.recurrency.method",
                             "agents.base", "agents.actor_critic.agent", "agents.titer.agent",
                             "agents.recurrency.agent"}),
    ("reporting", {"reporting.report", "runs.forecast"}),
    ("experiment, stages, sweeps", {"pipeline.experiment", "agents.actor_critic.pretrain",
                                    "agents.actor_critic.pretrain_seeds", "pipeline.stages",
                                    "pipeline.sweep", "reporting.sweep_page", "pipeline.local_sweep", "pipeline.rescore"}),
    ("results page", {"reporting.results"}),
    ("command line", {"cli", "commands", "commands.*"}),
]


def _layer_of(module: str) -> int:
    short = module.removeprefix("raptor.") if module != "raptor" else module
    for i, (_, members) in enumerate(LAYERS):
        if short in members or any(m.endswith(".*") and short.startswith(m[:-1]) for m in members):
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS (tests/test_stages.py): place it")


def test_raptor_modules_import_no_cycle_and_no_upward_import_and_file_io_imports_no_agent():
    """No import cycle among raptor's modules (as provenance reads them: function-level and
    TYPE_CHECKING imports count), no import from a higher layer (:data:`LAYERS`); the checkpoints'
    files are read without any agent's code."""
    from raptor.common import provenance

    graph = {}
    for f in provenance.PACKAGE_DIR.rglob("*.py"):
        parts = f.relative_to(provenance.PACKAGE_DIR.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[name] = f
    edges = {m: {i for i in provenance._imports(f, m) if i in graph and i != m} for m, f in graph.items()}
    upward = [f"{m} ({LAYERS[_layer_of(m)][0]}) imports {n} ({LAYERS[_layer_of(n)][0]})"
              for m in sorted(edges) for n in sorted(edges[m]) if _layer_of(n) > _layer_of(m)]
    assert not upward, "upward imports:\n" + "\n".join(upward)
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:  # depth-first; a module met again on its own path is a cycle
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        for n in sorted(edges[m]):
            visit(n, path + [m])
        done.add(m)

    for m in sorted(graph):
        visit(m, [])
    files = {p.name for p in provenance.module_files(["raptor.runs.checkpoints"])}
    assert not files & {"training.py", "agent.py", "policy.py", "loop.py", "rl.py"}, sorted(files)
    registry = {p.relative_to(provenance.PACKAGE_DIR).as_posix() for p in provenance.module_files(["raptor.agents.variants"])}
    assert registry == {"__init__.py", "agents/variants.py", "agents/__init__.py"}, sorted(registry)


def test_orchestration_packages_are_not_installed_as_top_level_names():
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert include == ["raptor*"]


@pytest.mark.parametrize("variant", ["pure_rl", "raptor", "titer"])
def test_a_finetune_stage_tracks_the_params_its_runs_depend_on(variant):
    """DVC re-runs a finetune stage exactly when a param in its runs' fingerprint changes (plus the
    epoch budget and the seed list, which the fingerprint holds as continuation and folder): TITer's
    stage follows the `titer` section, not `model` or `rl`, and the actor-critic stages the reverse."""
    from raptor.agents import variants
    from raptor.runs.rundir import RunDir

    p = Params()
    v = variants.get(variant)
    stage = next(s for s in stages.main_stages(["pure_rl", "raptor", "titer"]) if s.name == f"finetune-{variant}")
    tracked = set(stages.expand_params(stage.params, p))
    fingerprint = set(RunDir.rl_fingerprint(p, variant, 0, {}, "")["params"])
    assert tracked - fingerprint == {"pretrain.epochs", "rl.epochs", "train.seeds"}
    assert fingerprint - tracked <= {"train.equal_total_epochs"}  # read by the from-scratch variants only
    sections = {k.split(".")[0] for k in tracked}
    assert ("titer" in sections, "model" in sections) == ((True, False) if v.agent == "titer" else (False, True))


def _dvc_project(tmp_path):
    """A git + DVC repository with this repo's raptor/ code, one tiny dataset and the generated dvc.yaml."""
    import shutil
    import subprocess

    from conftest import write_raw_dataset

    proj = tmp_path / "proj"
    shutil.copytree(ROOT / "raptor", proj / "raptor", ignore=shutil.ignore_patterns("__pycache__"))
    write_raw_dataset(proj / "raw")
    raw = {"datasets": {"D": {"raw_dir": "raw"}}, "train": {"variants": ["pure_rl", "titer"], "seeds": [0, 1]},
           "profiles": {"small": {"rl.epochs": 3}}}
    (proj / "params.yaml").write_text(yaml.safe_dump(raw))
    p = stages.load_params(proj / "params.yaml")
    generated = stages.generated_files(p)
    env = {**__import__("os").environ, "PYTHONPATH": str(proj), "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}:{__import__('os').environ['PATH']}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(*cmd):
        proc = subprocess.run(list(cmd), cwd=proj, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, f"{cmd}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        return proc.stdout
    (proj / ".gitignore").write_text("/build\n/runs\n/params.local.yaml\n")
    run("git", "init", "-q")
    run("dvc", "init", "-q")
    for rel, text in generated:  # after `dvc init`, which refuses a .dvc/ folder that exists
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(text)
    return proj, run


@pytest.mark.slow
def test_params_stage_is_clean_after_a_run_and_reruns_on_a_changed_local_file(tmp_path):
    proj, run = _dvc_project(tmp_path)
    doc = yaml.safe_load((proj / "dvc.yaml").read_text())["stages"]["params"]
    assert "always_changed" not in doc and {"params.yaml", "params.local.yaml"} <= set(doc["deps"])
    stages.ensure_local_params(proj)
    run("dvc", "repro", "params")
    assert json.loads(run("dvc", "status", "params", "--json").strip() or "{}") == {}  # clean: not "always changed"
    (proj / "params.local.yaml").write_text("profile: small\n")
    assert "params" in json.loads(run("dvc", "status", "params", "--json"))
    run("dvc", "repro", "params")
    assert json.loads(run("dvc", "status", "params", "--json").strip() or "{}") == {}
    assert json.loads((proj / "build" / "params.json").read_text())["profile"] == "small"


@pytest.mark.slow
def test_dvc_plots_load_the_learning_curves(tmp_path):
    proj, run = _dvc_project(tmp_path)
    seed0 = proj / "runs" / "D" / "pure_rl" / "train" / "seed0"
    seed0.mkdir(parents=True)
    (seed0 / "history.csv").write_text("epoch,reward,val_mrr\n0,0.1,\n1,0.2,0.25\n")
    (seed0 / "validation.csv").write_text("epoch,val_mrr\n1,0.25\n")
    shown = json.loads(run("dvc", "plots", "show", "--json"))
    values = shown["data"]["learning-reward-D"][0]["content"]["data"]["values"]
    assert [(v["epoch"], v["reward"]) for v in values] == [("0", "0.1"), ("1", "0.2")]
    mrr = shown["data"]["learning-val_mrr-D"][0]["content"]["data"]["values"]
    assert [(v["epoch"], v["val_mrr"]) for v in mrr] == [("1", "0.25")]  # validated epochs only


def test_the_learning_curves_template_is_there_and_colours_by_system():
    """dvc.yaml's learning curves name a template that DVC finds in .dvc/plots/ (a missing one fails
    `dvc plots show`); it keeps DVC's data anchors and colours by the system derived from the file path."""
    import json

    path = ROOT / stages.CURVE_TEMPLATE_FILE
    text = path.read_text()
    assert text == stages.CURVE_TEMPLATE_SOURCE.read_text()  # `raptor.pipeline.stages write` put it there
    spec = json.loads(text)
    assert "<DVC_METRIC_DATA>" in text and "<DVC_METRIC_Y>" in text
    assert spec["transform"][0]["as"] == "system"
    assert f"template: {stages.CURVE_TEMPLATE}" in (ROOT / "dvc.yaml").read_text()


def test_the_architecture_page_shows_the_layers_and_every_folder():
    """docs/architecture.md's layer table names exactly the modules of :data:`LAYERS`, layer by layer, and
    its folder tree names every package of raptor/."""
    import re

    page = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| ([^|]+?) \| ([^|]+) \| [^|]+ \|$", page, flags=re.M)
    table = [(name, set(re.findall(r"`([^`]+)`", mods))) for name, mods in rows if name not in ("layer", "---")]
    assert table == LAYERS
    tree = page[page.index("## The folder tree"):page.index("## The layers")]
    packages = {p.parent.relative_to(ROOT / "raptor").as_posix() for p in (ROOT / "raptor").rglob("__init__.py")}
    missing = [p for p in sorted(packages - {"."}) if f" {p.rsplit('/', 1)[-1]}/" not in tree]
    assert not missing, f"folders missing from docs/architecture.md's tree: {missing}"
