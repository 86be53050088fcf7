"""The stage form, shared by ``raptor STAGE`` and ``python -m flows STAGE``: one subcommand per
stage kind of the declaration (:mod:`raptor.pipeline.stages`), with the same options in both front doors.

    raptor finetune --dataset ICEWS14 --variant raptor
    python -m flows finetune --dataset ICEWS14 --variant raptor --params build/params.json \\
        --in data=data/ICEWS14/ingested --in graph=data/ICEWS14/graph.npz ...   (what dvc.yaml runs)

Every path defaults to the one dvc.yaml gives the stage for that dataset (and variant), so the two
lines above do the same. Without ``--params`` the params stage runs first (params.yaml, its profile
and params.local.yaml resolved into build/params.json), as ``dvc repro STAGE`` runs it first.

The stage runs its flow (``flows/stages.py``): ``raptor`` imports ``flows`` only inside
:func:`execute`, so ``raptor/`` stays importable without Prefect. The flows add the orchestration
(seeds mapped over a task runner, MLflow parent runs, artifacts, the pipeline invocation) around
the library calls; running them is the only way to get the same result as the pipeline. With no
Prefect API configured the flow's function runs without Prefect (``flows/invocation.py``).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: Not a flow: the params stage runs ``python -m raptor.pipeline.stages resolve`` (a library call).
PARAMS_KIND = "params"


class StageArgumentError(ValueError):
    """A stage's arguments do not fit its declaration (an unknown --in name, a missing input...)."""


def declaration() -> dict[str, list]:
    """Stage kind (``Stage.flow``: the subcommand) -> its stages, in pipeline order: the main
    pipeline (every variant of the registry), then the ablation."""
    from raptor.agents import variants
    from raptor.pipeline.stages import ablation_stages, main_stages

    kinds: dict[str, list] = {}
    for s in main_stages(list(variants.VARIANTS)) + ablation_stages():
        kinds.setdefault(s.flow, []).append(s)
    return kinds


def flow_kinds() -> list[str]:
    """The kinds ``python -m flows`` runs (every per-dataset stage; ``params`` is a library call)."""
    return [k for k, ss in declaration().items() if ss[0].per_dataset]


def _variants_of(stages: list) -> list[str]:
    return [s.variant for s in stages if s.variant]


def kind_help(kind: str, stages: list) -> tuple[str, str]:
    """``(one line for a listing, the description)`` of a stage kind."""
    vs = _variants_of(stages)
    if not vs:
        return stages[0].help, f"{kind}: {stages[0].help}."
    names = ", ".join(s.name for s in stages)
    line = f"one variant (--variant), every seed: dvc.yaml's {names}"
    return line, f"{kind}: {line}.\n" + "\n".join(f"  --variant {s.variant}: {s.help}" for s in stages)


def _names(stages: list, what: str) -> list[str]:
    out: list[str] = []
    for s in stages:
        for n in getattr(s, what):
            if n not in out:
                out.append(n)
    return out


def _templates(stages: list, what: str) -> str:
    """``data=data/<dataset>/ingested, ...``: each name with the path dvc.yaml gives it (the first
    stage's that has the name; a variant's paths name it)."""
    from raptor.pipeline.stages import DATASET, RAW_DIR

    seen: dict[str, str] = {}
    for s in stages:
        for name, path in getattr(s, what).items():
            seen.setdefault(name, path.replace(DATASET, "<dataset>").replace(RAW_DIR, "<raw_dir>").replace(s.variant or "\0", "<variant>"))
    return ", ".join(f"{n}={p}" for n, p in seen.items()) or "none"


