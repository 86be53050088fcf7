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
like any run and never reuses a result for other params. :func:`raptor.reporting.sweep_page.write_results`
tabulates the arms (the sweep's tables and the docs' sweeps page are :mod:`raptor.reporting.sweep_page`'s).

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
+- std over seeds, :mod:`raptor.reporting.sweep_page`). The tables and the docs are made from it
alone; a run whose record matches the run it would train is not trained again, even where the run
folders are gone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from raptor.agents import variants as variant_registry
from raptor.config import (SWEEPS_KEY, TEST_TIME_EVAL_KEYS, ConfigError, Params, check_not_stage_graph, flatten,
                           local_overrides, params_from_dict, params_to_dict, read_yaml, result_params)
from raptor.constants import seed_dir
from raptor.runs.rundir import RunDir
from raptor.common.io import atomic_write_json, atomic_write_text

#: Where a sweep writes unless told otherwise (``{dataset}``, ``{name}`` filled in).
DEFAULT_OUT = "runs/{dataset}/sweeps/{name}"
#: Where a sweep keeps its results and run records unless told otherwise (tracked by git).
DEFAULT_RESULTS = "results/sweeps/{name}/{dataset}"
#: The arm made of the base alone (``one_at_a_time`` adds it; deltas are taken against it).
DEFAULT_ARM = "default"
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


def value_name(value: Any) -> str:
    """An override's value as arm names and the sweep's tables write it: a string as it is, else JSON."""
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
        return [Arm(",".join(f"{k}={value_name(v)}" for k, v in zip(keys, combo)), dict(zip(keys, combo)))
                for combo in itertools.product(*(grid[k] for k in keys))]
    arms = [] if has_default else [Arm(DEFAULT_ARM, {})]
    for key, values in grid.items():
        arms += [Arm(f"{key}={value_name(v)}", {key: v}) for v in values if v != resolved[key]]
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


def dvc_script(sweep: Sweep, params: Mapping[str, Params], queue: bool = True) -> list[str]:
    """:func:`dvc_commands` as shell lines (``| sh`` runs them), each evaluation-only arm's command
    (:func:`evaluation_only_arms` over the arms' ``params``) after a comment saying how it differs from the
    Prefect sweep's: as a DVC experiment the arm trains again, and its validation picks its own checkpoint under
    the arm's params (``eval.*`` is a param of the fine-tuning stage, whose validation uses it), where
    ``raptor sweep`` and the flow re-score the default arm's checkpoints (:mod:`raptor.pipeline.rescore`)."""
    import shlex

    eval_only = evaluation_only_arms(params)
    lines = []
    for arm, cmd in zip(sweep.arms, dvc_commands(sweep, queue)):
        if arm.name in eval_only:
            keys = ", ".join(f"{k}={v!r}" for k, v in sorted(eval_only[arm.name].items()))
            lines.append(f"# arm {arm.name}: evaluation-only ({keys}); this experiment trains again and validates "
                         f"under the arm's params; `raptor sweep` re-scores the {DEFAULT_ARM} arm's checkpoints instead")
        lines.append(shlex.join(cmd))
    return lines


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
# Runs and their records
# ---------------------------------------------------------------------------------------------


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
    from raptor.pipeline.experiment import precision_setting, run_code
    from raptor.common.provenance import code_hash, content_hash

    inputs = {**input_hashes, "init_model": content_hash(job.init_model) if job.init_model else None}
    # `auto` resolves by the machine that trains (a Dask worker, a GPU box), not the one matching records:
    # None, which a record of either precision matches (raptor.reporting.records.valid_record)
    setting = precision_setting(params, job.variant)
    return RunDir.rl_fingerprint(params, job.variant, job.seed, inputs, code_hash(run_code(job.variant)),
                                 job.pretrain_epochs, None if setting == "auto" else setting)


