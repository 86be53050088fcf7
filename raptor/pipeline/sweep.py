"""Sweeps: a grid of params overrides, every arm trained, validated and tested the same way.

A sweep is declared in params.yaml under ``sweeps.NAME`` (beside ``profiles``; it is not part of a
run's params)::

    sweeps:
      choices:
        base: {profile: quick, rl.epochs: 60}   # overrides every arm shares, on top of params.yaml
        variants: [raptor]                      # default: train.variants of the base
        arms:                                   # named override sets; {} = the base itself
          default: {}
          static128: {model.relation_dim: 176}
        grid:                                   # axes, expanded into more arms
          rl.entropy_decay: [0.9, 0.99]
        mode: one_at_a_time                     # one_at_a_time (default) | product

``one_at_a_time`` makes one arm per axis value that differs from the base (named ``key=value``) and
adds the base as ``default``; ``product`` makes one arm per combination (``k1=v1,k2=v2``).
Precedence, lowest first: params.yaml, its selected profile, ``params.local.yaml``, the sweep's
``base``, the arm's overrides.

:func:`plan_sweep` turns a sweep into jobs with explicit paths; arms share what they can, keyed by
content: one label table per distinct labeling setting, one pretraining run per distinct pretraining
setting and seed (with a snapshot at every arm's epoch count). Every job is an ordinary run of the
library (:func:`raptor.labeling.stage.label_dataset`, :func:`raptor.agents.actor_critic.pretrain.pretrain_run`,
:func:`raptor.pipeline.experiment.run_variant`, :func:`raptor.pipeline.experiment.evaluate_model`), so a sweep resumes
like any run and never reuses a result for other params. :func:`write_results` tabulates the arms.

Layout of a sweep folder (``runs/{dataset}/sweeps/{name}`` unless given)::

    sweep.json                       the sweep as resolved: arms, overrides, jobs
    params/<arm>.json                each arm's resolved params (what its jobs load)
    labels/<key>/                    label tables
    pretrain/<key>/seed<s>/          pretraining runs (snapshots pretrained-e<n>.pt)
    train/<arm>/<variant>/seed<s>/   RL runs (best.pt, history, summary.json)
    eval/<arm>/<variant>/seed<s>/    test metrics and predictions of best.pt

The sweep's results live in a second, small folder (``results/sweeps/{name}/{dataset}`` unless
given), meant for version control: ``sweep.json``, ``params/``, each finished run's record
(:mod:`raptor.reporting.records`: fingerprint, summary, history, test metrics, per-query ranks under
``train/...`` and ``eval/...`` as above) and ``results.json|csv|md|png`` (per seed and per arm, mean
+- std over seeds). The tables and the docs are made from it alone; a run whose record matches the
run it would train is not trained again, even where the run folders are gone.
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from raptor.agents import variants as variant_registry
from raptor.config import (SWEEPS_KEY, ConfigError, Params, check_not_stage_graph, flatten, local_overrides,
                     params_from_dict, params_to_dict, read_yaml, result_params)
from raptor.constants import METRIC_KEYS, seed_dir
from raptor.runs.rundir import RunDir
from raptor.common.io import atomic_write_json, atomic_write_text
from raptor.reporting.report import csv_text, significance
from raptor.evaluation.stats import json_safe, summarize

#: Where a sweep writes unless told otherwise (``{dataset}``, ``{name}`` filled in).
DEFAULT_OUT = "runs/{dataset}/sweeps/{name}"
#: Where a sweep keeps its results and run records unless told otherwise (tracked by git).
DEFAULT_RESULTS = "results/sweeps/{name}/{dataset}"
#: The arm made of the base alone (``one_at_a_time`` adds it; deltas are taken against it).
DEFAULT_ARM = "default"
#: The curves beside each choice's table on the sweeps page: ``(history key, axis label)``.
CHOICE_PANELS = (("val_mrr", "validation MRR"), ("reward", "training reward"))
MODES = ("one_at_a_time", "product")
#: An arm name becomes a folder name and an MLflow run name.
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=+,-]*$")
_SPEC_KEYS = {"base", "variants", "arms", "grid", "mode", "description", "notes"}


@dataclass(frozen=True)
class Arm:
    """One point of the sweep: ``overrides`` (dotted keys) on top of the sweep's base."""

    name: str
    overrides: dict[str, Any]


@dataclass(frozen=True)
class Sweep:
    name: str
    base: dict[str, Any]
    arms: tuple[Arm, ...]
    variants: Optional[tuple[str, ...]] = None
    description: str = ""
    #: Arm name or overridden dotted key -> a note shown beside the arm's results (e.g. what the paper
    #: says about the choice the arm varies).
    notes: dict[str, str] = field(default_factory=dict)

    def note(self, arm: Arm) -> str:
        """The arm's own note, else the notes of the keys it overrides (``; ``-joined)."""
        if arm.name in self.notes:
            return self.notes[arm.name]
        return "; ".join(self.notes[k] for k in arm.overrides if k in self.notes)


# ---------------------------------------------------------------------------------------------
# Declaration
# ---------------------------------------------------------------------------------------------


def declared_sweeps(raw_params: Any) -> dict[str, Any]:
    """``sweeps`` of a parsed params.yaml (``{}`` when it declares none)."""
    sweeps = (raw_params or {}).get(SWEEPS_KEY) if isinstance(raw_params, dict) else None
    if sweeps is None:
        return {}
    if not isinstance(sweeps, dict):
        raise ConfigError(f"{SWEEPS_KEY}: expected a mapping of sweep name -> sweep, got {sweeps!r}")
    return sweeps


