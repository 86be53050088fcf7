"""The pipeline's stage graph, declared once.

Every stage names its inputs, outputs, the params keys it reads and the library module it runs;
``dvc.yaml`` (and ``ablation/dvc.yaml``) are generated from this declaration
(``python -m raptor.pipeline.stages write``; ``check`` fails when they are out of date), so

* a stage's code dependencies are the transitive ``raptor`` imports of its module
  (:func:`raptor.common.provenance.module_files`), never a hand-typed list;
* its paths exist only here: the generated command passes every path explicitly
  (``--in NAME=PATH`` / ``--out NAME=PATH``), and the flows and the library never guess one;
* the per-dataset stages are DVC ``foreach`` loops over ``datasets`` in params.yaml, one stage per
  variant of ``train.variants`` (:mod:`raptor.agents.variants`): datasets and variants are data.

Params: the ``params`` stage (a fraction of a second) resolves params.yaml, the selected profile
and the untracked ``params.local.yaml`` into ``build/params.json``; every other stage lists its keys
of *that* file, so DVC tracks the values a stage really ran with (a profile's overrides included)
and choosing a profile edits no tracked file. The stage depends on both files (and its code), so it
re-runs exactly when one of them changes and ``dvc status`` is clean after a run; the untracked
``params.local.yaml`` must therefore exist (empty is fine: :func:`ensure_local_params`, which
``scripts/setup.sh``, ``scripts/run.sh``, the pipeline flow and ``write`` call).

Plots: the learning curves (``history.csv`` and ``validation.csv`` of every variant and seed: reward
and validation MRR by epoch) and the ablation's, declared as DVC top-level ``plots`` (``dvc plots show``).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from raptor.agents import variants as variant_registry
from raptor.agents import agent_facts
from raptor.constants import arm_folder
from raptor.runs.rundir import RunDir
from raptor.config import (LOCAL_PARAMS, TEST_TIME_EVAL_KEYS, AblationConfig, ConfigError, Params, TrainConfig, load_params,  # noqa: F401
                     load_resolved, params_to_dict)

#: Resolved params (profile and local overrides applied), written by the ``params`` stage.
PARAMS_FILE = "build/params.json"
PARAMS_SOURCE = "params.yaml"
DVC_FILE = "dvc.yaml"
ABLATION_DVC_FILE = "ablation/dvc.yaml"
#: The pipeline flow appends each stage's wall time and peak memory here as the stage ends (a log
#: across runs, not a DVC output); ``raptor results`` shows each stage's latest record.
USAGE_LOG = "runs/stage-usage.jsonl"

#: Placeholders in path templates; DVC's ``foreach`` fills them (``${key}``, ``${item.raw_dir}``).
DATASET, RAW_DIR = "{dataset}", "{raw_dir}"


@dataclass(frozen=True)
class Stage:
    """One stage of the graph (per dataset unless ``per_dataset`` is false)."""

    name: str
    #: What the stage does, for ``--help`` and the generated dvc.yaml.
    help: str
    #: The library module(s) whose functions the stage runs (comma-separated): its code dependencies
    #: are their ``raptor`` imports, transitively (a test checks them against what the flows call).
    module: str
    #: Option name -> path template (``{dataset}``, ``{raw_dir}``).
    inputs: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)
    #: Keys of the resolved params the stage reads. A section name stands for its fields that can
    #: change results (fields marked ``NO_EFFECT`` are left out); a leaf key is kept as named.
    params: tuple[str, ...] = ()
    #: The flow that runs it (``python -m flows KIND``); the variant it trains or evaluates.
    kind: str = ""
    variant: Optional[str] = None
    per_dataset: bool = True
    #: Outputs that survive a re-run (checkpoints an interrupted run resumes from).
    persist: tuple[str, ...] = ()
    #: Outputs kept out of DVC's cache (small JSON), and those that are DVC metrics.
    uncached: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    always_changed: bool = False

    @property
    def flow(self) -> str:
        return self.kind or self.name

    def address(self, dataset: Optional[str] = None) -> str:
        """DVC's name of the stage for ``dataset`` (``label@ICEWS14``)."""
        return f"{self.name}@{dataset}" if self.per_dataset else self.name

    def paths(self, dataset: Optional[str] = None, raw_dir: str = "") -> dict[str, dict[str, str]]:
        """``{"inputs": {name: path}, "outputs": {name: path}}`` for one dataset."""
        def fill(t: str) -> str:
            return t.replace(DATASET, dataset or "").replace(RAW_DIR, raw_dir)
        return {"inputs": {k: fill(v) for k, v in self.inputs.items()},
                "outputs": {k: fill(v) for k, v in self.outputs.items()}}