def add_stage_arguments(p, kind: str, stages: list, prog: str = "raptor") -> None:
    """The stage form's options of ``kind`` (identical in ``raptor`` and ``python -m flows``)."""
    from raptor.pipeline.stages import PARAMS_FILE

    p.add_argument("--dataset", help="dataset name, a key of `datasets` in params.yaml (default: the only one listed)")
    p.add_argument("--params", default=None, help=f"resolved params file (default: {PARAMS_FILE}, made first from "
                   "params.yaml, its profile and params.local.yaml, as the params stage does)")
    p.add_argument("--in", dest="inputs", action="append", default=[], metavar="NAME=PATH",
                   help=f"an input of the stage; default: the path dvc.yaml gives it ({_templates(stages, 'inputs')})")
    p.add_argument("--out", dest="outputs", action="append", default=[], metavar="NAME=PATH",
                   help=f"an output of the stage; default: the path dvc.yaml gives it ({_templates(stages, 'outputs')})")
    vs = _variants_of(stages)
    if vs:
        p.add_argument("--variant", choices=vs, help="the variant (required; a name of train.variants)")


def pairs(values: list[str], flag: str, names: list[str], kind: str) -> dict[str, str]:
    """``NAME=PATH`` options as a dict; NAME must be one the declaration gives ``kind``."""
    out = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            raise StageArgumentError(f"{flag} {v!r}: expected NAME=PATH")
        if name not in names:
            raise StageArgumentError(f"{flag} {name}: {kind} has no such {'input' if flag == '--in' else 'output'} "
                                     f"(its {'inputs' if flag == '--in' else 'outputs'}: {', '.join(names) or 'none'})")
        out[name] = path
    return out


def is_pair(value: str, names: list[str]) -> bool:
    name, sep, _ = value.partition("=")
    return bool(sep) and name in names


@dataclass
class StageCall:
    """What :func:`flows.stages.run_stage` is called with."""

    kind: str
    dataset: str
    params: str
    inputs: dict
    outputs: dict
    variant: Optional[str] = None


def resolve_params_file() -> str:
    """The params stage, in this process (the same library call as ``python -m raptor.pipeline.stages resolve``)."""
    from raptor.config import LOCAL_PARAMS
    from raptor.pipeline.projectlock import project_lock
    from raptor.pipeline.stages import PARAMS_FILE, PARAMS_SOURCE, resolve_params

    with project_lock("."):
        params = resolve_params(PARAMS_SOURCE, LOCAL_PARAMS, PARAMS_FILE, root=".")
    print(f"params: profile {params.profile!r}, datasets {', '.join(params.datasets)}, variants "
          f"{', '.join(params.train.variants)} -> {PARAMS_FILE}", file=sys.stderr)
    return PARAMS_FILE


def stage_call(kind: str, args: argparse.Namespace) -> StageCall:
    """The stage's dataset, params file and paths: each path given, else dvc.yaml's for the dataset
    (and variant), checked against the declaration; inputs must exist."""
    from raptor.config import load_resolved
    from raptor.pipeline.stages import ablation_stages, main_stages

    stages = declaration()[kind]
    variant = getattr(args, "variant", None)
    vs = _variants_of(stages)
    if vs and not variant:  # before the params stage runs: a usage error costs nothing
        raise StageArgumentError(f"--variant: {kind} runs one variant: give one of {', '.join(vs)}")
    params_path = args.params or resolve_params_file()
    if not Path(params_path).is_file():
        raise StageArgumentError(f"--params {params_path}: not found (the params stage writes it: `raptor params`)")
    params = load_resolved(params_path)
    dataset, d = params.dataset(args.dataset)
    name = f"{kind}-{variant}" if variant else stages[0].name
    # The project's stages (dvc.yaml's, for its train.variants), else the declaration's.
    project = {s.name: s for s in main_stages(params.train.variants) + ablation_stages()}
    stage = project.get(name) or next(s for s in stages if s.name == name)
    paths = stage.paths(dataset, d.raw_dir or "")
    inputs = {**paths["inputs"], **pairs(args.inputs, "--in", list(stage.inputs), kind)}
    outputs = {**paths["outputs"], **pairs(args.outputs, "--out", list(stage.outputs), kind)}
    for key, path in inputs.items():
        if key == "raw":  # ingest names what is missing in its raw folder itself (or fetches a url)
            continue
        if not Path(path).exists():
            before = next((s for s in main_stages(params.train.variants) + ablation_stages()
                           if path in s.paths(dataset)["outputs"].values()), None)
            made_by = ""
            if before is not None:
                cmd = f"raptor {before.flow} --dataset {dataset}" + (f" --variant {before.variant}" if before.variant else "")
                made_by = f" (run `{cmd}` first)"
            raise StageArgumentError(f"--in {key}={path}: not found{made_by}")
    return StageCall(kind, dataset, params_path, inputs, outputs, variant)


