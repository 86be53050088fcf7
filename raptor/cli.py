"""The ``raptor`` command line: every stage of the pipeline, then the library commands.

Stages: one subcommand per stage kind of the declaration (:mod:`raptor.pipeline.stages`, what dvc.yaml is
generated from), named as in dvc.yaml and ``python -m flows``, with the same options
(:mod:`raptor.commands.stage`); adding a stage to the declaration adds its subcommand. A stage runs
as its Prefect flow, exactly as ``python -m flows STAGE`` runs it.

Some stages also have a direct form (``raptor/commands/<stage>.py``): given one of its own options
(``raptor graph --data D --out G``), the stage's library function runs on the paths given, in this
process, without Prefect, reading params.yaml.

Library commands live in ``raptor/commands/<name>.py`` exposing ``NAME``, ``HELP`` (one line: what
it reads and writes), ``register(parser)`` and ``run(args) -> int``. Entry points stay thin: parse
paths, load params, call one library function.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from dataclasses import dataclass, field

from raptor.config import ConfigError
from raptor.common.io import OutputError, RunMismatchError

#: Direct forms of stages (library calls on given paths, no Prefect): stage kind -> module.
DIRECT_MODULES: dict[str, str] = {
    "ingest": "raptor.commands.ingest",
    "graph": "raptor.commands.graph",
    "label": "raptor.commands.label",
    "evaluate": "raptor.commands.evaluate",
    "report": "raptor.commands.report",
}

#: The direct forms that read ``--dataset`` (ingest: the params entry of a raw folder); the others take
#: the dataset from their paths, so ``--dataset`` there is refused rather than ignored.
DIRECT_READS_DATASET = ("ingest",)

#: Library commands (not stages), in the order ``raptor --help`` lists them.
LIBRARY_MODULES: list[str] = [
    "raptor.commands.synthetic",
    "raptor.commands.train",
    "raptor.commands.sweep",
    "raptor.commands.sweeps",
    "raptor.commands.rescore",
    "raptor.commands.collect",
    "raptor.commands.results",
    "raptor.commands.pages",
    "raptor.commands.explain",
    "raptor.commands.ui",
]

#: Options of the stage form that a direct form shares (same name, same meaning).
SHARED = ("--out", "--params", "--dataset")


class Parser(argparse.ArgumentParser):
    """An argument error is one line (``raptor graph: error: ...``), not the usage and a line."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}{_did_you_mean(message)} (see `{self.prog} --help`)\n")