def stage_output(stage: str, dataset: str, key: str = "out") -> str:
    """Where the pipeline writes output ``key`` of ``stage`` for ``dataset`` (``data/ICEWS14/graph.npz``)."""
    every = main_stages(list(variant_registry.VARIANTS))
    for s in every:
        if s.name == stage:
            return s.paths(dataset)["outputs"][key]
    raise KeyError(f"no stage {stage!r} (stages: {', '.join(s.name for s in every)})")


def _data(sub: str) -> str:
    return f"data/{DATASET}/{sub}"


def _runs(sub: str) -> str:
    return f"runs/{DATASET}/{sub}"


#: The ablation's arms (RL-RAPTOR after N pretraining epochs) and their evaluations; one folder per arm in
#: each (:func:`raptor.constants.arm_folder`), one ``seed<S>`` per seed in that.
ABLATION_ARMS, ABLATION_EVAL = _runs("ablation/arms"), _runs("ablation/eval")


def main_stages(variants: Sequence[str]) -> list[Stage]:
    """ingest -> graph -> label -> pretrain -> finetune (per variant) -> evaluate (per variant)
    -> significance -> report, per dataset; after ``params``, which resolves the params."""
    vs = [variant_registry.get(v) for v in variants]
    run_params = ("env", "train.precision", "train.device", "train.seeds")
    stages = [
        Stage("params", "resolve params.yaml, its profile and params.local.yaml into one file",
              "raptor.pipeline.stages", outputs={"out": PARAMS_FILE}, per_dataset=False, uncached=("out",)),
        Stage("ingest", "raw splits -> validated Parquet dataset", "raptor.data.ingest",
              inputs={"raw": RAW_DIR}, outputs={"out": _data("ingested")}, params=(f"datasets.{DATASET}",)),
        Stage("graph", "ingested dataset -> inverse-augmented temporal CSR graph", "raptor.data.graph",
              inputs={"data": _data("ingested")}, outputs={"out": _data("graph.npz")}),
        Stage("label", "reachability label tables of the training queries (Algorithm 1)", "raptor.labeling.stage",
              inputs={"data": _data("ingested"), "graph": _data("graph.npz")}, outputs={"out": _data("labels")},
              params=("env.max_path_length", "labeling")),
    ]
    if any(v.pretrained for v in vs):
        stages.append(Stage(
            "pretrain", "reachability pretraining, one run per seed (checkpoint at pretrain.epochs)",
            "raptor.agents.actor_critic.pretrain,raptor.agents.actor_critic.pretrain_seeds,raptor.runs.context",
            inputs={"data": _data("ingested"), "graph": _data("graph.npz"), "labels": _data("labels")},
            outputs={"out": _runs("pretrain")}, params=run_params + ("model", "pretrain"), persist=("out",)))
    for v in vs:
        agent_impl = agent_facts(v.agent)
        code = ",".join(agent_impl.code)
        inputs = {"data": _data("ingested"), "graph": _data("graph.npz")}
        extra: tuple[str, ...] = ("pretrain.epochs",) if agent_impl.iterates else ()  # the budget's parts
        if v.pretrained:
            inputs["pretrain"] = _runs("pretrain")
        elif agent_impl.iterates:
            extra += ("train.equal_total_epochs",)
        # the agent's own sections, the epoch budget (rl.epochs: every agent's) and the validation
        agent = v.params + (() if "rl" in v.params or not agent_impl.iterates else ("rl.epochs",))
        stages.append(Stage(
            f"finetune-{v.name}", f"{v.label}: {v.training} for every seed",
            f"raptor.pipeline.experiment,{code},raptor.evaluation.summary",  # the parent run's seed aggregates
            inputs=inputs, outputs={"out": _runs(f"{v.name}/train")}, params=run_params + agent + ("eval",) + extra,
            kind="finetune", variant=v.name, persist=("out",)))
        stages.append(Stage(
            f"evaluate-{v.name}", f"{v.label}: test evaluation of every seed (its agent's ranking)",
            f"raptor.pipeline.experiment,{code},raptor.reporting.report",  # the agent loads its models and may act at test time
            inputs={"data": _data("ingested"), "graph": _data("graph.npz"), "train": _runs(f"{v.name}/train")},
            outputs={"out": _runs(f"{v.name}/eval"), "metrics": _runs(f"{v.name}/{RunDir.METRICS}")},
            params=tuple(dict.fromkeys(TEST_TIME_EVAL_KEYS + ("train.precision", "train.device", "train.seeds")
                                       + ((agent_impl.precision_key,) if agent_impl.precision_key else ()))),
            kind="evaluate", variant=v.name, uncached=("metrics",), metrics=("metrics",)))
    evals = {f"eval_{v.name}": _runs(f"{v.name}/eval") for v in vs}
    if len(vs) >= 2:
        stages.append(Stage(
            "significance", "paired tests of every variant against the baseline", "raptor.reporting.report",
            inputs=evals, outputs={"out": f"reports/{DATASET}/significance.json"}, uncached=("out",)))
    report_inputs = {**{f"train_{v.name}": _runs(f"{v.name}/train") for v in vs}, **evals}
    if len(vs) >= 2:
        report_inputs["significance"] = f"reports/{DATASET}/significance.json"
    stages.append(Stage("report", "tables and figures", "raptor.reporting.report", inputs=report_inputs,
                        outputs={"out": f"reports/{DATASET}/report"}))
    return stages


