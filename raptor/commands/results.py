"""`raptor results`: the results page (docs/results.md here) generated from the runs' artifacts."""

from __future__ import annotations

import argparse
import shlex

NAME = "results"
#: One line for `raptor --help`.
SHORT = 'the results page, from result folders tracked by git'
HELP = ("write the results page from one or more result folders (a pipeline workspace: runs/ and reports/; "
        "or a folder of `raptor train --out <dataset>/<variant>/seed<S>` runs): test metrics with budget, "
        "precision and tie rule per row, significance, the paper's layout (its * marks: better than the baseline, "
        "one-sided t-test over seeds, p < 0.05), learning curves with the paper's numbers as reference lines, "
        "and the pretraining-epochs ablation where the workspace has one (`dvc repro ablation/dvc.yaml`). No number on the page is typed. The folders must be tracked by git "
        "(`raptor collect` them into results/ and `git add` them), so a clone can make the page again.")


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", metavar="[NAME=]FOLDER[+FOLDER...]",
                   help="result folders, in the page's order; NAME labels its rows (default: the folder's name). "
                   "FOLDER+FOLDER pools their runs into one set per dataset (seeds trained in different sessions: "
                   "disjoint seeds, the same params and data), its significance tests recomputed over all the seeds; a FOLDER "
                   "with a wildcard, quoted (\"paper=results/paper-budget-ICEWS14/*\"), stands for the folders it matches")
    p.add_argument("--out", default="results.md", help="the Markdown page (default: %(default)s)")
    p.add_argument("--figures", help="figure folder (default: figures/results beside --out)")
    p.add_argument("--untracked", action="store_true", help="accept folders git does not track: a draft page, "
                   "marked as such at its top")


def run(args: argparse.Namespace) -> int:
    from raptor.reporting.results import write_from_sources

    command = "raptor results " + " ".join(shlex.quote(s) for s in args.sources) + f" --out {shlex.quote(args.out)}"
    if args.figures:
        command += f" --figures {shlex.quote(args.figures)}"
    if args.untracked:
        command += " --untracked"
    summary = write_from_sources(args.sources, args.out, args.figures, command=command, untracked=args.untracked)
    for name, dataset, vs in summary["sets"]:
        print(f"{name} / {dataset}: {', '.join(vs)}")
    print(f"results -> {summary['out']}")
    return 0
