"""The results page: every number on it is read from the artifacts, none is typed.

``raptor results`` reads one or more *result sets* and writes a Markdown page (this repository's
``docs/results.md``) with its figures. A result set is a folder in one of two layouts:

* a pipeline workspace (what ``dvc repro`` / ``scripts/run.sh`` leave behind)::

      runs/<dataset>/<variant>/train/seed<S>/   history.json, run_config.json, summary.json, best.pt
      runs/<dataset>/<variant>/eval/seed<S>/    metrics.json
      reports/<dataset>/significance.json
      runs/stage-usage.jsonl                    each stage's wall time and peak memory (the pipeline flow)
      runs/<dataset>/ablation/arms/p<N>/seed<S>/  the pretraining-epochs ablation (``ablation/dvc.yaml``):
      runs/<dataset>/ablation/eval/p<N>/seed<S>/  RL-RAPTOR after N pretraining epochs, its test metrics

* a folder of ``raptor train --out <dataset>/<variant>/seed<S>`` runs (the long paper-budget runs)::

      <dataset>/<variant>/seed<S>/rl/           history.json, run_config.json, summary.json, best.pt
      <dataset>/<variant>/seed<S>/eval/         metrics.json (``raptor evaluate`` of rl/best.pt)

Every row states its dataset, system, seeds, the epochs actually trained against the budget, the
precision, the beam and the rank tie rule. A run still training is shown with the epoch it reached
and its best validation MRR so far, and its learning curve is drawn to where it got.

A page is only as lasting as its sources: ``raptor results`` reads folders that git holds (every file
in the index and unchanged, :func:`untracked_files`), so a clone regenerates the same page after every
ignored folder is gone; ``--untracked`` writes a draft page, marked as such, from anything else.
:func:`collect` makes such a folder from a run's workspace (a few hundred kilobytes per result set).
"""

from __future__ import annotations

import glob
import json
import re
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from raptor.agents import variants as variant_registry
from raptor.config import INHERITED_FROM_TITER
from raptor.constants import METRIC_KEYS, arm_folder
from raptor.common.io import atomic_write_bytes, atomic_write_text
from raptor.reporting.records import write_ranks
from raptor.reporting.runs_reader import (COMMIT_FILE, PREDICTIONS_FILE, RANKS_FILE, READING_FILE, ranks_source,
                                          read_fingerprint, read_history, read_ranks, read_readings, RunFolders,
                                          read_json, read_metrics, read_summary, recorded_commit, seed_dirs)
from raptor.runs.loop import phase_seconds
from raptor.runs.rundir import RunDir
from raptor.reporting.paper import (ABLATION_REWARD_EPOCHS, DATASETS as PAPER_DATASETS, MAIN_TABLE,
                                    MARKED as PAPER_MARKED, REWARD_THRESHOLD)
from raptor.evaluation.ranking import TIE_RULE
from raptor.reporting.report import (_markdown_table, baseline_of, epochs_to_reward, plot_bars, plot_curves,
                                     significance_of_seeds)
from raptor.common.resources import read_usage
from raptor.pipeline.stages import ABLATION_ARMS, ABLATION_EVAL, USAGE_LOG, main_stages

_METRIC_NAMES = {"mrr": "MRR", "hits@1": "H@1", "hits@3": "H@3", "hits@10": "H@10"}


@dataclass
class SeedRun:
    """One trained (variant, seed) of a result set."""

    seed: int
    #: RL history rows (``epoch``, ``reward``, ``val_mrr``, ``seconds``, ...), in epoch order.
    history: list[dict[str, Any]]
    #: ``run_config.json``'s flat params (``"rl.gamma": 0.95``, ...): what the run was trained with.
    params: dict[str, Any]
    #: RL epochs the run was asked for; ``None`` if no artifact says (no summary and no best.pt yet).
    budget: Optional[int]
    pretrain_epochs: int
    #: Precision it trained in (resolved: ``float32`` or ``bfloat16``, as far as the artifacts say).
    precision: str
    #: The training ended (``summary.json`` written): early stopped or at its budget.
    finished: bool
    stopped_early: bool
    #: Test metrics (fractions) of its best-validation model, once evaluated.
    metrics: Optional[dict[str, Any]]
    #: ``run_config.json``'s input hashes (``data``, ``graph``, ``init_model``): what the run trained on.
    inputs: dict[str, Any] = field(default_factory=dict)
    #: Its evaluation folder (test metrics and per-query ranks).
    eval_dir: Optional[Path] = None
    #: Its re-scored evaluations (:mod:`raptor.pipeline.rescore`): reading name -> evaluation folder.
    readings: dict[str, Path] = field(default_factory=dict)

    @property
    def epochs_trained(self) -> int:
        return len(self.history)

    @property
    def best_val_mrr(self) -> Optional[float]:
        vals = [r["val_mrr"] for r in self.history if r.get("val_mrr") is not None]
        return max(vals) if vals else None