def ablation_stages() -> list[Stage]:
    """The paper's pretraining-epochs ablation (its own pipeline, ``ablation/dvc.yaml``)."""
    return [
        Stage("ablation-pretrain", "one pretraining per ablation seed, snapshots at every arm's epochs",
              "raptor.agents.actor_critic.pretrain,raptor.agents.actor_critic.pretrain_seeds,raptor.runs.context",
              inputs={"data": _data("ingested"), "graph": _data("graph.npz"), "labels": _data("labels")},
              outputs={"out": _runs("ablation/pretrain")},
              params=("env", "model", "pretrain", "train.precision", "train.device", "ablation"),
              persist=("out",)),
        Stage("ablation", "RL-RAPTOR with each arm's pretraining and a fixed RL budget, its test metrics "
              "and its report",
              "raptor.pipeline.experiment,raptor.reporting.report",
              inputs={"data": _data("ingested"), "graph": _data("graph.npz"),
                      "pretrain": _runs("ablation/pretrain")},
              outputs={"out": ABLATION_ARMS, "eval": ABLATION_EVAL,
                       "report": f"reports/{DATASET}/ablation"},
              params=("env", "model", "rl", "eval", "train.precision", "train.device", "ablation"),
              persist=("out",)),
    ]


def stage_by_address(address: str, variants: Sequence[str]) -> tuple[Stage, Optional[str]]:
    """``(stage, dataset)`` of a DVC stage name such as ``finetune-raptor@ICEWS14``."""
    name, _, dataset = address.partition("@")
    for s in main_stages(variants) + ablation_stages():
        if s.name == name:
            return s, dataset or None
    raise ValueError(f"no stage named {name!r}")