def _value_name(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def _overrides(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of dotted keys to values, got {raw!r}")
    flat = flatten(raw)
    for dotted in flat:
        if dotted.split(".")[0] in ("profiles", SWEEPS_KEY):
            raise ConfigError(f"{where}.{dotted}: a sweep cannot set {dotted.split('.')[0]}")
        check_not_stage_graph(dotted, f"{where}.{dotted}")
    return flat


def parse_sweep(raw_params: Any, name: str) -> Sweep:
    """The sweep ``name`` of a parsed params.yaml, its grid expanded into arms; errors name the key."""
    sweeps = declared_sweeps(raw_params)
    if name not in sweeps:
        known = ", ".join(sorted(sweeps)) or "none declared"
        raise ConfigError(f"{SWEEPS_KEY}: no sweep {name!r} (known: {known})")
    where = f"{SWEEPS_KEY}.{name}"
    spec = sweeps[name]
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping with base, arms and/or grid")
    unknown = set(spec) - _SPEC_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_SPEC_KEYS))})")
    base = _overrides(spec.get("base"), f"{where}.base")
    names = spec.get("variants")
    if names is not None:
        if not isinstance(names, list) or not names:
            raise ConfigError(f"{where}.variants: expected a non-empty list of variant names")
        for v in names:
            try:
                variant_registry.get(v)
            except ValueError as exc:
                raise ConfigError(f"{where}.variants: {exc}") from None
    arms = [Arm(str(k), _overrides(v, f"{where}.arms.{k}")) for k, v in (spec.get("arms") or {}).items()]
    mode = spec.get("mode", "one_at_a_time")
    if mode not in MODES:
        raise ConfigError(f"{where}.mode: {mode!r} is not one of {', '.join(MODES)}")
    grid = spec.get("grid") or {}
    if not isinstance(grid, dict):
        raise ConfigError(f"{where}.grid: expected a mapping of dotted key -> list of values")
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.grid.{key}: expected a non-empty list of values")
        check_not_stage_graph(key, f"{where}.grid.{key}")
    if grid:
        extra = _grid_arms(grid, mode, base, raw_params, where, has_default=any(not a.overrides for a in arms))
        arms = [a for a in extra if a.name == DEFAULT_ARM] + arms + [a for a in extra if a.name != DEFAULT_ARM]
    if not arms:
        raise ConfigError(f"{where}: no arms (give `arms` and/or `grid`)")
    seen: dict[str, Arm] = {}
    for arm in arms:
        if not ARM_NAME.match(arm.name):
            raise ConfigError(f"{where}: arm name {arm.name!r} must match {ARM_NAME.pattern} (it names folders)")
        if arm.name in seen:
            raise ConfigError(f"{where}: two arms are named {arm.name!r}")
        seen[arm.name] = arm
    notes = spec.get("notes") or {}
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        raise ConfigError(f"{where}.notes: expected a mapping of arm name or dotted key -> text")
    known = set(seen) | {k for a in arms for k in a.overrides}
    for key in notes:
        if key not in known:
            raise ConfigError(f"{where}.notes.{key}: neither an arm nor a key an arm overrides")
    return Sweep(name, base, tuple(arms), tuple(names) if names else None, str(spec.get("description", "")),
                 {str(k): v for k, v in notes.items()})


def _grid_arms(grid: dict[str, list], mode: str, base: dict, raw_params: dict, where: str,
               has_default: bool) -> list[Arm]:
    resolved = flatten(params_to_dict(params_from_dict(raw_params, base)))
    for key in grid:
        if key not in resolved:
            raise ConfigError(f"{where}.grid.{key}: not a params key")
    if mode == "product":
        keys = list(grid)
        return [Arm(",".join(f"{k}={_value_name(v)}" for k, v in zip(keys, combo)), dict(zip(keys, combo)))
                for combo in itertools.product(*(grid[k] for k in keys))]
    arms = [] if has_default else [Arm(DEFAULT_ARM, {})]
    for key, values in grid.items():
        arms += [Arm(f"{key}={_value_name(v)}", {key: v}) for v in values if v != resolved[key]]
    return arms


def arm_params(raw_params: dict, sweep: Sweep, local: Optional[Mapping[str, Any]] = None) -> dict[str, Params]:
    """Every arm's validated params: params.yaml, profile, ``local`` overrides, base, the arm's."""
    out = {}
    for arm in sweep.arms:
        try:
            out[arm.name] = params_from_dict(raw_params, {**(local or {}), **sweep.base, **arm.overrides})
        except ConfigError as exc:
            raise ConfigError(f"{SWEEPS_KEY}.{sweep.name}, arm {arm.name!r}: {exc}") from None
    return out


def load_sweep(source: str | Path, name: str, local: Optional[str | Path] = None) -> tuple[Sweep, dict[str, Params]]:
    """The sweep ``name`` of params file ``source`` (and ``local`` overrides) with its arms' params."""
    raw = read_yaml(source) or {}
    try:
        sweep = parse_sweep(raw, name)
        return sweep, arm_params(raw, sweep, local_overrides(local) if local is not None else {})
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


# ---------------------------------------------------------------------------------------------
# The same grid as DVC experiments
# ---------------------------------------------------------------------------------------------