def recorded_runs(plan: Plan, params: Mapping[str, Params], input_hashes: Mapping[str, Optional[str]],
                  results: str | Path) -> dict[str, dict[str, Any]]:
    """``{run name: summary}`` of the training jobs whose record in ``results`` is of the very run the
    job would train (:func:`raptor.reporting.records.valid_record`): those need no training nor evaluation.
    A job of an evaluation-only arm (:func:`rescored_jobs`) counts when its record is the default arm's run
    re-scored under the arm's overrides (:func:`valid_rescored_record`)."""
    from raptor.pipeline.experiment import effective_epochs
    from raptor.reporting.records import valid_record

    out = {}
    rescored = rescored_jobs(plan, params)
    for job in plan.train:
        if job.init_model is not None and not Path(job.init_model).is_file():
            continue  # its pretraining has not run: the job cannot be matched (nor trained) yet
        if job.run_name in rescored:  # an evaluation-only arm's run: the default arm's, re-scored
            default_job, overrides = rescored[job.run_name]
            summary = valid_rescored_record(plan, job, default_job, overrides, params[DEFAULT_ARM], input_hashes,
                                            results)
            if summary is not None:
                out[job.run_name] = summary
            continue
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
    than the declaration's. The record of an evaluation-only arm's run made by re-scoring
    (:func:`raptor.reporting.records.save_rescored_record`) holds the default arm's fingerprint: it is checked
    against the default arm's declaration, and only where the two declarations make the arm evaluation-only
    (:func:`evaluation_only`)."""
    from raptor.reporting.records import RESCORED, read_record

    used: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    declared: dict[str, Optional[dict[str, Any]]] = {}

    def declaration(arm: str) -> Optional[dict[str, Any]]:
        if arm not in declared:
            path = Path(results) / "params" / f"{arm}.json"
            declared[arm] = flatten(json.loads(path.read_text())) if path.is_file() else None
        return declared[arm]

    for job in plan.train:
        complete = read_record(*job_dirs(plan, job, results))
        if complete is None:
            continue
        fingerprint, summary = complete
        flat = declaration(job.arm)
        if flat is None:
            refused[job.run_name] = f"{Path(results) / 'params' / (job.arm + '.json')} missing (the arm's declaration)"
            continue
        if summary.get(RESCORED):  # the default arm's run, scored under this arm's reading
            default = declaration(DEFAULT_ARM)
            if default is None or evaluation_only(flat, default) is None:
                refused[job.run_name] = (f"a re-scored record, and arm {job.arm} is not evaluation-only against "
                                         f"{Path(results) / 'params' / (DEFAULT_ARM + '.json')}")
                continue
            flat = default
        wrong = record_mismatch(fingerprint, job, flat)
        if wrong:
            refused[job.run_name] = "record of another run (" + "; ".join(wrong) + ")"
        else:
            used[job.run_name] = summary
    return used, refused


def record_mismatch(fingerprint: Mapping[str, Any], job: TrainJob, declared: Mapping[str, Any]) -> list[str]:
    """What in a run's ``fingerprint`` (``run_config.json``) is not ``job``'s: its variant, seed, pretraining
    budget, or a param value other than ``declared`` (the arm's params, flattened); empty when none is."""
    wrong = [f"{k}: {fingerprint.get(k)!r}, job {v!r}" for k, v in
             (("variant", job.variant), ("seed", job.seed), ("pretrain_epochs", job.pretrain_epochs))
             if fingerprint.get(k) != v]
    return wrong + [f"{k}: {v!r}, declared {declared.get(k, '(absent)')!r}"
                    for k, v in sorted((fingerprint.get("params") or {}).items()) if declared.get(k, KeyError) != v]


def evaluation_only(arm: Mapping[str, Any], default: Mapping[str, Any]) -> Optional[dict[str, Any]]:
    """The overrides of an evaluation-only arm, ``{key: the arm's value}``, where an arm's flattened params
    (``arm``) differ from the default arm's (``default``) in evaluation params that act at test time
    (:data:`raptor.config.TEST_TIME_EVAL_KEYS`) and nothing else; ``None`` for an arm that trains otherwise,
    or is the default. Such an arm trains what the default arm trains: its runs are the default arm's
    checkpoints evaluated again under these params (:mod:`raptor.pipeline.rescore`, docs/sweeps.md)."""
    differ = sorted(k for k in set(arm) | set(default) if arm.get(k, KeyError) != default.get(k, KeyError))
    if not differ or not set(differ) <= set(TEST_TIME_EVAL_KEYS):
        return None
    return {k: arm[k] for k in differ}


def evaluation_only_arms(params: Mapping[str, Params]) -> dict[str, dict[str, Any]]:
    """``{arm: overrides}`` of a sweep's evaluation-only arms (:func:`evaluation_only` against the arm
    :data:`DEFAULT_ARM`, given the arms' params as :func:`load_sweep` returns them); ``{}`` without a default arm."""
    if DEFAULT_ARM not in params:
        return {}
    default = flatten(params_to_dict(params[DEFAULT_ARM]))
    found = {name: evaluation_only(flatten(params_to_dict(p)), default) for name, p in params.items()}
    return {name: o for name, o in found.items() if o is not None}


def rescored_jobs(plan: Plan, params: Mapping[str, Params]) -> dict[str, tuple[TrainJob, dict[str, Any]]]:
    """``{run name: (the default arm's job, overrides)}`` of ``plan``'s jobs of evaluation-only arms
    (:func:`evaluation_only_arms` over the arms' ``params``): each is the default arm's run of the same variant
    and seed, re-scored under the arm's overrides (:func:`raptor.pipeline.rescore.rescore_job`), not trained."""
    arms = evaluation_only_arms(params)
    default = {(j.variant, j.seed): j for j in plan.train if j.arm == DEFAULT_ARM}
    return {j.run_name: (default[(j.variant, j.seed)], arms[j.arm]) for j in plan.train
            if j.arm in arms and (j.variant, j.seed) in default}


def valid_rescored_record(plan: Plan, job: TrainJob, default_job: TrainJob, overrides: Mapping[str, Any],
                          default_params: Params, input_hashes: Mapping[str, Optional[str]],
                          results: str | Path) -> Optional[dict[str, Any]]:
    """The summary of ``job``'s record in ``results`` if it is the re-scored record
    (:func:`raptor.reporting.records.save_rescored_record`) of the very run ``default_job`` would train
    (``default_params``: the default arm's), under ``overrides``; else ``None``."""
    from raptor.pipeline.experiment import effective_epochs
    from raptor.reporting.records import RESCORED, valid_record

    summary = valid_record(*job_dirs(plan, job, results), expected_fingerprint(default_params, default_job, input_hashes),
                           effective_epochs(default_params, default_job.variant, default_job.pretrain_epochs))
    about = (summary or {}).get(RESCORED) or {}
    return summary if about.get("arm") == DEFAULT_ARM and about.get("overrides") == dict(overrides) else None


def save_job_record(plan: Plan, job: TrainJob, results: str | Path) -> None:
    """Copy the record of a finished, evaluated job into ``results`` (:func:`raptor.reporting.records.save_record`)."""
    from raptor.reporting.records import save_record

    save_record(*job_dirs(plan, job), *job_dirs(plan, job, results))


# ---------------------------------------------------------------------------------------------
# An arm's runs trained as long runs (scripts/longrun.sh), outside the sweep's own folder
# ---------------------------------------------------------------------------------------------

#: Where a folder of long runs keeps the runs of a sweep's arms: ``runs/<dataset>/`` + this
#: (``{name}``, ``{arm}``, ``{variant}`` filled in), each run a ``raptor train --out`` folder (``rl/``, ``pretrain/``)
#: with its test evaluation in ``eval/``.
LONG_RUN_ARM = "sweeps/{name}/{arm}/{variant}"


def arm_run_params(params_file: str | Path, name: str, arm: str) -> tuple[str, Params, Sweep]:
    """The params file of a run of arm ``arm`` of sweep ``name`` trained on its own (a long run,
    ``scripts/longrun.sh``, which resumes across sessions and machines where a sweep's worker does not), as
    ``(text, params, sweep)``.

    The text is ``params_file`` (a params.yaml with its ``overrides``, e.g. a long-runs folder's) with the
    sweep's base and the arm's overrides added to its ``overrides`` (the base's ``profile`` selected), so it
    loads as the arm's params exactly as the sweep resolves them from ``params_file`` (:func:`arm_params`,
    no local overrides file: :func:`write_arm_params` checks it). :class:`ConfigError` names an unknown sweep
    or arm."""
    import yaml

    from raptor.config import OVERRIDES_KEY

    raw = read_yaml(params_file) or {}
    try:
        sweep = parse_sweep(raw, name)
        arms = {a.name: a for a in sweep.arms}
        if arm not in arms:
            raise ConfigError(f"{SWEEPS_KEY}.{name}: no arm {arm!r} (arms: {', '.join(arms)})")
        want = arm_params(raw, Sweep(name, sweep.base, (arms[arm],), sweep.variants))[arm]
    except ConfigError as exc:
        raise ConfigError(f"{params_file}: {exc}") from None
    merged = {**sweep.base, **arms[arm].overrides}
    text = dict(raw)
    if "profile" in merged:
        text["profile"] = merged.pop("profile")
    text[OVERRIDES_KEY] = {**flatten(raw.get(OVERRIDES_KEY) or {}), **merged}
    body = (f"# {Path(params_file).name} with sweep {name}'s base and arm {arm} in `{OVERRIDES_KEY}` "
            f"(raptor.pipeline.sweep.arm_run_params)\n" + yaml.safe_dump(text, sort_keys=False))
    return body, want, sweep


def write_arm_params(params_file: str | Path, name: str, arm: str, out: str | Path) -> Params:
    """Write ``out`` (atomically, its folder made): :func:`arm_run_params`'s file, checked to load as the
    arm's params before it replaces ``out``. Returns them."""
    import os

    from raptor.config import load_params

    body, want, _ = arm_run_params(params_file, name, arm)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # two starts of one arm at once must not share it
    atomic_write_text(tmp, body)
    try:
        got = load_params(tmp)
        if got != want:  # a guard: the file must load as the sweep's own arm
            raise ConfigError(f"{out}: does not load as arm {arm} of sweep {name} (a bug in arm_run_params)")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(out)
    return got