def outputs(params: Params) -> list[tuple[str, str, str]]:
    """``(stage address, what, path)`` of every output of the main pipeline and the ablation, for
    the datasets and variants of ``params``."""
    rows = []
    for dataset in params.datasets:
        for s in main_stages(params.train.variants) + ablation_stages():
            if not s.per_dataset:
                continue
            for name, path in s.paths(dataset)["outputs"].items():
                rows.append((s.address(dataset), s.help if name == "out" else f"{s.help} ({name})", path))
    return rows


# ---------------------------------------------------------------------------------------------
# params: expansion of sections and resolution
# ---------------------------------------------------------------------------------------------


def expand_params(keys: Sequence[str], params: Params) -> list[str]:
    """Dotted leaf keys of ``keys``: a section becomes its result-relevant fields (``NO_EFFECT``
    fields dropped), a leaf key stays. ``{dataset}`` stays a placeholder."""
    out: list[str] = []
    for key in keys:
        if DATASET in key:
            out.append(key)
            continue
        obj = params
        for part in key.split("."):
            obj = getattr(obj, part)
        if is_dataclass(obj):
            out.extend(f"{key}.{f.name}" for f in fields(obj) if f.metadata.get("affects_results", True))
        else:
            out.append(key)
    return out


class ResolveError(ConfigError):
    """The project cannot run with these params (a stale dvc.yaml, absent raw files): the params
    stage stops before it writes anything."""


def resolve_problems(params: Params, root: str | Path) -> None:
    """Raise :class:`ResolveError` when the project at ``root`` cannot run with ``params``.

    The checks of the ``params`` stage, all done before it writes ``build/params.json``: DVC read
    the stage list from dvc.yaml, so it must match these params' variants; and a dataset's raw
    folder is checked before DVC checks it, to say what to download where instead of "missing
    dependency".
    """
    from raptor.data.ingest import IngestError, require_raw_files

    problems = check_dvc_files(root, params, require_ablation=False)
    if problems:
        raise ResolveError(problems[0])
    for name, d in params.datasets.items():
        if not d.url:
            try:
                require_raw_files(name, Path(root) / d.raw_dir, d.checksums, d.source)
            except IngestError as exc:
                raise ResolveError(str(exc)) from None


def resolve_params(source: str | Path, local: str | Path, out: str | Path,
                   root: Optional[str | Path] = None) -> Params:
    """Write the resolved params (profile and local overrides applied) to ``out`` as JSON.

    Every check comes first: the params load and validate, and with ``root`` (the ``params`` stage)
    the project is checked too (:func:`resolve_problems`); a failure raises and leaves ``out`` as it
    was, so a refused run never changes what the running stages and DVC read. The file is then
    replaced atomically, and only when its content changes (its mtime stays for unchanged params).
    """
    from raptor.common.io import atomic_write_text

    params = load_params(source, local=local)
    if root is not None:
        resolve_problems(params, root)
    text = json.dumps(params_to_dict(params), indent=1, sort_keys=True) + "\n"
    out = Path(out)
    if not out.exists() or out.read_text() != text:
        atomic_write_text(out, text)
    return params


# ---------------------------------------------------------------------------------------------
# dvc.yaml generation
# ---------------------------------------------------------------------------------------------


def code_deps(stage: Stage) -> list[str]:
    """The stage's code: its module's transitive ``raptor`` imports, as paths from the repo root."""
    from raptor.common.provenance import PACKAGE_DIR, module_files

    root = PACKAGE_DIR.parent
    # every stage command loads its params through raptor.config
    return [str(p.relative_to(root)) for p in module_files(stage.module.split(",") + ["raptor.config"])]


def _dvc_path(template: str) -> str:
    return template.replace(DATASET, "${key}").replace(RAW_DIR, "${item.raw_dir}")


