"""The ``raptor`` command line: one subcommand per pipeline stage.

Each stage lives in ``raptor/commands/<name>.py`` exposing ``NAME``, ``HELP`` (one line: what it
reads and writes), ``register(parser)`` and ``run(args) -> int``. Entry points stay thin: parse
paths, load params, call one library function.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .config import ConfigError
from .io import OutputError, RunMismatchError

#: Stage modules, in pipeline order.
COMMAND_MODULES: list[str] = [
    "raptor.commands.synthetic",
    "raptor.commands.ingest",
    "raptor.commands.graph",
    "raptor.commands.label",
    "raptor.commands.train",
    "raptor.commands.evaluate",
    "raptor.commands.report",
    "raptor.commands.results",
    "raptor.commands.sweep",
    "raptor.commands.collect",
    "raptor.commands.sweeps",
    "raptor.commands.explain",
    "raptor.commands.ui",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raptor",
        description=(
            "RAPTOR for temporal knowledge graph forecasting. Pipeline: ingest -> graph -> label -> "
            "pretrain -> finetune -> evaluate -> significance -> report. `dvc repro` runs it end to end; "
            "each subcommand runs one stage."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="STAGE")
    for name in COMMAND_MODULES:
        module = importlib.import_module(name)
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.register(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except (ConfigError, FileNotFoundError, ValueError, OutputError, RunMismatchError) as exc:
        # Known user errors: one clear line, no traceback.
        print(f"raptor {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