def _did_you_mean(message: str) -> str:
    """``; did you mean 'train'?`` for argparse's ``invalid choice: 'trian' (choose from ...)``."""
    import difflib
    import re

    m = re.match(r"argument \S+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if not m:
        return ""
    close = difflib.get_close_matches(m.group(1), re.findall(r"'([^']*)'", m.group(2)) or m.group(2).split(", "), 1)
    return f"; did you mean {close[0]!r}?" if close else ""


class _Version(argparse.Action):
    """``--version``: :func:`version`, computed only when asked (it runs git)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit(0)


def version() -> str:
    """``raptor-tkg 0.1.0``, with the commit of a git checkout (``(commit 1f67121, modified)``)."""
    import subprocess
    from importlib.metadata import PackageNotFoundError, version as installed

    try:
        text = f"raptor-tkg {installed('raptor-tkg')}"
    except PackageNotFoundError:
        text = "raptor-tkg (not installed)"
    root = Path(__file__).resolve().parents[1]
    try:
        git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True,  # noqa: E731
                                        timeout=10).stdout.strip()
        commit = git("rev-parse", "--short=7", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return text + (f" (commit {commit}{', modified' if dirty else ''})" if commit else "")


@dataclass
class _Direct:
    """The direct form's own options (those it shares with the stage form left out)."""

    module: object
    actions: list = field(default_factory=list)
    required: list = field(default_factory=list)
    needs_out: bool = False


class _DirectOptions:
    """Adds a direct form's options to a stage's parser, in their own group: an option the stage
    form has already (``SHARED``) is not added again; ``required`` is checked only in the direct form."""

    def __init__(self, group, info: _Direct):
        self.group, self.info = group, info

    def add_argument(self, *flags, **kwargs):
        required = kwargs.pop("required", False)
        if any(f in SHARED for f in flags):
            if "--out" in flags and required:
                self.info.needs_out = True
            return None
        action = self.group.add_argument(*flags, **kwargs)
        self.info.actions.append(action)
        if required:
            self.info.required.append(action)
        return action

    def add_mutually_exclusive_group(self, **kwargs):
        return _DirectOptions(self.group.add_mutually_exclusive_group(**kwargs), self.info)


def _wrap(text: str, width: int = 100) -> str:
    """Each line filled to ``width`` (an indented line's continuation indented further)."""
    import textwrap

    return "\n".join(textwrap.fill(line, width, subsequent_indent="      " if line.startswith("  ") else "")
                     for line in text.split("\n"))


def _listing(rows: list[tuple[str, str]]) -> str:
    return "\n".join(f"  {name:<18}{help_}" for name, help_ in rows)


def build_parser() -> argparse.ArgumentParser:
    from raptor.commands.stage import add_params_arguments, add_stage_arguments, declaration, kind_help

    stage_rows, library_rows = [], []
    parser = Parser(prog="raptor", formatter_class=argparse.RawDescriptionHelpFormatter, description=_wrap(
        "RAPTOR for temporal knowledge graph forecasting. `dvc repro` (or scripts/run.sh) runs the pipeline "
        "end to end; `raptor STAGE` runs one stage, as dvc.yaml runs it (`python -m flows STAGE`)."))
    parser.add_argument("--version", action=_Version, help="the package's version and commit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", help="a stage or a library command (below)")
    for kind, stages in declaration().items():
        line, description = kind_help(kind, stages)
        stage_rows.append((kind, line))
        if kind == "params":
            description = (f"Stage params: {line} (what `dvc repro` runs first; a stage run without --params "
                           "runs it first too). The same as the command dvc.yaml runs: `python -m raptor.pipeline.stages resolve`.")
        else:
            description = (f"Stage {description}\nThe same as `python -m flows {kind}`; every path defaults to the "
                           "one dvc.yaml gives it for the dataset.")
        p = sub.add_parser(kind, description=_wrap(description), formatter_class=argparse.RawDescriptionHelpFormatter)
        if kind == "params":
            add_params_arguments(p)
            p.set_defaults(_kind=kind, _direct=None)
            continue
        add_stage_arguments(p, kind, stages)
        direct = None
        if kind in DIRECT_MODULES:
            module = importlib.import_module(DIRECT_MODULES[kind])
            direct = _Direct(module)
            group = p.add_argument_group("direct form", _wrap(
                f"{module.HELP} Any of these options (or a bare --out PATH) selects it: the "
                "library function runs on the paths given, in this process, without Prefect; --params is then a "
                "params file (default: params.yaml)."))
            module.register(_DirectOptions(group, direct))
        p.set_defaults(_kind=kind, _direct=direct)
    for name in LIBRARY_MODULES:
        module = importlib.import_module(name)
        library_rows.append((module.NAME, module.SHORT))
        p = sub.add_parser(module.NAME, description=module.HELP)
        module.register(p)
        p.set_defaults(_run=module.run)
    parser.epilog = (_wrap("stages, in pipeline order (dvc.yaml's names; --dataset, --params, --in NAME=PATH, "
                           "--out NAME=PATH, --variant: `raptor STAGE --help`):") + "\n" + _listing(stage_rows) +
                     "\n\nlibrary commands (on paths given):\n" + _listing(library_rows))
    return parser


def _select_direct(args: argparse.Namespace, direct: _Direct) -> bool:
    """Whether the direct form was asked for; if so, ``args`` made what its module's ``run`` reads."""
    from raptor.commands.stage import StageArgumentError, declaration, is_pair

    outs = [n for s in declaration()[args._kind] for n in s.outputs]
    first: dict = {}  # two options may share a dest (--strict-history, --no-strict-history): the first's default
    for a in direct.actions:
        first.setdefault(a.dest, a)
    own = [a.option_strings[0] for a in first.values() if getattr(args, a.dest) != a.default]
    bare = [v for v in args.outputs if not is_pair(v, outs)]
    if not own and not bare:
        return False
    stage_only = [f for f, given in (("--in", args.inputs), ("--variant", getattr(args, "variant", None)),
                                     ("--out NAME=PATH", len(bare) < len(args.outputs))) if given]
    if stage_only:
        chosen = own or ["--out PATH"]
        raise StageArgumentError(f"{', '.join(chosen)} select{'s' if len(chosen) == 1 else ''} the direct form, "
                                 f"{', '.join(stage_only)} the stage form: use one")
    if len(bare) > 1:
        raise StageArgumentError("--out: the direct form writes one output (--out PATH)")
    if getattr(args, "dataset", None) and args._kind not in DIRECT_READS_DATASET:
        raise StageArgumentError(f"--dataset: the direct form of {args._kind} reads the dataset given with its paths "
                                 "(--data); drop --dataset, or drop the direct form's options for the stage form")
    args.out = bare[0] if bare else None
    missing = [a.option_strings[0] for a in direct.required if getattr(args, a.dest) is None]
    if direct.needs_out and args.out is None:
        missing.append("--out")
    if missing:
        why = "" if own else " (a bare --out PATH selects the direct form; the stage form takes --out NAME=PATH)"
        raise StageArgumentError(f"the direct form needs {', '.join(missing)}{why}")
    args.params = args.params or "params.yaml"
    return True


def _run_stage(args: argparse.Namespace) -> int:
    from raptor.commands.stage import execute, run_params

    if args._kind == "params":
        return run_params(args)
    if args._direct is not None and _select_direct(args, args._direct):
        return int(args._direct.module.run(args) or 0)
    result = execute(args._kind, args)
    print(json.dumps(result, default=str))  # whole: the last line is read back as JSON
    return 0


def main(argv: list[str] | None = None) -> int:
    from raptor.pipeline.projectlock import ProjectBusy

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if hasattr(args, "_kind"):
            return _run_stage(args)
        return int(args._run(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError, OutputError, RunMismatchError, ProjectBusy,
            PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError) as exc:
        # Known user errors: one clear line, no traceback.
        print(f"raptor {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `raptor params --show | head`: the reader of stdout left; no traceback about it
        import os

        try:
            sys.stdout.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's recipe: no error at exit
            return 1
        raise  # another pipe than stdout's: not the reader leaving


if __name__ == "__main__":
    sys.exit(main())