def command(stage: Stage, dataset: str = "${key}") -> str:
    """The shell command of a stage (what DVC runs; the Prefect pipeline runs the same argv)."""
    if stage.name == "params":
        return (f"python -m raptor.pipeline.stages resolve --params {PARAMS_SOURCE} --local {LOCAL_PARAMS} "
                f"--out {PARAMS_FILE}")
    paths = stage.paths(dataset, "${item.raw_dir}") if dataset == "${key}" else stage.paths(dataset)
    parts = ["python -m flows", stage.flow, "--dataset", dataset]
    if stage.variant:
        parts += ["--variant", stage.variant]
    parts += ["--params", PARAMS_FILE]
    parts += [f"--in {k}={v}" for k, v in paths["inputs"].items()]
    parts += [f"--out {k}={v}" for k, v in paths["outputs"].items()]
    return " ".join(parts)


def _stage_entry(stage: Stage, params: Params, wdir: Optional[str]) -> dict:
    entry: dict = {}
    if wdir:
        entry["wdir"] = wdir
    entry["desc"] = stage.help
    entry["cmd"] = command(stage) if stage.per_dataset else command(stage, "")
    deps = [_dvc_path(p) for p in stage.inputs.values()] + code_deps(stage)
    if stage.name == "params":
        deps = [PARAMS_SOURCE, LOCAL_PARAMS] + code_deps(stage)
    entry["deps"] = deps
    if stage.params:
        keys = [k.replace(DATASET, "${key}") for k in expand_params(stage.params, params)]
        entry["params"] = [{PARAMS_FILE: keys}]
    outs = []
    for name, path in stage.outputs.items():
        if name in stage.metrics:
            continue
        opts = {}
        if name in stage.persist:
            opts["persist"] = True
        if name in stage.uncached:
            opts["cache"] = False
        outs.append({_dvc_path(path): opts} if opts else _dvc_path(path))
    entry["outs"] = outs
    if stage.metrics:
        entry["metrics"] = [{_dvc_path(stage.outputs[m]): {"cache": False}} for m in stage.metrics]
    if stage.always_changed:
        entry["always_changed"] = True
    if stage.per_dataset:
        # A literal loop (not ``${datasets}``): an entry of params may take its raw_dir from the registry.
        # Sorted: the file depends on the datasets, not on the order params lists them in.
        return {"foreach": {name: {"raw_dir": params.datasets[name].raw_dir} for name in sorted(params.datasets)},
                "do": entry}
    return entry


HEADER = """\
# GENERATED from raptor/pipeline/stages.py by `python -m raptor.pipeline.stages write`: do not edit by hand
# (`python -m raptor.pipeline.stages check` and the tests fail when this file is out of date).
# {what}
# Per-dataset stages loop over `datasets` of params.yaml (raw_dir from raptor/data/registry.py when not given); one finetune/evaluate stage per variant of
# `train.variants`. Stages read their params from build/params.json (the `params` stage resolves
# params.yaml, its profile and the untracked params.local.yaml), so DVC tracks resolved values.
"""


def ensure_local_params(root: str | Path = ".") -> Path:
    """Create an empty ``params.local.yaml`` under ``root`` when there is none (the ``params`` stage
    depends on it: a fresh clone has none); an existing one is left as it is."""
    path = Path(root) / LOCAL_PARAMS
    if not path.exists():
        path.write_text("# Local overrides of params.yaml (git-ignored): `profile: NAME` and dotted keys.\n")
    return path


#: The learning-curve plots: column -> (the run folder's file that holds it, y label), drawn by
#: ``epoch`` (0-based). Validation MRR comes from ``validation.csv``, which holds only the validated
#: epochs (``history.csv`` leaves the others' cells empty, and DVC draws an empty cell as 0).
CURVES = {"reward": (RunDir.HISTORY_CSV, "mean training reward"),
          "val_mrr": (RunDir.VALIDATION_CSV, "validation MRR")}


#: The learning curves' DVC template: DVC's ``linear`` with one colour per system (the run folder
#: without its seed) and one line per seed. Its source is ``raptor/pipeline/plots/learning.json``; ``write``
#: puts it where DVC looks for templates by name (``.dvc/plots/``).
CURVE_TEMPLATE = "learning"
CURVE_TEMPLATE_SOURCE = Path(__file__).parent / "plots" / f"{CURVE_TEMPLATE}.json"
CURVE_TEMPLATE_FILE = f".dvc/plots/{CURVE_TEMPLATE}.json"


