"""`raptor sweeps`: the sweeps page (docs/sweeps-results.md here) generated from finished sweep folders."""

from __future__ import annotations

import argparse

NAME = "sweeps"
#: One line for `raptor --help`.
SHORT = "the sweeps page, from finished sweeps' results folders"
HELP = ("write the sweeps page from finished sweeps' results folders (`python -m flows sweep NAME` writes "
        "results/sweeps/<NAME>/<dataset>/): per sweep the arms' validation and test metrics with their notes, "
        "epochs and tests against the default arm, test MRR per arm and every arm's validation curve. "
        "No number on the page is typed.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", metavar="[TITLE=]FOLDER",
                   help="results folders of sweeps, in the page's order; TITLE heads its section (default: the folder's name)")
    p.add_argument("--out", default="sweeps.md", help="the Markdown page (default: %(default)s)")
    p.add_argument("--figures", help="figure folder (default: figures/sweeps beside --out)")


def run(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from raptor.reporting.sweep_page import write_sweep_page

    folders = []
    for spec in args.sources:
        title, sep, folder = spec.partition("=")
        if not sep or not title or "/" in title:
            title, folder = Path(spec).name, spec
        folders.append((title, folder))
    command = "raptor sweeps " + " ".join(shlex.quote(s) for s in args.sources) + f" --out {shlex.quote(args.out)}"
    if args.figures:
        command += f" --figures {shlex.quote(args.figures)}"
    out = write_sweep_page(folders, args.out, args.figures, command=command)
    print(f"sweeps -> {out}")
    return 0