def import_flows(module: str = "flows.stages"):
    """``module`` of the orchestration shell, from the project checkout (``flows/`` is not installed
    with the library): the working directory's, else the one beside this ``raptor`` package.

    The one place where the library's CLI hands over to the shell, at run time only (``raptor/``
    imports no orchestration code: tests/test_stages.py)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != "flows":
            raise
    roots = [Path.cwd(), Path(__file__).resolve().parents[2]]
    root = next((r for r in roots if (r / "flows" / "__init__.py").is_file()), None)
    if root is None:
        raise FileNotFoundError("a stage runs as its Prefect flow, from the project checkout (flows/): run it in "
                                "the project's root")
    sys.path.insert(0, str(root))
    return importlib.import_module(module)


def execute(kind: str, args: argparse.Namespace):
    """Run one stage as ``python -m flows KIND`` does: :func:`flows.stages.run_stage` (under the
    project lock, a subflow of its pipeline invocation when there is one). Says on stderr, when it
    ends, what it wrote where (stdout's last line stays the result's JSON)."""
    call = stage_call(kind, args)
    fs = import_flows()
    result = fs.run_stage(call.kind, call.dataset, call.params, call.inputs, call.outputs, call.variant)
    print(done_line(call), file=sys.stderr)
    return result


def done_line(call: StageCall) -> str:
    """``graph ICEWS14: done -> out=data/ICEWS14/graph.npz``."""
    who = f"{call.kind} {call.dataset}" + (f" {call.variant}" if call.variant else "")
    return f"{who}: done -> " + ", ".join(f"{name}={path}" for name, path in call.outputs.items())


# ---------------------------------------------------------------------------------------------
# the params stage (a library call, not a flow)
# ---------------------------------------------------------------------------------------------


def add_params_arguments(p) -> None:
    """``raptor params``: the arguments of the command dvc.yaml runs for the params stage."""
    from raptor.config import LOCAL_PARAMS
    from raptor.pipeline.stages import PARAMS_FILE, PARAMS_SOURCE

    p.add_argument("--params", default=PARAMS_SOURCE, help="params file (default: %(default)s)")
    p.add_argument("--local", default=LOCAL_PARAMS, help="local overrides (default: %(default)s; missing = none)")
    p.add_argument("--out", default=PARAMS_FILE, help="the resolved params (default: %(default)s)")
    p.add_argument("--show", nargs="?", const="", metavar="KEY",
                   help="print the resolved params (or one section or dotted key: rl, rl.epochs) as YAML and "
                        "write nothing: what a run with this params.yaml, profile and local file would read")


def run_params(args: argparse.Namespace) -> int:
    from raptor.pipeline.stages import main

    if args.show is not None:
        return show_params(args.params, args.local, args.show)
    return main(["resolve", "--params", args.params, "--local", args.local, "--out", args.out])


def show_params(source: str, local: str, key: str) -> int:
    """Print the resolved params of ``source`` with ``local`` (missing = none), or the value at the dotted
    ``key``, as YAML; nothing is written."""
    import yaml

    from raptor.config import load_params, params_to_dict

    value = params_to_dict(load_params(source, local=local))
    for part in key.split(".") if key else ():
        if not isinstance(value, dict) or part not in value:
            known = ", ".join(value) if isinstance(value, dict) else "none: a value"
            raise ValueError(f"--show {key}: no key {part!r} there (keys: {known})")
        value = value[part]
    print(yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip()
          if isinstance(value, (dict, list)) else yaml.safe_dump(value).removesuffix("\n...\n").rstrip())
    return 0