def _hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar (what ``dvc exp run -S`` parses)."""
    if isinstance(value, str):
        return value if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", value) else "'" + value.replace("'", "\\'") + "'"
    return json.dumps(value)


def dvc_commands(sweep: Sweep, queue: bool = True) -> list[list[str]]:
    """One ``dvc exp run`` per arm that runs the main pipeline with the arm's params: the base's
    profile as ``profile``, every other override of the base and the arm under ``overrides`` of
    params.yaml (applied after the profile, :data:`raptor.config.OVERRIDES_KEY`), named
    ``SWEEP-ARM``. ``dvc queue start`` then runs the queue and ``dvc exp show`` compares the metrics.
    The experiment trains the pipeline's ``train.variants`` (a sweep's ``variants`` cannot reach
    DVC's stage list), and ``params.local.yaml`` (untracked) is not copied into queued experiments."""
    from raptor.config import OVERRIDES_KEY

    out = []
    for arm in sweep.arms:
        merged = {**sweep.base, **arm.overrides}
        cmd = ["dvc", "exp", "run", *(["--queue"] if queue else []), "-n", f"{sweep.name}-{arm.name}"]
        if "profile" in merged:
            cmd += ["-S", f"profile={_hydra_value(merged.pop('profile'))}"]
        for key, value in merged.items():
            cmd += ["-S", f"++{OVERRIDES_KEY}.{key}={_hydra_value(value)}"]
        out.append(cmd)
    return out


# ---------------------------------------------------------------------------------------------
# Plan
# ---------------------------------------------------------------------------------------------