@dataclass
class ResultSet:
    """The runs of one dataset in one folder."""

    name: str
    dataset: str
    #: Where it was read from (folder and the commit that trained it, when known).
    source: str
    #: variant -> seed -> run
    runs: dict[str, dict[int, SeedRun]]
    #: ``significance.json`` of the pipeline (``None`` for folders of single runs).
    significance: Optional[dict[str, Any]] = None
    #: The latest usage record of each of this dataset's pipeline stages (stage name -> record), in
    #: pipeline order; empty where the folder has no usage log.
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The pretraining-epochs ablation: pretraining epochs of the arm -> seed -> run (:func:`read_ablation`,
    #: :func:`read_run_ablation`).
    ablation: dict[int, dict[int, SeedRun]] = field(default_factory=dict)
    #: The sets it pools (:func:`pool`: one per folder, each with its own source and usage); empty for a
    #: set read from one folder.
    parts: list["ResultSet"] = field(default_factory=list)

    def contents(self) -> list[str]:
        """Its variants, then its ablation's arms (``ablation p<N>``): what a command's summary names."""
        return sorted(self.runs) + [f"ablation {arm_folder(a)}" for a in self.ablation]


# ---------------------------------------------------------------------------------------- reading


def _model_meta(train_dir: Path) -> dict[str, Any]:
    """``meta`` of the run's best.pt (or latest checkpoint): the budget of a run without a summary."""
    from raptor.runs import checkpoints

    for name in (RunDir.BEST, RunDir.CHECKPOINT):
        path = train_dir / name
        if path.is_file():
            try:
                obj = checkpoints.load(path, (checkpoints.MODEL_FORMAT, checkpoints.RL_CHECKPOINT_FORMAT), "model")
            except (ValueError, OSError):  # being rewritten by a live run: try the next one
                continue
            return obj.get("meta", {})
    return {}


def read_seed_run(seed: int, train_dir: Path, eval_dir: Path, readings_dir: Optional[Path] = None) -> Optional[SeedRun]:
    """The run in ``train_dir``, evaluated into ``eval_dir`` (``None`` if it has no history yet), from
    :mod:`raptor.reporting.runs_reader`: its history, its fingerprint's params (``run_config.json`` of
    ``train_dir``, else of its parent: the seed folder of a ``raptor train --out`` run), its summary (or,
    while it trains, its model's meta: :func:`_model_meta`), its test metrics and the readings in
    ``readings_dir`` of the model those metrics are of (:func:`raptor.reporting.runs_reader.read_readings`)."""
    history = read_history(train_dir)
    if not history:
        return None
    config = read_fingerprint(train_dir) or read_fingerprint(train_dir.parent) or {}
    params = config.get("params", {})
    summary = read_summary(train_dir)
    if summary is not None:
        budget, pre = summary.get("rl_epochs"), summary.get("pretrain_epochs", 0)
        precision = summary.get("precision") or params.get("train.precision", "?")
    else:
        meta = _model_meta(train_dir)
        budget, pre = meta.get("rl_epochs"), meta.get("pretrain_epochs", config.get("pretrain_epochs", 0))
        precision = params.get("train.precision", "?")
    metrics = read_metrics(eval_dir)
    return SeedRun(seed=seed, history=history, params=params, budget=budget, pretrain_epochs=int(pre or 0),
                   precision=str(precision), finished=summary is not None,
                   stopped_early=bool(summary and summary.get("stopped_early")), metrics=metrics,
                   inputs=config.get("inputs", {}), eval_dir=eval_dir,
                   readings=read_readings(readings_dir, (metrics or {}).get("model_sha256")) if readings_dir else {})


def _commit(folder: Path, full: bool = False) -> Optional[str]:
    """The commit that trained a folder's runs: its ``COMMIT`` file, or the work tree's HEAD (12
    characters unless ``full``)."""
    n = 40 if full else 12
    if (folder / COMMIT_FILE).is_file():
        return recorded_commit(folder, n)
    try:
        out = subprocess.run(["git", "-C", str(folder), "rev-parse", f"--short={n}", "HEAD"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


class UntrackedSourceError(ValueError):
    """A result folder that git does not hold as it is: a page made from it could not be made again."""


#: ``git status --porcelain`` codes of a file the index does not hold as it is in the work tree.
_NOT_IN_INDEX = ("??", "!!")


def untracked_files(folder: str | Path) -> list[str]:
    """The files under ``folder`` that git's index does not hold as they are: untracked, ignored, or
    changed since they were added (``git status --porcelain --ignored``). A file that is added but not
    yet committed counts as tracked: records are added, the page generated, then both committed.
    Raises :class:`UntrackedSourceError` if ``folder`` is not inside a git work tree at all."""
    folder = Path(folder)
    try:
        out = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "--ignored",
                              "--untracked-files=all", "-z", "--", "."],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UntrackedSourceError(f"{folder}: cannot ask git whether it tracks this folder ({exc})") from None
    if out.returncode != 0:
        raise UntrackedSourceError(f"{folder} is not inside a git work tree: its results are not kept anywhere")
    bad = []
    for entry in filter(None, out.stdout.split("\0")):
        code, path = entry[:2], entry[3:]
        if code in _NOT_IN_INDEX or code[1] != " ":
            bad.append(path)
    return bad


def require_tracked(folder: str | Path) -> None:
    """:class:`UntrackedSourceError` naming ``folder`` and its first untracked file, unless git's index
    holds every file under it as it is (:func:`untracked_files`)."""
    bad = untracked_files(folder)
    if bad:
        raise UntrackedSourceError(
            f"{folder}: {len(bad)} file(s) not tracked by git as they are (e.g. {bad[0]}): a page made from them "
            "cannot be made again once ignored folders are gone. Copy the runs' records into results/ with "
            "`raptor collect SRC results/NAME`, `git add` them and run again, or pass --untracked for a draft page")


def _arm_paths(folder: Path, dataset: str, arm: int, seed: int) -> tuple[Path, Path]:
    """``(training folder, evaluation folder)`` of one seed of the ablation's arm ``arm`` (pretraining
    epochs) in the pipeline workspace ``folder``."""
    return tuple(folder / where.format(dataset=dataset) / arm_folder(arm) / f"seed{seed}"
                 for where in (ABLATION_ARMS, ABLATION_EVAL))


def read_ablation(folder: Path, dataset: str) -> dict[int, dict[int, SeedRun]]:
    """The ablation's runs of ``dataset`` in the pipeline workspace ``folder``: ``{arm: {seed: run}}``,
    arms in increasing pretraining epochs; arms or seeds without a history yet are left out."""
    arms_dir = folder / ABLATION_ARMS.format(dataset=dataset)
    if not arms_dir.is_dir():
        return {}
    out: dict[int, dict[int, SeedRun]] = {}
    for arm in sorted(a for p in arms_dir.iterdir() if p.is_dir() and (a := _arm_of(p.name)) is not None):
        seeds = {seed: run for seed in seed_dirs(arms_dir / arm_folder(arm))
                 if (run := read_seed_run(seed, *_arm_paths(folder, dataset, arm, seed))) is not None}
        if seeds:
            out[arm] = seeds
    return out


#: Folder of the pretraining-epochs ablation's arms in a folder of ``raptor train --out`` runs
#: (``scripts/longrun.sh start raptor:S:pN``): ``<dataset>/ablation/p<N>/seed<S>/{rl,eval}``.
RUN_ABLATION = "ablation"


def _arm_of(name: str) -> Optional[int]:
    """The pretraining epochs of an arm's folder name (``p10`` -> 10), ``None`` for any other name."""
    return int(name[1:]) if name[1:].isdigit() and arm_folder(int(name[1:])) == name else None


def read_run_ablation(ds_dir: Path, runs: Mapping[str, Mapping[int, SeedRun]]) -> dict[int, dict[int, SeedRun]]:
    """The ablation's arms in a folder of single runs (:data:`RUN_ABLATION`), ``{arm: {seed: run}}`` in
    increasing pretraining epochs; ``{}`` when it has no arm. An arm is RL-RAPTOR with that many pretraining
    epochs, so the set's own runs fill the arms they are, where no arm folder holds that seed: its Pure-RL
    runs (the same agent unpretrained) arm 0, its RL-RAPTOR runs the arm of their pretraining epochs, each
    only with the same params as the arm runs."""
    arms_dir = ds_dir / RUN_ABLATION
    if not arms_dir.is_dir():
        return {}
    out: dict[int, dict[int, SeedRun]] = {}
    for arm in sorted(a for p in arms_dir.iterdir() if p.is_dir() and (a := _arm_of(p.name)) is not None):
        seeds = {seed: run for seed in seed_dirs(arms_dir / arm_folder(arm))
                 if (run := read_seed_run(seed, *_run_paths(arms_dir, arm_folder(arm), seed, False)[:2])) is not None}
        if seeds:
            out[arm] = seeds
    if not out:
        return {}
    params = next(iter(next(iter(out.values())).values())).params
    pretrained = variant_registry.get(variant_registry.PRETRAINED_VARIANT)
    unpretrained = next(v.name for v in variant_registry.VARIANTS.values()
                        if v.agent == pretrained.agent and not v.pretrained)
    for v in (unpretrained, pretrained.name):
        for seed, run in runs.get(v, {}).items():
            arm = run.pretrain_epochs if v == pretrained.name else 0
            if run.params == params and seed not in out.get(arm, {}):
                out.setdefault(arm, {})[seed] = run
    return {arm: dict(sorted(seeds.items())) for arm, seeds in sorted(out.items())}


def _run_paths(ds_dir: Path, variant: str, seed: int, pipeline: bool) -> tuple[Path, Path, Path]:
    """``(training folder, evaluation folder, readings folder)`` of one seed in either layout
    (:class:`raptor.reporting.runs_reader.RunFolders`)."""
    run = RunFolders.of(ds_dir / variant, seed, pipeline)
    return run.train, run.eval, run.readings


#: What the page reads of a training folder (and, for a run of the second layout, of its seed folder).
RUN_FILES = (RunDir.HISTORY, RunDir.CONFIG, RunDir.SUMMARY)

#: What :func:`collect` also keeps of a run of the second layout that pretrained (``seed<S>/pretrain/``):
#: the pretraining's per-epoch history and fingerprint (a few KB), so that its time and losses stay
#: checkable once the folder of long runs is gone.
PRETRAIN_FILES = (RunDir.HISTORY, RunDir.CONFIG)


def collect(src: str | Path, dest: str | Path, unfinished: bool = False,
            datasets: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Copy what :func:`discover` reads of the result folder ``src`` into ``dest``, in the same layout:
    each run's history, fingerprint and summary (the ablation's arms too; in a folder of long runs its
    pretraining's history and fingerprint too, :data:`PRETRAIN_FILES`), its test metrics, the
    significance tests and the stage usage log, and a ``COMMIT`` file naming the commit that trained them. ``dest`` is then a result folder
    of its own of a few hundred kilobytes (no checkpoints; of the predictions only the per-query ranks,
    ``ranks.parquet``, about 80 KB per ICEWS14 seed, so significance can be recomputed): meant for git,
    so that the page can be made again from a clone. Unchanged files are left alone.

    Runs not yet tested (no test metrics: still training, or trained and not evaluated) are left out
    and named in ``skipped`` (``"<dataset> <variant or ablation arm> seed <S>"``) unless ``unfinished``:
    a partial record would block the same seed, finished in a later sitting's folder, from pooling
    with this one (:func:`pool` refuses a seed found in two folders).

    ``datasets``: only these datasets' runs (a folder of long runs holds every dataset's, and each
    dataset's campaign keeps its own records folder); a name with no runs in ``src`` is an error."""
    src, dest = Path(src), Path(dest)
    sets = discover(src)
    if datasets is not None:
        missing = sorted(set(datasets) - {rs.dataset for rs in sets})
        if missing:
            raise ValueError(f"{src}: no runs of dataset {', '.join(missing)} with a training history yet (it has "
                             f"{', '.join(rs.dataset for rs in sets) or 'none'})")
        sets = [rs for rs in sets if rs.dataset in datasets]
    skipped: list[str] = []
    if not unfinished:
        sets = [_tested_only(rs, skipped) for rs in sets]
    pipeline = (src / "runs").is_dir()
    root = src / "runs" if pipeline else src
    files: list[Path] = [src / USAGE_LOG] if pipeline else []
    for rs in sets:
        for v, seeds in rs.runs.items():
            for seed in seeds:
                train_dir, eval_dir, _ = _run_paths(root / rs.dataset, v, seed, pipeline)
                files += [train_dir / f for f in RUN_FILES] + [train_dir.parent / RunDir.CONFIG,
                                                               RunDir(eval_dir).metrics]
                if not pipeline:
                    files += [train_dir.parent / "pretrain" / f for f in PRETRAIN_FILES]
                for reading in seeds[seed].readings.values():  # its description last: it marks the copy whole
                    files += [RunDir(reading).metrics, reading / READING_FILE]
        for arm, seeds in rs.ablation.items():
            for seed in seeds:
                if pipeline:
                    train_dir, eval_dir = _arm_paths(src, rs.dataset, arm, seed)
                else:  # a run of the set standing for an arm (no such folder) is collected with the set's runs
                    train_dir, eval_dir, _ = _run_paths(root / rs.dataset / RUN_ABLATION, arm_folder(arm), seed, False)
                    files.append(train_dir.parent / RunDir.CONFIG)
                    files += [train_dir.parent / "pretrain" / f for f in PRETRAIN_FILES]
                files += [train_dir / f for f in RUN_FILES] + [RunDir(eval_dir).metrics]
        if pipeline:
            files.append(src / "reports" / rs.dataset / "significance.json")
    copied = []
    for f in dict.fromkeys(files):
        if f.is_file():
            target, data = dest / f.relative_to(src), f.read_bytes()
            if f == src / USAGE_LOG and datasets is not None:  # the stages of the datasets collected only
                data = b"".join(line for line in data.splitlines(keepends=True)
                                if _usage_dataset(line) in datasets)
            if not target.is_file() or target.read_bytes() != data:
                if (f.parent / READING_FILE).is_file() and f.name != READING_FILE:
                    (target.parent / READING_FILE).unlink(missing_ok=True)  # the copy is whole again only at its end
                atomic_write_bytes(target, data)
            copied.append(str(f.relative_to(src)))
        if f.name == RunDir.METRICS and (f.parent / PREDICTIONS_FILE).is_file():
            ranks = dest / f.parent.relative_to(src) / RANKS_FILE
            if not ranks.is_file() or ranks.stat().st_mtime_ns < (f.parent / PREDICTIONS_FILE).stat().st_mtime_ns:
                write_ranks(f.parent / PREDICTIONS_FILE, ranks)
            copied.append(str(ranks.relative_to(dest)))
        elif f.name == RunDir.METRICS and (f.parent / RANKS_FILE).is_file():  # a collected folder collected again
            ranks, data = dest / f.parent.relative_to(src) / RANKS_FILE, (f.parent / RANKS_FILE).read_bytes()
            if not ranks.is_file() or ranks.read_bytes() != data:
                atomic_write_bytes(ranks, data)
            copied.append(str(ranks.relative_to(dest)))
    commit = _commit(src, full=True)
    if commit and _commit(dest) != commit[:12]:
        atomic_write_text(dest / COMMIT_FILE, commit + "\n")
    return {"dest": str(dest), "files": copied, "commit": commit,
            "sets": [(rs.dataset, rs.contents()) for rs in sets if rs.contents()], "skipped": skipped}


def _usage_dataset(line: bytes) -> Optional[str]:
    """The dataset of one stage-usage record (``"stage": "label@ICEWS14"``), ``None`` for a torn line."""
    try:
        stage = json.loads(line).get("stage", "")
    except (ValueError, AttributeError):
        return None
    return stage.rsplit("@", 1)[1] if isinstance(stage, str) and "@" in stage else None


def _tested_only(rs: ResultSet, skipped: list[str]) -> ResultSet:
    """``rs`` with only its runs (and ablation arms' runs) that have test metrics; the others are
    appended to ``skipped``."""
    own = {id(r) for seeds in rs.runs.values() for r in seeds.values()}  # an arm may be a run of the set's

    def keep(label: str, seeds: Mapping[int, SeedRun]) -> dict[int, SeedRun]:
        skipped.extend(f"{rs.dataset} {label} seed {s}" for s, r in seeds.items()
                       if r.metrics is None and not (label.startswith("ablation") and id(r) in own))
        return {s: r for s, r in seeds.items() if r.metrics is not None}

    runs = {v: kept for v, seeds in rs.runs.items() if (kept := keep(v, seeds))}
    ablation = {a: kept for a, seeds in rs.ablation.items() if (kept := keep(f"ablation {arm_folder(a)}", seeds))}
    return replace(rs, runs=runs, ablation=ablation)


def discover(folder: str | Path, name: Optional[str] = None) -> list[ResultSet]:
    """The result sets (one per dataset) in ``folder``, in either layout (module docstring)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"results folder not found: {folder}")
    commit = _commit(folder)
    source = f"`{folder}`" + (f" (commit {commit})" if commit else "")
    pipeline = (folder / "runs").is_dir()
    root = folder / "runs" if pipeline else folder
    usage = read_usage(folder / USAGE_LOG) if pipeline else {}
    sets = []
    for ds_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        runs: dict[str, dict[int, SeedRun]] = {}
        for v in variant_registry.VARIANTS:
            base = ds_dir / v / "train" if pipeline else ds_dir / v
            if not base.is_dir():
                continue
            seeds = {}
            for seed in seed_dirs(base):
                run = read_seed_run(seed, *_run_paths(ds_dir, v, seed, pipeline))
                if run is not None:
                    seeds[seed] = run
            if seeds:
                runs[v] = seeds
        ablation = read_ablation(folder, ds_dir.name) if pipeline else read_run_ablation(ds_dir, runs)
        if runs or ablation:
            # a folder of long runs has no significance stage: the same tests from its records' ranks
            sig = read_json(folder / "reports" / ds_dir.name / "significance.json") if pipeline else _ranked_significance(runs)
            mine = {stage: rec for stage, rec in usage.items() if stage.endswith(f"@{ds_dir.name}")}
            sets.append(ResultSet(name or folder.name, ds_dir.name, source, runs, sig, mine, ablation))
    if not sets:
        raise FileNotFoundError(f"{folder}: no runs found (expected runs/<dataset>/<variant>/train/seed<S>/history.json, "
                                "runs/<dataset>/ablation/arms/p<N>/seed<S>/history.json "
                                "or <dataset>/<variant>/seed<S>/rl/history.json)")
    return sets


#: What the pooled runs of one variant (or ablation arm) must share besides their params (``run_config.json``'s
#: ``inputs``): the data and the graph they trained on. The code may differ: each part names its commit.
POOLED_INPUTS = ("data", "graph")

#: Joins the folders of one result set in a source spec: ``NAME=FOLDER+FOLDER``.
POOL_SEPARATOR = "+"


def _pool_runs(what: str, groups: Sequence[tuple[ResultSet, Mapping[int, SeedRun]]]) -> dict[int, SeedRun]:
    """The seeds of ``what`` (a variant or an ablation arm) in every part, by seed; :class:`ValueError` naming
    both folders when two of its runs share a seed or differ in a param or an input (:data:`POOLED_INPUTS`)."""
    (ref_set, ref), out, where = (groups[0][0], next(iter(groups[0][1].values()))), {}, {}
    for part, seeds in groups:
        for run in seeds.values():
            if run.seed in out:
                raise ValueError(f"{what} seed {run.seed} is in both {where[run.seed]} and {part.source}: "
                                 "pooled result sets must have disjoint seeds")
            diffs = [f"params {k}: {ref.params.get(k)!r} vs {run.params.get(k)!r}"
                     for k in sorted(set(ref.params) | set(run.params)) if ref.params.get(k) != run.params.get(k)]
            diffs += [f"inputs {k}: {ref.inputs.get(k)} vs {run.inputs.get(k)}"
                      for k in POOLED_INPUTS if ref.inputs.get(k) != run.inputs.get(k)]
            if diffs:
                raise ValueError(f"cannot pool {what} seed {ref.seed} of {ref_set.source} with seed {run.seed} of "
                                 f"{part.source}: they differ in {'; '.join(diffs)}")
            out[run.seed], where[run.seed] = run, part.source
    return dict(sorted(out.items()))


def _pooled_significance(runs: Mapping[str, Mapping[int, SeedRun]]) -> Optional[dict[str, Any]]:
    """:func:`raptor.reporting.report.compare_variants` over the pooled seeds, from the runs' test metrics and
    per-query ranks (``None`` when the baseline or its evaluations are missing). Every evaluation must rank
    the same queries in the same order (:class:`ValueError` naming the folder otherwise)."""
    evaluated = {v: {s: r for s, r in seeds.items() if r.metrics is not None} for v, seeds in runs.items()}
    evaluated = {v: seeds for v, seeds in evaluated.items() if seeds}
    if not any(variant_registry.get(v).baseline for v in evaluated):
        return None
    base = baseline_of(list(evaluated))
    ranks: dict[str, dict[int, np.ndarray]] = {}
    keys = None
    for v, seeds in evaluated.items():
        ranks[v] = {}
        for seed, run in seeds.items():
            path = ranks_source(run.eval_dir)
            queries, ranks[v][seed] = read_ranks(path)
            if keys is None:
                keys = queries
            elif queries.shape != keys.shape or not np.array_equal(queries, keys):
                raise ValueError(f"{path}: not over the same queries as the other pooled evaluations")
    metrics = {v: {s: r.metrics for s, r in seeds.items()} for v, seeds in evaluated.items()}
    return {"baseline": base, "comparisons": {t: significance_of_seeds(metrics, ranks, t, base)
                                              for t in evaluated if t != base}}


def _ranked_significance(runs: Mapping[str, Mapping[int, SeedRun]]) -> Optional[dict[str, Any]]:
    """:func:`_pooled_significance` of one folder of long runs, or ``None`` when one of its evaluations kept no
    per-query ranks (neither predictions nor ``ranks.parquet``: the tests need them)."""
    try:
        return _pooled_significance(runs)
    except FileNotFoundError:
        return None


def pool(name: str, parts: Sequence[ResultSet]) -> ResultSet:
    """One result set of the runs of ``parts`` (sets of one dataset read from different folders: say seeds
    0-1 trained in one session and 2-4 in another): every variant's and ablation arm's seeds together, the
    significance tests recomputed over the pooled seeds from the records' per-query ranks as the pipeline's
    significance stage computes them. :class:`ValueError` naming the folders when the parts are of different
    datasets, share a seed, or hold runs of one variant (or arm) trained with other params or data."""
    if len({p.dataset for p in parts}) != 1:
        raise ValueError(f"cannot pool result sets of different datasets: "
                         f"{', '.join(f'{p.source} ({p.dataset})' for p in parts)}")
    runs = {v: _pool_runs(v, [(p, p.runs[v]) for p in parts if v in p.runs])
            for v in variant_registry.VARIANTS if any(v in p.runs for p in parts)}
    ablation = {a: _pool_runs(f"ablation {arm_folder(a)}", [(p, p.ablation[a]) for p in parts if a in p.ablation])
                for a in sorted({a for p in parts for a in p.ablation})}
    return ResultSet(name, parts[0].dataset, " + ".join(p.source for p in parts), runs,
                     _pooled_significance(runs), {}, ablation, list(parts))


# ---------------------------------------------------------------------------------------- tables


def _pm(values: Sequence[float], scale: float = 100.0, digits: int = 2) -> str:
    """``mean ± std`` (sample std over seeds; the mean alone for one value)."""
    a = np.asarray(values, dtype=float) * scale
    if len(a) == 1:
        return f"{a[0]:.{digits}f}"
    return f"{a.mean():.{digits}f} ± {a.std(ddof=1):.{digits}f}"


def _one(values: Sequence[Any]) -> str:
    """The common value of the seeds, or every distinct one."""
    distinct = sorted({str(v) for v in values})
    return distinct[0] if len(distinct) == 1 else "/".join(distinct)


def _epochs(runs: Sequence[SeedRun]) -> str:
    trained = [r.epochs_trained for r in runs]
    budgets = [r.budget for r in runs]
    if budgets and all(b == 0 for b in budgets):
        return "none"  # a system without an epoch budget (the training-free recurrency baseline)
    text = _one(trained)
    if any(b is not None for b in budgets):
        text += f" of {_one([b if b is not None else '?' for b in budgets])}"
    if any(r.stopped_early for r in runs):
        text += " (early stop)"
    if not all(r.finished for r in runs):
        text += " (training)"
    return text


def _hours(history: Sequence[Mapping[str, Any]]) -> float:
    """Hours of RL training, validation included, from the history's per-epoch seconds."""
    return phase_seconds(history) / 3600


def result_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """One row per (set, dataset, system): budget, precision, ties, test metrics, the paper's MRR."""
    rows = []
    for s in sets:
        for v, seeds in s.runs.items():
            runs = list(seeds.values())
            label = variant_registry.get(v).label
            evaluated = [r for r in runs if r.metrics is not None]
            row = {
                "set": s.name, "dataset": s.dataset, "system": label,
                "seeds": ",".join(str(r.seed) for r in runs),
                "pretrain epochs": _one([r.pretrain_epochs for r in runs]),
                "RL epochs": _epochs(runs),
                "precision": _one([r.precision for r in runs]),
                "beam": _one([r.params.get("eval.beam_size", "?") for r in runs]),
                "ties": TIE_RULE.split(":")[0],
                "best val MRR": _pm([r.best_val_mrr for r in runs if r.best_val_mrr is not None])
                if any(r.best_val_mrr is not None for r in runs) else "",
                "val MRR peak at RL epoch": "" if all(r.budget == 0 for r in runs)  # training-free: no RL epochs
                else _per_seed([_peak_epoch(r.history) or "" for r in runs]),
                "train h/seed": f"{np.mean([_hours(r.history) for r in runs]):.2f}",
            }
            for m in METRIC_KEYS:
                row[_METRIC_NAMES[m]] = _pm([r.metrics[m] for r in evaluated]) if evaluated else "not evaluated"
            if evaluated and len(evaluated) < len(runs):
                row["seeds"] += f" (test: {','.join(str(r.seed) for r in evaluated)})"
            paper = MAIN_TABLE.get(label, {}).get(s.dataset)
            row["paper MRR"] = f"{paper[0]:.2f}" if paper else ""
            if paper and evaluated:
                row["vs paper"] = f"{100 * np.mean([r.metrics['mrr'] for r in evaluated]) - paper[0]:+.2f}"
            rows.append(row)
    return rows


RESULT_COLUMNS = ("set", "dataset", "system", "seeds", "pretrain epochs", "RL epochs", "precision", "beam", "ties",
                  "MRR", "H@1", "H@3", "H@10", "paper MRR", "vs paper", "best val MRR", "val MRR peak at RL epoch",
                  "train h/seed")


def format_p(p: Optional[float]) -> str:
    """A p-value for a table: three significant digits; an exact 0 is a probability that underflowed
    a double (a normal-approximation tail beyond about 38 standard errors), so it reads ``< 1e-300``."""
    if p is None:
        return "n/a"
    return "< 1e-300" if p == 0 else f"{p:.3g}"


def significance_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """Per set and comparison: the paired t-test over seeds and the per-query tests on MRR."""
    rows = []
    for s in sets:
        sig = s.significance or {}
        for treatment, pair in (sig.get("comparisons") or {}).items():
            row = {"set": s.name, "dataset": s.dataset,
                   "comparison": f"{variant_registry.get(treatment).label} vs "
                                 f"{variant_registry.get(sig['baseline']).label}"}
            seed_mrr = (pair.get("seed_level") or {}).get("mrr")
            if seed_mrr:
                row["MRR diff (points)"] = f"{100 * seed_mrr['mean_diff']:+.2f}"
                row["t-test over seeds, p (one-sided)"] = f"{format_p(seed_mrr['p_one_sided'])} (n = {seed_mrr['n']})"
            pq = pair.get("per_query") or {}
            if not seed_mrr and (pq.get("bootstrap") or {}).get("mean_diff") is not None:  # one seed: no t-test,
                # but the difference itself is the per-query one (the mean of the paired reciprocal-rank differences)
                row["MRR diff (points)"] = f"{100 * pq['bootstrap']['mean_diff']:+.2f}"
            if pq.get("bootstrap"):
                b = pq["bootstrap"]
                row["per-query bootstrap 95% CI"] = f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}]"
            if pq.get("wilcoxon"):
                row["Wilcoxon p (two-sided)"] = format_p(pq['wilcoxon']['p_two_sided'])
            rows.append(row)
    return rows


SIGNIFICANCE_COLUMNS = ("set", "dataset", "comparison", "MRR diff (points)", "t-test over seeds, p (one-sided)",
                        "per-query bootstrap 95% CI", "Wilcoxon p (two-sided)")


def _reading_view(runs: Mapping[str, Mapping[int, SeedRun]], reading: str) -> dict[str, dict[int, SeedRun]]:
    """``runs`` as if evaluated under ``reading``: the seeds re-scored with it, their metrics and evaluation
    folder the reading's (:func:`raptor.reporting.runs_reader.read_readings`)."""
    view = {v: {s: replace(r, metrics=read_metrics(r.readings[reading]), eval_dir=r.readings[reading])
                for s, r in seeds.items() if reading in r.readings and r.metrics is not None}
            for v, seeds in runs.items()}
    return {v: seeds for v, seeds in view.items() if seeds}


def _readings(s: ResultSet) -> list[str]:
    return sorted({name for seeds in s.runs.values() for r in seeds.values() for name in r.readings})


def reading_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """Per set, system and evaluation-only reading (:mod:`raptor.pipeline.rescore`): the same checkpoints'
    test metrics under the default evaluation and under the reading, over the seeds re-scored with it, and
    the paired tests of reading vs default (t-test over seeds, two-sided; per-query bootstrap of MRR)."""
    rows = []
    for s in sets:
        for reading in _readings(s):
            view = _reading_view(s.runs, reading)
            for v, seeds in view.items():
                default = {seed: s.runs[v][seed] for seed in seeds}
                metrics = {"reading": {seed: r.metrics for seed, r in seeds.items()},
                           "default": {seed: r.metrics for seed, r in default.items()}}
                ranks = {"reading": {seed: read_ranks(ranks_source(r.eval_dir))[1] for seed, r in seeds.items()},
                         "default": {seed: read_ranks(ranks_source(r.eval_dir))[1] for seed, r in default.items()}}
                sig = significance_of_seeds(metrics, ranks, "reading", "default")
                row = {"set": s.name, "dataset": s.dataset, "system": variant_registry.get(v).label,
                       "reading": f"`{reading}`", "seeds": ",".join(map(str, seeds))}
                for key, label in _METRIC_NAMES.items():
                    a = [r.metrics[key] for r in seeds.values()]
                    b = [r.metrics[key] for r in default.values()]
                    if key == "mrr":
                        row["MRR default"], row["MRR reading"] = _pm(b), _pm(a)
                    row[f"{label} diff"] = f"{100 * (float(np.mean(a)) - float(np.mean(b))):+.2f}"
                t = (sig.get("seed_level") or {}).get("mrr")
                row["MRR diff t-test p (two-sided)"] = f"{format_p(t['p_two_sided'])} (n = {t['n']})" if t else "n/a (1 seed)"
                b = ((sig.get("per_query") or {}).get("bootstrap")) or {}
                if b:
                    row["MRR diff per-query bootstrap 95% CI"] = f"[{100 * b['ci_low']:+.2f}, {100 * b['ci_high']:+.2f}]"
                rows.append(row)
    return rows


READING_COLUMNS = ("set", "dataset", "system", "reading", "seeds", "MRR default", "MRR reading", "MRR diff",
                   "H@1 diff", "H@3 diff", "H@10 diff", "MRR diff t-test p (two-sided)",
                   "MRR diff per-query bootstrap 95% CI")


def reading_significance_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """:func:`significance_rows` again with every system evaluated under each reading (over the seeds
    re-scored with it), with a ``reading`` column."""
    rows = []
    for s in sets:
        for reading, view in zip(_readings(s), reading_sets([s])):  # reading_sets keeps _readings' order
            rows += [{**r, "set": s.name, "reading": f"`{reading}`"} for r in significance_rows([view])]
    return rows


READING_SIGNIFICANCE_COLUMNS = SIGNIFICANCE_COLUMNS[:2] + ("reading",) + SIGNIFICANCE_COLUMNS[2:]


def reading_sets(sets: Sequence[ResultSet]) -> list[ResultSet]:
    """One set per (set, reading): its runs re-scored with the reading (those seeds only) under the name
    ``<set>, `<reading>```, with significance tests over them: rows of the paper's layout beside the default."""
    out = []
    for s in sets:
        for reading in _readings(s):
            runs = _reading_view(s.runs, reading)
            out.append(replace(s, name=f"{s.name}, `{reading}`", runs=runs, significance=_ranked_significance(runs),
                               usage={}, ablation={}, parts=[]))
    return out


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def usage_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """Per set and stage: the wall time and peak resident memory of the stage's latest run.

    The records are the pipeline flow's (:data:`raptor.pipeline.stages.USAGE_LOG`); ``*`` marks a process
    lifetime peak (the system did not allow resetting it per stage), ``†`` a stage that started
    without the freed heap of earlier stages returned to the OS (records written before the pipeline
    did that: their peak includes it), ``failed`` a stage that did not finish (the time is up to its
    failure or interruption). Stages come in the pipeline's order (a record appended late, say
    one rebuilt from an older log, still sits where its stage runs); unknown stages come last.
    """
    stages = main_stages(list(variant_registry.VARIANTS))
    first = {}  # every variant's fine-tuning before any evaluation, as the pipeline runs them
    for i, st in enumerate(stages):
        first.setdefault(st.flow, i)
    order = {st.name: (first[st.flow], i) for i, st in enumerate(stages)}
    rows, seen = [], set()
    for s, label in ((part, f"{s.name}: {part.source}" if s.parts else s.name) for s in sets for part in s.parts or [s]):
        if (s.source, s.dataset) in seen:  # two sets read from one folder share its log
            continue
        seen.add((s.source, s.dataset))
        ranked = sorted(s.usage.items(), key=lambda item: order.get(item[0].rsplit("@", 1)[0], (len(order), 0)))
        for stage, rec in ranked:
            rows.append({
                "set": label, "dataset": s.dataset, "stage": stage.rsplit("@", 1)[0],
                "wall time": _duration(float(rec["seconds"])),
                "peak RSS (GB)": f"{float(rec['peak_rss_gb']):.2f}" + ("" if rec.get("peak_is_per_stage") else " *")
                                 + ("" if rec.get("released_before") else " †"),
                "finished (UTC)": str(rec.get("finished", "")).replace("T", " ").replace("+00:00", ""),
                "status": "ok" if rec.get("ok") else "failed",
            })
    return rows


USAGE_COLUMNS = ("set", "dataset", "stage", "wall time", "peak RSS (GB)", "finished (UTC)", "status")


#: The paper's significance level: a cell is marked ``*`` below it (Table 1's caption).
ALPHA = 0.05


def _baseline_label() -> str:
    return "/".join(v.label for v in variant_registry.VARIANTS.values() if v.baseline)


def better(s: ResultSet, variant: str, metric: str) -> bool:
    """Whether ``variant`` beats the baseline of ``s``'s significance tests on ``metric`` by the paper's
    test: the paired one-sided t-test over seeds, p < :data:`ALPHA` (``False`` without such a test)."""
    test = ((((s.significance or {}).get("comparisons") or {}).get(variant) or {}).get("seed_level") or {}).get(metric)
    return bool(test) and test.get("p_one_sided") is not None and test["p_one_sided"] < ALPHA


def paper_layout_rows(sets: Sequence[ResultSet]) -> tuple[list[dict[str, str]], list[str]]:
    """The paper's Table 1 layout: the published rows, then ours. ``*`` marks a cell the paper marks
    (RL-RAPTOR better than Pure-RL, p < 0.05) and, in ours, a system better than the baseline by the same
    test over our seeds (:func:`better`).

    Ours: one row per (result-set name, system), in the order the sets were given, so runs of one
    budget line up across datasets (``quick`` on ICEWS14, ICEWS18 and ICEWS05-15 in one row). A
    dataset's cells are filled only when every seed of that set is evaluated; the row's label says,
    per dataset, its seeds, RL epochs and precision.
    """
    cols = ["model"] + [f"{d} {_METRIC_NAMES[m]}" for d in PAPER_DATASETS for m in METRIC_KEYS]
    rows = []
    for model, by_ds in MAIN_TABLE.items():
        row = {"model": f"{model} (paper)"}
        for d in PAPER_DATASETS:
            for m, val in zip(METRIC_KEYS, by_ds.get(d, ())):
                row[f"{d} {_METRIC_NAMES[m]}"] = f"{val:.2f}" + (" *" if (d, m) in PAPER_MARKED.get(model, ()) else "")
        rows.append(row)
    names = list(dict.fromkeys(s.name for s in sets))
    for name in names:
        for v in variant_registry.VARIANTS:
            label = variant_registry.get(v).label
            row: dict[str, str] = {}
            notes = []
            for d in PAPER_DATASETS:
                s = next((s for s in sets if s.name == name and s.dataset == d and v in s.runs
                          and all(r.metrics for r in s.runs[v].values())), None)
                if s is None:
                    continue
                runs = list(s.runs[v].values())
                for m in METRIC_KEYS:
                    row[f"{d} {_METRIC_NAMES[m]}"] = _pm([r.metrics[m] for r in runs]) + (" *" if better(s, v, m) else "")
                epochs = _epochs(runs)
                budget = "training-free" if epochs == "none" else f"{epochs} RL epochs"
                notes.append(f"{d}: {len(runs)} seed{'s' if len(runs) > 1 else ''}, {budget}, "
                             f"{_one([r.precision for r in runs])}")
            if notes:
                row["model"] = f"**{label} (ours, {name})** " + "; ".join(notes)
                rows.append(row)
    return rows, cols


def _param_text(value: Any) -> str:
    """A param's value as params.yaml writes it (``true``, ``1e-05``, ``batch``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def inherited_rows(sets: Sequence[ResultSet]) -> tuple[list[dict[str, str]], list[str]]:
    """The settings the paper leaves to TITer's code (:data:`raptor.config.INHERITED_FROM_TITER`): TITer's
    value and where its code sets it, then one column per result-set name with the values its runs were
    trained and evaluated with (``/``-joined when they differ; empty where no run has the param)."""
    names = list(dict.fromkeys(s.name for s in sets if s.runs))
    rows = []
    for key, (value, where) in INHERITED_FROM_TITER.items():
        row = {"param": f"`{key}`", "TITer's code": _param_text(value), "where in TITer's code": where}
        for name in names:
            used = dict.fromkeys(_param_text(r.params[key]) for s in sets if s.name == name
                                 for seeds in s.runs.values() for r in seeds.values() if key in r.params)
            row[name] = "/".join(used)
        rows.append(row)
    return rows, ["param", "TITer's code", "where in TITer's code", *names]


def _per_seed(values: Sequence[Any]) -> str:
    """One value per seed, in seed order (``/``-separated), or the common one."""
    text = [str(v) for v in values]
    return text[0] if len(set(text)) == 1 else "/".join(text)


def _peak_epoch(history: Sequence[Mapping[str, Any]]) -> Optional[int]:
    """The RL epoch (1-based) of the best validation MRR (the first, on a tie), or ``None``."""
    vals = [(r["val_mrr"], -int(r["epoch"])) for r in history if r.get("val_mrr") is not None]
    return -max(vals)[1] + 1 if vals else None


def ablation_rows(sets: Sequence[ResultSet]) -> list[dict[str, str]]:
    """One row per (set, dataset, arm) of the pretraining-epochs ablation: RL budget, the RL epoch by which
    the mean training reward reached :data:`REWARD_THRESHOLD` per seed (the paper's efficiency measure,
    beside what the paper says), final reward, best validation MRR and where it peaked, test metrics."""
    rows = []
    for s in sets:
        for arm, seeds in s.ablation.items():
            runs = list(seeds.values())
            evaluated = [r for r in runs if r.metrics is not None]
            reached = [epochs_to_reward(r.history) for r in runs]
            row = {"set": s.name, "dataset": s.dataset, "pretrain epochs": str(arm),
                   "seeds": ",".join(str(r.seed) for r in runs), "RL epochs": _epochs(runs),
                   "precision": _one([r.precision for r in runs]),
                   f"reward ≥ {REWARD_THRESHOLD} at RL epoch": _per_seed(
                       [t if t is not None else f"not in {r.epochs_trained}" for t, r in zip(reached, runs)]),
                   f"paper: reward ≥ {REWARD_THRESHOLD} at RL epoch": ABLATION_REWARD_EPOCHS.get(arm, ""),
                   "final reward": _pm([r.history[-1]["reward"] for r in runs], scale=1.0, digits=3),
                   "best val MRR": _pm([r.best_val_mrr for r in runs if r.best_val_mrr is not None])
                   if any(r.best_val_mrr is not None for r in runs) else "",
                   "val MRR peak at RL epoch": _per_seed([_peak_epoch(r.history) or "" for r in runs])}
            for m in METRIC_KEYS:
                row[_METRIC_NAMES[m]] = _pm([r.metrics[m] for r in evaluated]) if evaluated else "not evaluated"
            rows.append(row)
    return rows


ABLATION_COLUMNS = ("set", "dataset", "pretrain epochs", "seeds", "RL epochs", "precision",
                    f"reward ≥ {REWARD_THRESHOLD} at RL epoch", f"paper: reward ≥ {REWARD_THRESHOLD} at RL epoch",
                    "final reward", "best val MRR", "val MRR peak at RL epoch", "MRR", "H@1", "H@3", "H@10")


def _ablation_figures(s: ResultSet, fig_dir: Path, stem: str) -> list[str]:
    """The ablation's figures of one set (the paper's: reward curves by arm, validation MRR by arm; and the
    validation MRR curves), as PNGs in ``fig_dir``; returns their file names."""
    curves = {f"{arm} pretraining epochs": {seed: r.history for seed, r in seeds.items()}
              for arm, seeds in s.ablation.items()}
    names = [f"{stem}-ablation-reward.png", f"{stem}-ablation-best-val-mrr.png", f"{stem}-ablation-val-mrr.png"]
    plot_curves(curves, "reward", "mean training reward", f"{s.dataset}, {s.name}: RL reward by pretraining epochs",
                fig_dir / names[0], threshold=REWARD_THRESHOLD)
    best = {arm: [r.best_val_mrr for r in seeds.values() if r.best_val_mrr is not None]
            for arm, seeds in s.ablation.items()}
    plot_bars([str(a) for a in best], [float(np.mean(b)) if b else float("nan") for b in best.values()],
              [float(np.std(b, ddof=1)) if len(b) > 1 else 0.0 for b in best.values()],
              ("pretraining epochs", "best validation MRR"), f"{s.dataset}, {s.name}: best validation MRR by arm",
              fig_dir / names[1])
    plot_curves(curves, "val_mrr", "validation MRR", f"{s.dataset}, {s.name}: validation MRR by pretraining epochs",
                fig_dir / names[2])
    return names


# ---------------------------------------------------------------------------------------- page


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_results_page(sets: Sequence[ResultSet], out: str | Path, figures_dir: Optional[str | Path] = None,
                       command: str = "raptor results", draft: bool = False) -> Path:
    """Write the results page ``out`` (Markdown) and its figures (``figures_dir``, default
    ``<out's folder>/figures/results``); returns ``out``. ``draft``: the sources were not checked to be
    tracked by git, and the page says so at its top."""
    out = Path(out)
    fig_dir = Path(figures_dir) if figures_dir is not None else out.parent / "figures" / "results"
    fig_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Results", "",
        f"<!-- generated by `{command}`: do not edit by hand; re-run it instead -->", "",
        *(["**Draft**: made from sources that git does not track (`--untracked`); it cannot be made again "
           "from a clone.", ""] if draft else []),
        f"Generated by `{command}` from the runs' artifacts (metrics.json, history.json, summary.json, "
        "significance.json, or for folders of single runs the per-query ranks.parquet from which the tests are "
        "computed): no number here is typed. Test metrics are time-aware filtered, over both "
        f"directions, in percent, mean ± sample std (n - 1) over seeds; ranks break ties the {TIE_RULE.split(':')[0]} way "
        f"({TIE_RULE.split(':')[1].strip()}, `docs/evaluation.md`). "
        "`RL epochs` is what the runs trained of their budget; `paper MRR` is the paper's Table 1; "
        "`val MRR peak at RL epoch`: the RL epoch (from 1) whose validation MRR was best, whose checkpoint "
        "was tested, one per seed; "
        "`train h/seed`: hours of RL training per seed, validation included (the machine is the source's).", "",
        "Sources:", "",
    ]
    for s in sets:
        lines.append(f"- **{s.name}** / {s.dataset}: {s.source}")
    lines += ["", "## Test results", "", _markdown_table(result_rows(sets), RESULT_COLUMNS)]
    sig = significance_rows(sets)
    if sig:
        lines += ["## Significance", "",
                  "Paired one-sided t-test over seeds (the paper marks p < 0.05 on its table without naming its test; "
                  "this is our reading), and per query on reciprocal "
                  "ranks: paired bootstrap of the MRR difference and the Wilcoxon signed-rank test.", "",
                  _markdown_table(sig, SIGNIFICANCE_COLUMNS)]
    readings = reading_rows(sets)
    if readings:
        lines += ["## Evaluation-only readings: the same checkpoints re-scored", "",
                  "Each run's best-validation model evaluated again on the test split with the reading's evaluation "
                  "params changed (`raptor rescore`, `docs/evaluation.md`): the checkpoints are the ones validation picked "
                  "under the default evaluation, so the difference is the evaluation's alone. Means over the "
                  "seeds re-scored; `diff`: reading minus default, in points; the t-test pairs the seeds "
                  "(two-sided), the bootstrap the queries.", "",
                  _markdown_table(readings, READING_COLUMNS)]
        lines += ["The systems compared under each reading (as in Significance above, over the seeds re-scored):", "",
                  _markdown_table(reading_significance_rows(sets), READING_SIGNIFICANCE_COLUMNS)]
    with_readings = [x for name in dict.fromkeys(s.name for s in sets)
                     for x in [s for s in sets if s.name == name] + reading_sets([s for s in sets if s.name == name])]
    rows, cols = paper_layout_rows(with_readings)
    lines += ["## In the paper's layout", "",
              f"`*`: better than {_baseline_label()} in the paired one-sided t-test over seeds, p < {ALPHA} (the paper's "
              "marks on its RL-RAPTOR row, test unnamed; ours from each set's significance tests above). A row whose set names a "
              "reading (`set, KEY=VALUE`) is that set's checkpoints re-scored with it (above).", "",
              _markdown_table(rows, cols)]
    inherited, inherited_cols = inherited_rows(sets)
    lines += ["## Settings inherited from TITer's code", "",
              "The paper's stated training settings are the defaults of TITer's code (JHL-HUST/TITer); these "
              "settings the paper does not state. TITer's value and where its code sets it, beside the value "
              "each result set's runs used (empty: no run of the set has the param). `docs/agent.md` explains "
              "each; issue 39's sweep decides which become defaults.", "",
              _markdown_table(inherited, inherited_cols)]
    used = usage_rows(sets)
    if used:
        lines += ["## Stage wall time and peak memory", "",
                  "The latest run of each pipeline stage, as the pipeline flow measured it "
                  "(`runs/stage-usage.jsonl`): wall time, and the peak resident memory of the pipeline's process "
                  "during the stage (reset when it starts; `*`: the process's lifetime peak). It includes what "
                  "the process still holds from earlier stages of the same invocation; `†`: measured before the "
                  "pipeline returned the heap that earlier stages had freed to the OS before each stage, so "
                  "it includes that too and reads high for late stages. A stage resumed after an interruption counts only its last run; "
                  "`train h/seed` above has the training's whole time. Seeds train side by side "
                  "(`train.parallel_runs`), so a fine-tuning stage's time is not the sum over its seeds.", "",
                  _markdown_table(used, USAGE_COLUMNS)]
    rel = fig_dir.relative_to(out.parent) if fig_dir.is_relative_to(out.parent) else fig_dir
    ablated = [s for s in sets if s.ablation]
    if ablated:
        lines += ["## Pretraining-epochs ablation", "",
                  "RL-RAPTOR fine-tuned from each arm's pretraining (0 epochs: no pretraining, a random "
                  "initialisation) with one RL budget (`ablation/dvc.yaml`; in a folder of long runs, "
                  "`scripts/longrun.sh start raptor:S:pN`, with the set's Pure-RL and RL-RAPTOR runs as the arms "
                  "they are). The paper's one number for the ablation is its example of training efficiency: "
                  f"the RL epoch after which the average training reward exceeds {REWARD_THRESHOLD} (here: reaches it), for "
                  "10 pretraining epochs and for Pure-RL; its figure is not in the source we have, so that column is "
                  "all that can be set beside ours. RL epochs count from "
                  "1; `not in N`: not reached in the N epochs trained.", "",
                  _markdown_table(ablation_rows(ablated), ABLATION_COLUMNS)]
        for s in ablated:
            names = _ablation_figures(s, fig_dir, f"{_slug(s.name)}-{_slug(s.dataset)}")
            lines += [f"### Ablation: {s.dataset}, {s.name}", "",
                      " ".join(f"![{n.split('-ablation-')[1][:-4]}]({rel}/{n})" for n in names), ""]
    lines += ["## Learning curves", "",
              "Validation MRR and training reward per RL epoch, mean ± 1 std over seeds, to the longest "
              "budget reached; dashed lines: the paper's test MRR of the same system (400 RL epochs).", ""]
    for s in (s for s in sets if s.runs):
        curves = {variant_registry.get(v).label: {seed: r.history for seed, r in seeds.items()}
                  for v, seeds in s.runs.items()}
        refs = {label: MAIN_TABLE[label][s.dataset][0] / 100 for label in curves
                if s.dataset in MAIN_TABLE.get(label, {})}
        stem = f"{_slug(s.name)}-{_slug(s.dataset)}"
        plot_curves(curves, "val_mrr", "validation MRR", f"{s.dataset}, {s.name}: validation MRR",
                    fig_dir / f"{stem}-val-mrr.png", references=refs)
        plot_curves(curves, "reward", "mean training reward", f"{s.dataset}, {s.name}: RL reward",
                    fig_dir / f"{stem}-reward.png")
        lines += [f"### {s.dataset}, {s.name}", "",
                  f"![validation MRR]({rel}/{stem}-val-mrr.png) ![reward]({rel}/{stem}-reward.png)", ""]
    atomic_write_text(out, "\n".join(lines))
    return out


def expand_folder(folder: str) -> list[str]:
    """The folders a source part names: itself, or with a wildcard (``results/paper-ICEWS14/*``: every
    sitting's records of a campaign, pooled) the folders it matches, sorted. :class:`ValueError` when a
    pattern matches no folder (a typo would otherwise drop runs from the page without a word)."""
    if not glob.has_magic(folder):
        return [folder]
    found = sorted(f for f in glob.glob(folder) if Path(f).is_dir())
    if not found:
        raise ValueError(f"{folder!r}: matches no folder")
    return found


def _source_parts(spec: str) -> tuple[Optional[str], list[str]]:
    """``(NAME or None, [FOLDER, ...])`` of one ``[NAME=]FOLDER[+FOLDER...]`` spec, wildcards expanded."""
    name, sep, folder = spec.partition("=")
    if not sep:
        name, folder = None, spec
    parts = folder.split(POOL_SEPARATOR)
    if not all(parts):
        raise ValueError(f"{spec!r}: an empty folder name (expected [NAME=]FOLDER[{POOL_SEPARATOR}FOLDER...])")
    return name, [f for part in parts for f in expand_folder(part)]


def parse_sources(specs: Sequence[str]) -> list[ResultSet]:
    """``NAME=FOLDER`` (or ``FOLDER``, named after it) -> the result sets, in the order given.
    ``NAME=FOLDER+FOLDER...`` pools each dataset's runs of those folders into one set (:func:`pool`); a
    folder with a wildcard (``NAME=results/paper-ICEWS14/*``) stands for the folders it matches."""
    sets: list[ResultSet] = []
    for spec in specs:
        name, folders = _source_parts(spec)
        if len(folders) == 1:
            sets += discover(folders[0], name)
            continue
        name = name or POOL_SEPARATOR.join(Path(f).name for f in folders)
        by_dataset: dict[str, list[ResultSet]] = {}
        for f in folders:
            for s in discover(f, name):
                by_dataset.setdefault(s.dataset, []).append(s)
        sets += [pool(name, parts) if len(parts) > 1 else parts[0] for parts in by_dataset.values()]
    return sets


def source_folders(specs: Sequence[str]) -> list[str]:
    """The folders of ``NAME=FOLDER`` / ``FOLDER`` / ``NAME=FOLDER+FOLDER`` specs, in order, wildcards expanded."""
    return [f for spec in specs for f in _source_parts(spec)[1]]


def write_from_sources(specs: Sequence[str], out: str | Path, figures_dir: Optional[str | Path] = None,
                       command: Optional[str] = None, untracked: bool = False) -> Mapping[str, Any]:
    """:func:`parse_sources` then :func:`write_results_page`; returns a short summary. Every source
    must be tracked by git (:func:`require_tracked`) unless ``untracked`` (a draft page)."""
    if not untracked:
        for folder in source_folders(specs):
            if Path(folder).is_dir():  # a missing folder is discover's error, with its own message
                require_tracked(folder)
    sets = parse_sources(specs)
    page = write_results_page(sets, out, figures_dir, command or "raptor results " + " ".join(specs), draft=untracked)
    return {"out": str(page), "sets": [(s.name, s.dataset, s.contents()) for s in sets]}
