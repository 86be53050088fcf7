"""Issues 37 and 38: one system's seeds at the paper's budget on one GPU, in one command, by library
calls only (the device machine has PyTorch, numba, pyarrow and pandas, not Prefect, MLflow or DVC).

Ingests the dataset (``--dataset``: from its registered raw folder, ``../shared/data/NAME``, exactly as
``raptor ingest --dataset NAME`` does, so the ingested data, and with it the runs' data fingerprint, equal
a CPU run's; or ``--raw FOLDER``, whose runs then pool with no other), builds the graph, trains
``--variant``'s seeds with :func:`raptor.pipeline.experiment.run_variants` (the actor-critic agent stacks
them into one batched step: :mod:`raptor.agents.actor_critic.seeds`; TITer's train one after the other)
for ``--epochs`` RL epochs with the repo's params (profile paper) and ``--set KEY=VALUE`` overrides, then
evaluates each seed's best model on the test split (:func:`raptor.pipeline.experiment.evaluate_model`).
For RL-RAPTOR it first labels the training pairs (:func:`raptor.labeling.stage.label_dataset`) and
pretrains the seeds ``pretrain.epochs`` epochs at once
(:func:`raptor.agents.actor_critic.pretrain_seeds.pretrain_runs`, one batched step), then fine-tunes each
from its own pretrained weights. ``train.device`` stays the params' (``auto``: the GPU where there is
one) unless ``--device`` asks for another than ``auto`` would pick, so the runs' params equal those of
the same configuration trained on a CPU.

The run folders are laid out as ``scripts/longrun.sh``'s (``DATASET/VARIANT/seedS/{pretrain,rl,eval}``)
and what the results page reads of them is collected (:func:`raptor.reporting.results.collect`) into
``--out``/records, a records folder like a CPU sitting's, with a ``COMMIT`` file when ``--commit`` is
given: committed under a campaign's folder (``results/paper-budget-ICEWS14/<sitting>``) it pools with
the CPU sittings' seeds when the params and data are the same (``--set train.precision=float32`` for the
float32 campaign).

What comes back (``--out``, small files only: a checkpoint of the paper's model is 21.9 MB, more than
a lent machine returns per file): ``records/`` as above (``try-records/`` after a try on a subset of the
queries, which no page should read), per seed ``history.json``, ``summary.json``,
the test ``metrics.json``, and ``run.json`` (the command's arguments, the device, the commit if given,
and the seconds of each part). ``--pack``: all of it as one file, ``--out``/paper_seeds.tgz (a lent machine sends back at most 8 files; on
2026-11-27 five seeds' files were left out). ``--deadline S``: the training stops cleanly (a run folder's checkpoint
is written every epoch) when S seconds have passed, and the files of what was trained come back.

Run: ``python benchmarks/gpu_paper_seeds.py --variant pure_rl --out $OUT --commit REV --set
train.precision=float32`` with ``../shared/data/ICEWS14`` there (on a lent machine, which has no
``../shared``: ``mkdir -p ../shared/data && cp -r .gpu/ICEWS14 .gpu/SHA256SUMS ../shared/data/`` first,
from the carried copy ``.gpu`` of ``../shared/data/ICEWS14`` and ``../shared/data/SHA256SUMS``).
(a CPU try: ``--device cpu --epochs 1 --seeds 0 1 --train-queries 512 --valid-queries 64 --test-queries 64``;
for RL-RAPTOR add ``--variant raptor --set pretrain.epochs=1 --set train.stacked_seeds=2``: tried so on 2026-11-27).
``python benchmarks/gpu_paper_seeds.py --table FOLDER``: the docs' table of a returned folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from raptor.agents import variants  # noqa: E402
from raptor.agents.actor_critic.pretrain_seeds import pretrain_runs  # noqa: E402
from raptor.common.io import atomic_write_json  # noqa: E402
from raptor.config import load_params  # noqa: E402
from raptor.data.graph import build_graph  # noqa: E402
from raptor.common.runtime import resolve_device  # noqa: E402
from raptor.data.ingest import dataset_options, ingest  # noqa: E402
from raptor.labeling.stage import label_dataset  # noqa: E402
from raptor.pipeline.experiment import evaluate_model, load_context, run_variants  # noqa: E402
from raptor.reporting.results import collect  # noqa: E402
from raptor.runs.rundir import RunDir, RunOptions  # noqa: E402


class Deadline(Exception):
    pass


def parse_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main():
    if sys.argv[1:2] == ["--table"]:
        print(table(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ICEWS14", help="a dataset of the registry, ingested from its raw folder "
                    "as `raptor ingest --dataset NAME` does (default: %(default)s)")
    ap.add_argument("--raw", help="instead: a folder of the dataset's text files (its runs pool with no other's)")
    ap.add_argument("--variant", default="pure_rl", choices=["pure_rl", "raptor", "titer"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    ap.add_argument("--epochs", type=int, default=None, help="RL epochs (default: params, the paper's 400)")
    ap.add_argument("--out", required=True, help="where the small result files go")
    ap.add_argument("--work", default="/tmp/paper-seeds", help="data, graph and run folders (not returned)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--params", default=str(Path(__file__).resolve().parents[1] / "params.yaml"),
                    help="the params file (default: the repo's params.yaml), read with profile paper")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a params override")
    ap.add_argument("--deadline", type=float, default=0, help="stop training after this many seconds (0: none)")
    ap.add_argument("--commit", default="", help="the commit the working tree is (recorded)")
    ap.add_argument("--pack", action="store_true", help="return everything as one file, --out/paper_seeds.tgz "
                    "(a lent machine sends back at most 8 files)")
    ap.add_argument("--train-queries", type=int, default=0, help="(a try) train on the first N queries only")
    ap.add_argument("--valid-queries", type=int, default=0, help="(a try) validate on the first N queries only")
    ap.add_argument("--test-queries", type=int, default=0, help="(a try) test on the first N queries only")
    args = ap.parse_args()
    started = time.perf_counter()
    out, work = Path(args.out), Path(args.work)
    packed = out
    if args.pack:  # everything into one file: a lent machine sends back at most 8 files, 16 MiB each
        out = work / "out"
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    record = {"args": vars(args), "torch": torch.__version__,
              "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "seconds": {}}

    overrides = {k: parse_value(v) for k, v in (s.split("=", 1) for s in args.set)}
    if resolve_device(overrides.get("train.device", "auto")) != torch.device(args.device):
        overrides["train.device"] = args.device  # only then: a run's params name `auto` like a CPU run's
    params = load_params(args.params, {"profile": "paper", **overrides})
    t = time.perf_counter()
    if not (work / "data" / "meta.json").exists():
        if args.raw:
            ingest(args.raw, work / "data")
        else:
            name, d = params.dataset(args.dataset)
            ingest(d.raw_dir, work / "data", dataset_options(name, d))
        build_graph(work / "data", work / "graph.npz")
    record["seconds"]["ingest_and_graph"] = time.perf_counter() - t
    ctx = load_context(work / "data", work / "graph.npz", params)
    if args.train_queries:
        ctx = replace(ctx, train_queries=ctx.train_queries[:args.train_queries])
    for split, n in (("valid", args.valid_queries), ("test", args.test_queries)):
        if n:
            ctx.dataset.splits[split] = ctx.dataset.splits[split][:n]

    def stop_at_deadline(phase, epoch, row):
        if args.deadline and time.perf_counter() - started > args.deadline and not row.get("replayed"):
            raise Deadline(f"deadline of {args.deadline:.0f} s passed after epoch {epoch + 1}")

    dataset = json.loads((work / "data" / "meta.json").read_text())["dataset"]
    folders = {s: work / "runs" / dataset / args.variant / f"seed{s}" for s in args.seeds}  # scripts/longrun.sh's layout
    runs = [RunOptions(seed=s, epochs=args.epochs, out_dir=folders[s] / "rl", progress=False) for s in args.seeds]
    summaries, init_models, pretrain_epochs, record["stopped"] = None, None, 0, None
    try:
        if variants.get(args.variant).pretrained:  # RL-RAPTOR: labels, then the seeds pretrained at once
            t = time.perf_counter()
            if not (work / "labels" / "summary.json").exists():
                label_dataset(work / "data", work / "labels", max_path_length=params.env.max_path_length,
                              config=params.labeling, graph_path=work / "graph.npz", show_progress=False)
            record["seconds"]["labels"] = time.perf_counter() - t
            t = time.perf_counter()
            pretrain_epochs = params.pretrain.epochs
            pre = [RunOptions(seed=s, out_dir=folders[s] / "pretrain", progress=False) for s in args.seeds]
            snaps = pretrain_runs(ctx, work / "labels", [pretrain_epochs], pre,
                                  on_epoch_end=[stop_at_deadline] * len(pre))
            init_models = [snap[pretrain_epochs] for snap in snaps]
            record["seconds"]["pretrain"] = time.perf_counter() - t
            for s, run in zip(args.seeds, pre):
                keep = out / f"seed{s}"
                keep.mkdir(exist_ok=True)
                shutil.copy(RunDir(run.out_dir).history, keep / "pretrain-history.json")
        t = time.perf_counter()
        summaries = run_variants(ctx, args.variant, runs, init_models=init_models, pretrain_epochs=pretrain_epochs,
                                 hooks=[stop_at_deadline] * len(runs))
        record["seconds"]["train"] = time.perf_counter() - t
    except Deadline as exc:
        record["stopped"] = str(exc)
    for s, run in zip(args.seeds, runs):
        folder = RunDir(run.out_dir)
        keep = out / f"seed{s}"
        keep.mkdir(exist_ok=True)
        for f in (folder.history, folder.summary):
            if f.exists():
                shutil.copy(f, keep / f.name)
    if summaries is not None:
        t = time.perf_counter()
        for s, run in zip(args.seeds, runs):
            metrics = evaluate_model(ctx, RunDir(run.out_dir).best, folders[s] / "eval")
            atomic_write_json(out / f"seed{s}" / "metrics.json", metrics)
            print(f"seed {s}: test MRR {metrics['mrr']:.4f}", flush=True)
        record["seconds"]["test"] = time.perf_counter() - t
        if args.commit:
            (work / "runs" / "COMMIT").write_text(args.commit + "\n")
        # what the results page reads, as a CPU sitting's records; a try on a subset of the queries has the
        # same fingerprint as a real run (the subsets are not params), so its records are named as a try's
        tried = args.train_queries or args.valid_queries or args.test_queries
        collect(work / "runs", out / ("try-records" if tried else "records"))
    record["seconds"]["total"] = time.perf_counter() - started
    atomic_write_json(out / "run.json", record)
    if args.pack:
        packed.mkdir(parents=True, exist_ok=True)
        with tarfile.open(packed / "paper_seeds.tgz.tmp", "w:gz") as tar:
            tar.add(out, arcname=".")
        (packed / "paper_seeds.tgz.tmp").replace(packed / "paper_seeds.tgz")
    print(json.dumps(record["seconds"]), record.get("stopped") or "", flush=True)


def table(folder: str, budget: int = 400, rounds: int = 20) -> str:
    """The docs' table of a returned ``--out`` folder: per seed, epochs, median seconds per epoch and per
    validation, best validation and test MRR; then the paper budget estimated from the medians (``budget``
    RL epochs, ``rounds`` validations of every seed, the test as measured)."""
    root = Path(folder)
    run = json.loads((root / "run.json").read_text())
    rows = [f"Device: {run['device']}, PyTorch {run['torch']}, {run['args']['variant']}, seeds "
            f"{run['args']['seeds']}, overrides {run['args']['set']}, commit {run['args']['commit'][:7] or 'not given'}.", "",
            "| seed | epochs | s/epoch (median) | validation (s, median) | best validation MRR | test MRR |",
            "|---|---|---|---|---|---|"]
    epoch_s, val_s = [], []
    for seed in run["args"]["seeds"]:
        d = root / f"seed{seed}"
        hist = json.loads((d / "history.json").read_text())
        rl = hist["history"] if isinstance(hist, dict) else hist
        e = [r["seconds"] for r in rl]
        v = [r["val_seconds"] for r in rl if r.get("val_seconds") is not None]
        summary = json.loads((d / "summary.json").read_text())
        test = json.loads((d / "metrics.json").read_text())["mrr"] if (d / "metrics.json").exists() else float("nan")
        epoch_s.append(np.median(e))
        val_s.append(np.median(v) if v else float("nan"))
        rows.append(f"| {seed} | {len(e)} | {np.median(e):.2f} | {val_s[-1]:.2f} | {100 * summary['best_val_mrr']:.2f} "
                    f"| {100 * test:.2f} |")
    est = budget * np.median(epoch_s) + rounds * float(np.nansum(val_s)) + run["seconds"].get("test", 0.0)
    rows += ["", f"The paper's budget ({budget} RL epochs, {rounds} validations of every seed, the test) at these "
             f"times: about {est / 60:.0f} minutes."]
    return "\n".join(rows)


if __name__ == "__main__":
    main()