def _key(values: Mapping[str, Any]) -> str:
    text = json.dumps(dict(sorted(values.items())), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def labeling_settings(p: Params) -> dict[str, Any]:
    """The params a label table depends on."""
    return {k: v for k, v in result_params(p).items() if k.startswith("labeling.") or k == "env.max_path_length"}


def pretraining_settings(p: Params) -> dict[str, Any]:
    """The params a pretraining run depends on (its epoch count continues a run: left out), with
    those of its labels."""
    skip = ("rl.", "eval.", "labeling.")
    return {k: v for k, v in result_params(p).items()
            if not k.startswith(skip) and k not in ("pretrain.epochs", "train.equal_total_epochs")
            } | {"labels": _key(labeling_settings(p))}


@dataclass(frozen=True)
class LabelJob:
    params_path: str
    out_dir: str


@dataclass(frozen=True)
class PretrainJob:
    key: str
    params_path: str
    labels_dir: str
    seed: int
    out_dir: str
    epochs: tuple[int, ...]
    arms: tuple[str, ...]


@dataclass(frozen=True)
class TrainJob:
    arm: str
    variant: str
    seed: int
    params_path: str
    out_dir: str
    eval_dir: str
    init_model: Optional[str]
    pretrain_epochs: int

    @property
    def run_name(self) -> str:
        return f"{self.arm}-{self.variant}-seed{self.seed}"


@dataclass(frozen=True)
class Plan:
    """What a sweep runs, in order: labels, pretraining, training (then evaluation of each run)."""

    sweep: Sweep
    dataset: str
    out_dir: str
    params_files: dict[str, str]
    labels: tuple[LabelJob, ...]
    pretrain: tuple[PretrainJob, ...]
    train: tuple[TrainJob, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sweep_dir(name: str, dataset: str) -> str:
    return DEFAULT_OUT.format(name=name, dataset=dataset)


def results_dir(name: str, dataset: str) -> str:
    return DEFAULT_RESULTS.format(name=name, dataset=dataset)


def plan_sweep(sweep: Sweep, params: Mapping[str, Params], dataset: str, out_dir: str | Path,
               write: bool = True) -> Plan:
    """Jobs of ``sweep`` over the arms' ``params`` (:func:`arm_params`), writing under ``out_dir``.

    With ``write``, writes ``out_dir/params/<arm>.json`` (each arm's resolved params: what its jobs
    load) and ``out_dir/sweep.json``. Arms with equal labeling settings share one label table, arms with equal
    pretraining settings share one pretraining run per seed (snapshots at each arm's epoch count).
    """
    out = Path(out_dir)
    files: dict[str, str] = {}
    for arm in sweep.arms:
        path = out / "params" / f"{arm.name}.json"
        text = json.dumps(params_to_dict(params[arm.name]), indent=1, sort_keys=True) + "\n"
        if write and (not path.exists() or path.read_text() != text):  # unchanged files keep their time stamps
            atomic_write_text(path, text)
        files[arm.name] = str(path)

    labels: dict[str, LabelJob] = {}
    pretrain: dict[tuple[str, int], dict[str, Any]] = {}
    train: list[TrainJob] = []
    for arm in sweep.arms:
        p = params[arm.name]
        names = sweep.variants or tuple(p.train.variants)
        for name in names:
            v = variant_registry.get(name)
            for seed in p.train.seeds:
                init, n_pre = None, 0
                if v.pretrained and p.pretrain.epochs > 0:
                    lkey = _key(labeling_settings(p))
                    labels.setdefault(lkey, LabelJob(files[arm.name], str(out / "labels" / lkey)))
                    pkey = _key(pretraining_settings(p))
                    job = pretrain.setdefault((pkey, seed), {
                        "key": pkey, "params_path": files[arm.name], "labels_dir": labels[lkey].out_dir,
                        "seed": seed, "out_dir": seed_dir(out / "pretrain" / pkey, seed), "epochs": set(),
                        "arms": []})
                    job["epochs"].add(p.pretrain.epochs)
                    job["arms"].append(arm.name)
                    n_pre = p.pretrain.epochs
                    init = str(RunDir(job["out_dir"]).snapshot(n_pre))
                train.append(TrainJob(arm.name, name, seed, files[arm.name],
                                      seed_dir(out / "train" / arm.name / name, seed),
                                      seed_dir(out / "eval" / arm.name / name, seed), init, n_pre))
    plan = Plan(sweep, dataset, str(out), files, tuple(labels.values()),
                tuple(PretrainJob(**{**j, "epochs": tuple(sorted(j["epochs"])), "arms": tuple(dict.fromkeys(j["arms"]))})
                      for j in pretrain.values()),
                tuple(train))
    if write:
        atomic_write_json(out / "sweep.json", plan.to_dict())
    return plan


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


def _read(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def job_dirs(plan: Plan, job: TrainJob, root: Optional[str | Path] = None) -> tuple[Path, Path]:
    """``(training folder, evaluation folder)`` of ``job`` under ``root``: the sweep folder itself
    (default), or a results folder, which holds the runs' records in the same layout."""
    if root is None:
        return Path(job.out_dir), Path(job.eval_dir)
    base = Path(plan.out_dir)
    return Path(root) / Path(job.out_dir).relative_to(base), Path(root) / Path(job.eval_dir).relative_to(base)


def expected_fingerprint(params: Params, job: TrainJob, input_hashes: Mapping[str, Optional[str]]) -> dict[str, Any]:
    """The fingerprint :func:`raptor.pipeline.experiment.run_variant` writes for ``job`` (``params``: the arm's;
    ``input_hashes``: :meth:`raptor.runs.context.Context.input_hashes` of the sweep's data and graph), before
    it runs: what a run record must match to stand for the run. ``job.init_model`` must exist."""
    from raptor.pipeline.experiment import run_code
    from raptor.common.provenance import code_hash, content_hash

    inputs = {**input_hashes, "init_model": content_hash(job.init_model) if job.init_model else None}
    return RunDir.rl_fingerprint(params, job.variant, job.seed, inputs, code_hash(run_code(job.variant)), job.pretrain_epochs)


def recorded_runs(plan: Plan, params: Mapping[str, Params], input_hashes: Mapping[str, Optional[str]],
                  results: str | Path) -> dict[str, dict[str, Any]]:
    """``{run name: summary}`` of the training jobs whose record in ``results`` is of the very run the
    job would train (:func:`raptor.reporting.records.valid_record`): those need no training nor evaluation."""
    from raptor.pipeline.experiment import effective_epochs
    from raptor.reporting.records import valid_record

    out = {}
    for job in plan.train:
        if job.init_model is not None and not Path(job.init_model).is_file():
            continue  # its pretraining has not run: the job cannot be matched (nor trained) yet
        p = params[job.arm]
        rec_train, rec_eval = job_dirs(plan, job, results)
        summary = valid_record(rec_train, rec_eval, expected_fingerprint(p, job, input_hashes),
                               effective_epochs(p, job.variant, job.pretrain_epochs))
        if summary is not None:
            out[job.run_name] = summary
    return out


def declared_records(plan: Plan, results: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The complete records in ``results`` of ``plan``'s runs, each checked against the declaration kept
    beside it (``results/params/ARM.json``: the params its runs were trained with), not against this
    checkout's code and data as :func:`recorded_runs` does: what can be shown (a table, an MLflow
    comparison) without the data, the pretraining or the code the runs were trained with.

    Returns ``({run name: summary}, {run name: why its record is not used})``; a run without a complete
    record is in neither. A record is not used when the results folder lacks its arm's declaration, or
    its fingerprint names another variant, seed or pretraining budget than the job, or a param value other
    than the declaration's."""
    from raptor.reporting.records import read_record

    used: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    declared: dict[str, Optional[dict[str, Any]]] = {}
    for job in plan.train:
        complete = read_record(*job_dirs(plan, job, results))
        if complete is None:
            continue
        fingerprint, summary = complete
        if job.arm not in declared:
            path = Path(results) / "params" / f"{job.arm}.json"
            declared[job.arm] = flatten(json.loads(path.read_text())) if path.is_file() else None
        flat = declared[job.arm]
        if flat is None:
            refused[job.run_name] = f"{Path(results) / 'params' / (job.arm + '.json')} missing (the arm's declaration)"
            continue
        wrong = [f"{k}: {fingerprint.get(k)!r}, job {v!r}" for k, v in
                 (("variant", job.variant), ("seed", job.seed), ("pretrain_epochs", job.pretrain_epochs))
                 if fingerprint.get(k) != v]
        wrong += [f"{k}: {v!r}, declared {flat.get(k, '(absent)')!r}"
                  for k, v in sorted((fingerprint.get("params") or {}).items()) if flat.get(k, KeyError) != v]
        if wrong:
            refused[job.run_name] = "record of another run (" + "; ".join(wrong) + ")"
        else:
            used[job.run_name] = summary
    return used, refused


def save_job_record(plan: Plan, job: TrainJob, results: str | Path) -> None:
    """Copy the record of a finished, evaluated job into ``results`` (:func:`raptor.reporting.records.save_record`)."""
    from raptor.reporting.records import save_record

    save_record(*job_dirs(plan, job), *job_dirs(plan, job, results))


def collect_results(plan: Plan, root: Optional[str | Path] = None) -> dict[str, Any]:
    """Per run and per (arm, variant): best validation MRR, test metrics (fractions) and their
    mean and sample std over seeds; ``delta_test_mrr`` of each arm against :data:`DEFAULT_ARM` of
    the same variant (``None`` without a default arm). A run not yet trained or evaluated is
    reported as missing, not guessed. ``root``: read the runs from a results folder's records
    (:func:`job_dirs`) rather than from the sweep folder."""
    overrides = {a.name: a.overrides for a in plan.sweep.arms}
    notes = {a.name: plan.sweep.note(a) for a in plan.sweep.arms}
    runs, missing = [], []
    for job in plan.train:
        train_dir, eval_dir = job_dirs(plan, job, root)
        summary = _read(RunDir(train_dir).summary)
        metrics = _read(RunDir(eval_dir).metrics)
        if not summary or not metrics:
            missing.append(job.run_name)
            continue
        runs.append({"arm": job.arm, "variant": job.variant, "seed": job.seed,
                     "pretrain_epochs": job.pretrain_epochs, "rl_epochs": summary.get("rl_epochs"),
                     "best_val_mrr": summary.get("best_val_mrr"), "best_epoch": summary.get("best_epoch"),
                     "train_seconds": summary.get("seconds"), "device": summary.get("device"),
                     "precision": summary.get("precision"),
                     **{f"test_{m}": metrics.get(m) for m in METRIC_KEYS}})
    keys = ("best_val_mrr",) + tuple(f"test_{m}" for m in METRIC_KEYS)
    arms = []
    for (arm, variant), group in itertools.groupby(sorted(runs, key=lambda r: (r["arm"], r["variant"])),
                                                   key=lambda r: (r["arm"], r["variant"])):
        group = list(group)
        stats = summarize({r["seed"]: r for r in group}, keys)
        arms.append({"arm": arm, "variant": variant, "overrides": overrides[arm], "note": notes[arm],
                     "epochs": _budget(group), "seeds": stats["seeds"],
                     **{f"{k}_mean": stats[k]["mean"] for k in keys}, **{f"{k}_std": stats[k]["std"] for k in keys}})
    order = {a.name: i for i, a in enumerate(plan.sweep.arms)}
    arms.sort(key=lambda a: (order[a["arm"]], a["variant"]))
    base = {a["variant"]: a["test_mrr_mean"] for a in arms if a["arm"] == DEFAULT_ARM}
    eval_dirs = {(j.arm, j.variant): str(job_dirs(plan, j, root)[1].parent) for j in plan.train}
    incomplete = {(j.arm, j.variant) for j in plan.train if j.run_name in missing}
    for a in arms:
        a["delta_test_mrr"] = a["test_mrr_mean"] - base[a["variant"]] if a["variant"] in base else None
        pair = ((a["arm"], a["variant"]), (DEFAULT_ARM, a["variant"]))
        a["vs_default"] = (_vs_default(eval_dirs[pair[0]], eval_dirs[pair[1]])
                           if a["variant"] in base and a["arm"] != DEFAULT_ARM and not incomplete & set(pair) else None)
    return {"sweep": plan.sweep.name, "dataset": plan.dataset, "runs": runs, "arms": arms, "missing": missing}


def _vs_default(arm_eval_dir: str, default_eval_dir: str) -> dict[str, Any]:
    """An arm's test MRR against the default arm's, same variant and seeds: the paired t-test over
    seeds (two-sided; ``None`` with fewer than 2 seeds) and, on the per-query reciprocal ranks averaged
    over seeds, the paired bootstrap (95% CI of the MRR difference) and the Wilcoxon test (both two-sided):
    :func:`raptor.reporting.report.significance`, the test the pipeline applies to the variants."""
    sig = significance({"arm": arm_eval_dir, DEFAULT_ARM: default_eval_dir}, "arm", DEFAULT_ARM)
    t = (sig["seed_level"] or {}).get("mrr")
    pq = sig["per_query"]
    return {"seeds": sig["seeds"], "queries": pq["n"], "mrr_diff": pq["mrr_diff"],
            "seed_ttest_p": t["p_two_sided"] if t else None,
            "bootstrap_ci": [pq["bootstrap"]["ci_low"], pq["bootstrap"]["ci_high"]],
            "bootstrap_p": pq["bootstrap"]["p_two_sided"], "wilcoxon_p": pq["wilcoxon"]["p_two_sided"]}


def _budget(runs: list[dict[str, Any]]) -> str:
    """Epochs the runs of one arm trained: ``pretrain + RL`` (``5 + 60``; Pure-RL ``0 + 60``), the RL
    counts of all seeds where they differ (early stopping: ``5 + 40/60``)."""
    pre = sorted({r["pretrain_epochs"] or 0 for r in runs})
    rl = sorted({r["rl_epochs"] for r in runs if r["rl_epochs"] is not None})
    return "/".join(map(str, pre)) + " + " + ("/".join(map(str, rl)) or "?")


def _pct(mean: float, std: float) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def _p(p: Optional[float]) -> str:
    return "" if p is None else f"{p:.2g}"


def _delta(arm: Mapping[str, Any]) -> str:
    """The arm's change in test MRR against ``default``, in points (``""`` where there is none)."""
    return "" if arm["delta_test_mrr"] is None else f"{100 * arm['delta_test_mrr']:+.2f}"


#: :func:`verdict`'s answers.
BETTER, WORSE, UNCLEAR = "better", "worse", "no clear difference"


def verdict(arm: Mapping[str, Any], default: Optional[Mapping[str, Any]]) -> str:
    """Whether an arm beats the default arm of its variant, by a rule fixed before the results:
    :data:`BETTER` when its mean best validation MRR is higher (validation chooses) **and** the per-query
    bootstrap 95% CI of its test MRR change lies above 0 (test confirms); :data:`WORSE` for both the other
    way; :data:`UNCLEAR` otherwise. ``""`` for the default arm itself or without the tests."""
    vs = arm.get("vs_default")
    if default is None or arm["arm"] == DEFAULT_ARM or not vs:
        return ""
    d_val = arm["best_val_mrr_mean"] - default["best_val_mrr_mean"]
    lo, hi = vs["bootstrap_ci"]
    if d_val > 0 and lo > 0:
        return BETTER
    if d_val < 0 and hi < 0:
        return WORSE
    return UNCLEAR


def combination(results: Mapping[str, Any], variant: str) -> Optional[dict[str, Any]]:
    """The overrides of ``variant``'s arms that :func:`verdict` calls :data:`BETTER`, together: the arm a
    sweep trains next to see whether they add up (docs/sweeps.md, the rule fixed before the results).
    Arms are taken whole, by descending mean best validation MRR; an arm overriding a key already taken
    (``model.mlp_hidden_dim`` 128 and 512 both better) is left out, so validation picks between them.
    ``None`` when no arm is better."""
    arms = [a for a in results["arms"] if a["variant"] == variant]
    default = next((a for a in arms if a["arm"] == DEFAULT_ARM), None)
    better = sorted((a for a in arms if verdict(a, default) == BETTER), key=lambda a: -a["best_val_mrr_mean"])
    out: dict[str, Any] = {}
    for a in better:
        if not set(a["overrides"]) & set(out):
            out.update(a["overrides"])
    return out or None


def combination_markdown(results: Mapping[str, Any]) -> str:
    """Per variant, the :func:`combination` of the better readings and, where an arm with exactly
    those overrides was trained, its verdict: what the rule makes of the sweep."""
    lines = []
    for variant in dict.fromkeys(a["variant"] for a in results["arms"]):
        combo = combination(results, variant)
        if combo is None:
            lines.append(f"- {variant}: no reading is `{BETTER}`; the defaults stay.")
            continue
        over = ", ".join(f"`{k}: {_value_name(v)}`" for k, v in combo.items())
        default = next((a for a in results["arms"] if a["variant"] == variant and a["arm"] == DEFAULT_ARM), None)
        tried = [a for a in results["arms"] if a["variant"] == variant and a["overrides"] == combo]
        if not tried:
            lines.append(f"- {variant}: the `{BETTER}` readings together: {over}; not trained together yet.")
        else:
            v = verdict(tried[0], default) or "not yet tested"
            lines.append(f"- {variant}: the `{BETTER}` readings together: {over}; arm `{tried[0]['arm']}`: {v}.")
    return "\n".join(lines) + "\n"


def results_markdown(results: Mapping[str, Any]) -> str:
    """The per-arm table (percent, mean ± sample std over seeds), with each arm's test MRR against the
    default arm's (:func:`_vs_default`: t-test over seeds, per-query bootstrap CI and Wilcoxon, p two-sided)
    and the :func:`verdict`."""
    notes = any(a.get("note") for a in results["arms"])
    head = ("| arm | overrides | " + ("note | " if notes else "") + "variant | seeds | epochs | val MRR | test MRR "
            "| Hits@1 | Hits@3 | Hits@10 | Δ test MRR | t-test p (seeds) | per-query 95% CI of Δ | Wilcoxon p "
            "| verdict |\n"
            "|---|---|" + ("---|" if notes else "") + "---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    defaults = {a["variant"]: a for a in results["arms"] if a["arm"] == DEFAULT_ARM}
    rows = []
    for a in results["arms"]:
        over = ", ".join(f"`{k}: {_value_name(v)}`" for k, v in a["overrides"].items()) or "(base)"
        delta = "" if a["arm"] == DEFAULT_ARM else _delta(a)
        vs = a.get("vs_default")
        tests = (f"{_p(vs['seed_ttest_p'])} | [{100 * vs['bootstrap_ci'][0]:+.2f}, {100 * vs['bootstrap_ci'][1]:+.2f}] "
                 f"| {_p(vs['wilcoxon_p'])}") if vs else " | "
        note = f"{a.get('note', '')} | " if notes else ""
        rows.append(f"| {a['arm']} | {over} | {note}{a['variant']} | {len(a['seeds'])} | {a.get('epochs', '')} | "
                    f"{_pct(a['best_val_mrr_mean'], a['best_val_mrr_std'])} | "
                    + " | ".join(_pct(a[f'test_{m}_mean'], a[f'test_{m}_std']) for m in METRIC_KEYS)
                    + f" | {delta} | {tests} | {verdict(a, defaults.get(a['variant']))} |")
    tail = f"\nMissing (not yet trained or evaluated): {', '.join(results['missing'])}\n" if results["missing"] else ""
    return head + "\n".join(rows) + "\n" + tail


def choice_tables(results: Mapping[str, Any], default_params: Optional[Mapping[str, Any]] = None,
                  figure: Optional[Callable[[tuple[str, ...], str, list[str]], Optional[str]]] = None) -> str:
    """One small table per choice: the arms that override the same keys (``model.mlp_hidden_dim=128``
    and ``=512``), each beside ``default`` of its variant, with the value, note, epochs, validation and
    test MRR (mean ± sample std over seeds), the change in test MRR and the :func:`verdict`.
    ``default_params`` (the default arm's resolved params) supplies the default's value of each key.
    ``figure(keys, variant, arms)``, when given, returns Markdown put under the table (a figure of
    those arms, ``default`` first), or ``None``."""
    defaults = {a["variant"]: a for a in results["arms"] if a["arm"] == DEFAULT_ARM}
    default_values = flatten(dict(default_params or {}))
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for a in results["arms"]:
        if a["arm"] != DEFAULT_ARM and a["overrides"]:
            groups.setdefault(tuple(sorted(a["overrides"])), []).append(a)
    out = []
    for keys, arms in groups.items():
        out += [f"#### {', '.join(f'`{k}`' for k in keys)}", "",
                "| value | note | variant | seeds | epochs | val MRR | test MRR | Δ test MRR | verdict |",
                "|---|---|---|---|---|---|---|---|---|"]
        for variant in dict.fromkeys(a["variant"] for a in arms):
            base = defaults.get(variant)
            rows = ([base] if base else []) + [a for a in arms if a["variant"] == variant]
            for a in rows:
                if a is base:  # its values where its resolved params are at hand
                    value = (", ".join(_value_name(default_values[k]) for k in keys) + " (default)"
                             if all(k in default_values for k in keys) else "default")
                    delta, verdict_text, note = "", "", ""
                else:
                    value = ", ".join(_value_name(a["overrides"][k]) for k in keys)
                    delta = _delta(a)
                    verdict_text, note = verdict(a, base), a.get("note", "")
                out.append(f"| {value} | {note} | {variant} | {len(a['seeds'])} | {a.get('epochs', '')} | "
                           f"{_pct(a['best_val_mrr_mean'], a['best_val_mrr_std'])} | "
                           f"{_pct(a['test_mrr_mean'], a['test_mrr_std'])} | {delta} | {verdict_text} |")
        out.append("")
        for variant in dict.fromkeys(a["variant"] for a in arms) if figure else ():
            md = figure(keys, variant, [a["arm"] for a in ([defaults[variant]] if variant in defaults else [])
                                        + [a for a in arms if a["variant"] == variant]])
            if md:
                out += [md, ""]
    return "\n".join(out)


def plot_results(results: Mapping[str, Any], path: str | Path) -> None:
    """Test MRR per arm (mean ± std over seeds, one marker per seed), one panel per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(a["variant"] for a in results["arms"]))
    fig, axes = plt.subplots(1, len(variants), figsize=(1.2 + 0.7 * max(len(results["arms"]), 2), 3.6),
                             squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        arms = [a for a in results["arms"] if a["variant"] == variant]
        x = range(len(arms))
        ax.errorbar(x, [100 * a["test_mrr_mean"] for a in arms], yerr=[100 * a["test_mrr_std"] for a in arms],
                    fmt="o", capsize=4, color="C0", label="mean ± std")
        for i, a in enumerate(arms):
            seeds = [100 * r["test_mrr"] for r in results["runs"] if r["arm"] == a["arm"] and r["variant"] == variant]
            ax.plot([i] * len(seeds), seeds, "x", color="C1", alpha=0.7, label="seed" if i == 0 else None)
        ax.set_xticks(list(x), [a["arm"] for a in arms], rotation=35, ha="right", fontsize=8)
        ax.set_title(variant_registry.get(variant).label)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("test MRR (%)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"sweep {results['sweep']} on {results['dataset']}")
    fig.tight_layout()
    from raptor.common.io import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def _declaration_files(plan: Plan) -> list[str]:
    """The sweep's declaration files in its folder: ``sweep.json`` and ``params/ARM.json``."""
    return ["sweep.json"] + [f"params/{f.name}" for f in sorted((Path(plan.out_dir) / "params").glob("*.json"))]


def declaration_differences(plan: Plan, results_root: str | Path) -> list[str]:
    """The files of the sweep's declaration (``sweep.json``, ``params/ARM.json``) that ``results_root``
    holds with other contents than ``plan``'s folder: a results folder written by another checkout
    (other params or code) than the one reading it."""
    src, dst = Path(plan.out_dir), Path(results_root)
    return [n for n in _declaration_files(plan) if (src / n).is_file() and (dst / n).is_file()
            and (src / n).read_bytes() != (dst / n).read_bytes()]


def write_results(plan: Plan, results_root: Optional[str | Path] = None,
                  keep_declaration: bool = False) -> dict[str, Any]:
    """``results.json``, ``results.csv`` (per run), ``results.md`` (per arm) and ``results.png``
    in the sweep folder, or, with ``results_root``, made from the records there and written there
    beside a copy of ``sweep.json`` and ``params/`` (a folder :func:`write_sweep_page` reads); returns
    the results. ``keep_declaration``: copies only the declaration files ``results_root`` lacks, so a
    table made from another checkout keeps the params the runs were trained with
    (:func:`declaration_differences` says which differ)."""
    out = Path(plan.out_dir if results_root is None else results_root)
    if results_root is not None:
        from raptor.reporting.records import copy_tree_files

        for name in _declaration_files(plan):
            if not (keep_declaration and (out / name).is_file()):
                copy_tree_files((Path(plan.out_dir) / name).parent, (out / name).parent, Path(name).name)
    results = collect_results(plan, results_root)
    atomic_write_json(out / "results.json", json_safe(results))
    atomic_write_text(out / "results.csv",
                      csv_text(results["runs"], list(dict.fromkeys(k for r in results["runs"] for k in r))))
    atomic_write_text(out / "results.md", results_markdown(results))
    if results["arms"]:
        plot_results(results, out / "results.png")
    return results


# ---------------------------------------------------------------------------------------------
# The sweeps page (docs): generated from finished sweep folders
# ---------------------------------------------------------------------------------------------


def _sweep_curves(folder: Path, results: Mapping[str, Any], variant: str) -> dict[str, dict[int, list[dict]]]:
    """Per arm of ``variant``: seed -> RL history (``train/ARM/VARIANT/seedS/history.json``)."""
    curves: dict[str, dict[int, list[dict]]] = {}
    for a in results["arms"]:
        if a["variant"] != variant:
            continue
        for seed in a["seeds"]:
            hist = _read(folder / "train" / a["arm"] / variant / f"seed{seed}" / RunDir.HISTORY)
            if hist:
                curves.setdefault(a["arm"], {})[seed] = hist
    return curves


def _devices(runs: list[Mapping[str, Any]]) -> str:
    """Where the runs were trained, from their summaries: ``cpu, bfloat16 (26 runs); cpu, float32 (2 runs)``."""
    counts = collections.Counter((r.get("device") or "device not recorded", r.get("precision") or "precision not recorded")
                                 for r in runs)
    return "; ".join(f"{d}, {p} ({n} run{'s' if n > 1 else ''})" for (d, p), n in sorted(counts.items()))


def write_sweep_page(folders: list[tuple[str, str | Path]], out: str | Path, figures_dir: Optional[str | Path] = None,
                     command: str = "raptor sweeps") -> Path:
    """A Markdown page of finished sweeps (``(title, folder)`` pairs; a folder holds ``sweep.json`` and
    ``results.json``, :func:`write_results`): per sweep its description, base overrides, the per-arm
    table of :func:`results_markdown`, test MRR per arm and the validation curves of every arm. Figures go
    to ``figures_dir`` (default ``<out's folder>/figures/sweeps``). No number on the page is typed."""
    from raptor.reporting.report import plot_curve_panels, plot_curves

    out = Path(out)
    fig_dir = Path(figures_dir) if figures_dir is not None else out.parent / "figures" / "sweeps"
    fig_dir.mkdir(parents=True, exist_ok=True)
    rel = fig_dir.relative_to(out.parent) if fig_dir.is_relative_to(out.parent) else fig_dir
    lines = ["# Sweeps", "", f"<!-- generated by `{command}`: do not edit by hand; re-run it instead -->", "",
             f"Generated by `{command}` from each sweep's `sweep.json`, `results.json` and run histories "
             "(`python -m flows sweep NAME` or `raptor sweep NAME` writes them; docs/sweeps.md): no number here "
             "is typed. Metrics in "
             "percent, mean ± sample std over seeds; `epochs`: pretraining + RL epochs trained; Δ and the tests "
             "compare each arm with the arm `default` of the same variant (p two-sided).", ""]
    for title, folder in folders:
        folder = Path(folder)
        plan, results = _read(folder / "sweep.json"), _read(folder / "results.json")
        if not plan or not results:
            raise FileNotFoundError(f"{folder}: no sweep.json/results.json (not a finished sweep folder)")
        sweep, dataset = plan["sweep"], results["dataset"]
        for a in results["arms"]:  # results.json written before `epochs` was recorded
            if not a.get("epochs"):
                a["epochs"] = _budget([r for r in results["runs"] if (r["arm"], r["variant"]) == (a["arm"], a["variant"])])
        base = ", ".join(f"`{k}: {_value_name(v)}`" for k, v in sweep["base"].items()) or "(none)"
        commit = (folder / "COMMIT").read_text().strip()[:12] if (folder / "COMMIT").is_file() else None
        lines += [f"## {title}: sweep `{sweep['name']}` on {dataset}", ""]
        if sweep.get("description"):
            lines += [sweep["description"], ""]
        lines += [f"Base of every arm: {base}." + (f" Code: commit {commit}." if commit else "")
                  + (f" Trained on: {_devices(results['runs'])}." if results["runs"] else ""), "",
                  results_markdown(results)]
        stem = f"{re.sub(r'[^A-Za-z0-9]+', '-', title).strip('-').lower()}-{dataset.lower()}"

        def choice_figure(keys: tuple[str, ...], variant: str, arms: list[str]) -> Optional[str]:
            curves = _sweep_curves(folder, results, variant)
            curves = {a: curves[a] for a in arms if a in curves}
            if len(curves) < 2:
                return None
            path = fig_dir / f"{stem}-{variant}-{re.sub(r'[^A-Za-z0-9]+', '-', '-'.join(keys)).strip('-').lower()}.png"
            plot_curve_panels(curves, CHOICE_PANELS, f"{dataset}, {variant_registry.get(variant).label}: "
                              f"{', '.join(keys)}", path)
            return f"![{', '.join(keys)}: {' and '.join(label for _, label in CHOICE_PANELS)}]({rel}/{path.name})"

        tables = choice_tables(results, _read(folder / "params" / f"{DEFAULT_ARM}.json"), choice_figure)
        if tables:
            lines += ["### By choice", "", "Each choice's arms beside `default` (the verdict's rule: "
                      "docs/sweeps.md).", "", tables]
        if results["arms"] and not results["missing"]:
            lines += ["### What the rule makes of it", "", combination_markdown(results)]
        figs = []
        if results["arms"]:
            plot_results(results, fig_dir / f"{stem}-test-mrr.png")
            figs.append(f"![test MRR per arm]({rel}/{stem}-test-mrr.png)")
        for variant in dict.fromkeys(a["variant"] for a in results["arms"]):
            curves = _sweep_curves(folder, results, variant)
            if curves:
                label = variant_registry.get(variant).label
                path = fig_dir / f"{stem}-{variant}-val-mrr.png"
                plot_curves(curves, "val_mrr", "validation MRR", f"{dataset}, sweep {sweep['name']}: {label}", path)
                figs.append(f"![validation MRR, {label}]({rel}/{path.name})")
        lines += [" ".join(figs), ""]
    atomic_write_text(out, "\n".join(lines))
    return out