def generated_files(params: Params) -> list[tuple[str, str]]:
    """``(path relative to the project root, text)`` of every file ``write`` generates."""
    return [(DVC_FILE, dvc_yaml(params)), (ABLATION_DVC_FILE, dvc_yaml(params, ablation=True)),
            (CURVE_TEMPLATE_FILE, CURVE_TEMPLATE_SOURCE.read_text())]


def _curve(title: str, files: dict[str, str], y_label: str) -> dict:
    return {title: {"template": CURVE_TEMPLATE, "x": "epoch", "y": files,
                    "x_label": "epoch index (0-based: the first epoch is 0)", "y_label": y_label}}


def plots(params: Params, ablation: bool = False) -> list[dict]:
    """DVC top-level ``plots`` of the main pipeline (learning curves of every variant, per dataset) or of
    the ablation (its arms' curves and validation MRR by arm). Only the stage-graph keys (``datasets``,
    ``train.variants``) may shape dvc.yaml, since a profile or params.local.yaml must not make it stale,
    so the seeds and arms drawn are the paper's protocol (the schema's defaults: seeds 0-4, arms 0, 10,
    ..., 50), not the profile's: a seed or arm not trained is reported missing by DVC, the rest drawn."""
    paper_seeds, paper_ablation = TrainConfig().seeds, AblationConfig()
    out: list[dict] = []
    for dataset in sorted(params.datasets):
        if ablation:
            arms = sorted(set(paper_ablation.pretrain_epochs))
            for column, (name, label) in CURVES.items():
                files = {f"../{ABLATION_ARMS.format(dataset=dataset)}/{arm_folder(n)}/seed{s}/{name}": column
                         for n in arms for s in paper_ablation.seeds}
                out.append(_curve(f"ablation-{column}-{dataset}", files, label))
            out.append({f"ablation-best-val-mrr-{dataset}": {
                "template": "bar_horizontal_sorted", "x": "best_val_mrr_mean", "y": {
                    f"../reports/{dataset}/ablation/ablation.csv": "pretrain_epochs"},
                "x_label": "best validation MRR (mean over seeds)", "y_label": "pretraining epochs"}})
            continue
        for column, (name, label) in CURVES.items():
            # a training-free agent (recurrency: a one-row history of its selection) has no reward column,
            # and one file without the field makes DVC drop the whole plot
            drawn = [v for v in params.train.variants
                     if column != "reward" or agent_facts(variant_registry.VARIANTS[v].agent).iterates]
            files = {f"runs/{dataset}/{v}/train/seed{s}/{name}": column for v in drawn for s in paper_seeds}
            out.append(_curve(f"learning-{column}-{dataset}", files, label))
    return out


def dvc_yaml(params: Params, ablation: bool = False) -> str:
    """The text of ``dvc.yaml`` (or of ``ablation/dvc.yaml``) for these params' variants."""
    import yaml

    if ablation:
        stages, wdir = ablation_stages(), ".."
        head = HEADER.format(what="The pretraining-epochs ablation: `dvc repro ablation/dvc.yaml`.")
        doc = {}
    else:
        stages, wdir = main_stages(params.train.variants), None
        head = HEADER.format(what="The main pipeline: `dvc repro` (or scripts/run.sh).")
        doc = {}
    doc["stages"] = {s.name: _stage_entry(s, params, wdir) for s in stages}
    doc["plots"] = plots(params, ablation)
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)


def check_dvc_files(root: str | Path, params: Params, require_ablation: bool = True) -> list[str]:
    """Problems with the generated files under ``root`` (empty when they are up to date); without
    ``require_ablation`` a project may lack ``ablation/dvc.yaml`` and the plots' template (but not have
    stale ones): the pipeline runs without them."""
    if not (Path(root) / DVC_FILE).exists():
        return [f"no {DVC_FILE} in {Path(root).resolve()}: run the stages from the project's root folder (where "
                f"{DVC_FILE} is), or make this folder a pipeline project with `python -m raptor.pipeline.stages write`; "
                "a direct form runs on paths of your own without one (`raptor STAGE --help`)"]
    problems = []
    for rel, text in generated_files(params):
        path = Path(root) / rel
        if rel != DVC_FILE and not require_ablation and not path.exists():
            continue
        have = path.read_text() if path.exists() else ""
        if have != text:
            diff = "".join(list(difflib.unified_diff(have.splitlines(True), text.splitlines(True), rel + " (now)",
                                                     rel + " (generated)"))[:40])
            problems.append(f"{rel} is out of date with raptor/pipeline/stages.py, the raptor/ modules each stage imports and "
                            f"params.yaml (datasets, train.variants): "
                            f"run `python -m raptor.pipeline.stages write`\n{diff}")
    return problems


def select_profile(source: str | Path, name: str) -> Path:
    """Set ``profile: name`` in the local overrides file beside ``source`` (created if missing; its
    other keys kept), after checking that the profile exists and the result validates."""
    import yaml

    from raptor.config import local_overrides
    from raptor.common.io import atomic_write_text

    local = Path(source).parent / LOCAL_PARAMS
    current = local_overrides(local)
    # unknown profile or bad values: an error naming the file they are in (params.yaml, its profile or
    # the local file), nothing written
    load_params(source, overrides={"profile": name}, local=local)
    current["profile"] = name
    header = "# Local overrides of params.yaml (git-ignored): `profile: NAME` and dotted keys.\n"
    atomic_write_text(local, header + yaml.safe_dump(current, sort_keys=False))
    return local


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raptor.pipeline.stages", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve", help="resolve params.yaml (+ profile, + params.local.yaml) into one JSON file")
    r.add_argument("--params", default=PARAMS_SOURCE)
    r.add_argument("--local", default=LOCAL_PARAMS)
    r.add_argument("--out", default=PARAMS_FILE)
    for name, help_ in (("write", "write dvc.yaml, ablation/dvc.yaml and the plots' template from the declaration"),
                        ("check", "fail if dvc.yaml or ablation/dvc.yaml is out of date")):
        p = sub.add_parser(name, help=help_)
        p.add_argument("--params", default=PARAMS_SOURCE)
        p.add_argument("--root", default=".")
    sub.add_parser("list", help="list the stages with their code dependencies")
    pr = sub.add_parser("profile", help=f"select a profile in {LOCAL_PARAMS} (untracked), keeping its other keys")
    pr.add_argument("name")
    pr.add_argument("--params", default=PARAMS_SOURCE)
    args = parser.parse_args(argv)
    try:
        if args.command == "resolve":
            from raptor.pipeline.projectlock import ProjectBusy, project_lock

            root = Path(args.params).parent
            try:
                with project_lock(root):  # a stage of a running `dvc repro` reads this file: not under it
                    params = resolve_params(args.params, args.local, args.out, root=root)
            except ProjectBusy as exc:
                print(f"raptor.pipeline.stages: error: {exc}", file=sys.stderr)
                return 1
            print(f"params: profile {params.profile!r}, datasets {', '.join(params.datasets)}, "
                  f"variants {', '.join(params.train.variants)} -> {args.out}")
        elif args.command == "write":
            params = load_params(args.params)
            ensure_local_params(args.root)
            for rel, text in generated_files(params):
                path = Path(args.root) / rel
                if not path.exists() or path.read_text() != text:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
                    print(f"wrote {path}")
        elif args.command == "check":
            problems = check_dvc_files(args.root, load_params(args.params))
            for p in problems:
                print(p, file=sys.stderr)
            return 1 if problems else 0
        elif args.command == "profile":
            select_profile(args.params, args.name)
        else:
            for s in main_stages(Params().train.variants) + ablation_stages():
                print(f"{s.name:22s} {s.module:20s} {' '.join(Path(p).name for p in code_deps(s))}")
    except ConfigError as exc:
        print(f"raptor.pipeline.stages: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
