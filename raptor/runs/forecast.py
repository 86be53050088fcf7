"""How long the long runs still take, and when queued ones would start and end: the estimates that
``scripts/longrun.sh status`` prints (status lines, not promises).

A long-runs folder (``docs/deployment.md``) holds ``runs/<dataset>/<variant>/seed<S>/``, the
pretraining-epochs ablation's arms ``runs/<dataset>/ablation/p<N>/seed<S>/`` (RL-RAPTOR pretrained for
``N`` epochs) and the runs of a sweep's arms ``runs/<dataset>/sweeps/<name>/<arm>/<variant>/seed<S>/``
(their params in :data:`ARM_PARAMS`), each with ``pretrain/history.json`` (RL-RAPTOR) and
``rl/history.json``, and ``rl/summary.json`` once trained. A queued run is named by its spec:
``VARIANT:SEED``, ``raptor:SEED:pN`` or ``VARIANT:SEED:NAME/ARM``. Times are seconds; history rows carry the epoch's ``seconds`` and, after a
validation round, its ``val_seconds``.

A queued run's expected time is measured, not modelled: the median over the folder's finished runs of
the same variant and dataset of their RL time (training and validation), plus their pretraining time
per epoch times the epochs it pretrains; where the folder has finished none, the runs of the same budget
recorded in its pinned source's ``results/`` (:data:`RECORDS`), then in the checkout's that asks
(``longrun.sh status`` passes its own ``results/``: runs collected after the pin; other machines, other
sessions: a guide). Not counted, so the estimates err both ways: the test after
training (a minute or two: starts come early) and the faster pace of a run left alone
(``longrun.sh rebalance`` gives it every core: ends come late).
"""

from __future__ import annotations

import datetime
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from raptor.agents import variants
from raptor.reporting import runs_reader
from raptor.runs.loop import phase_seconds, remaining_seconds

#: The params file of one dataset's runs in a long-runs folder, where they have their own (``longrun.sh``
#: writes it for ``--dataset DS --set KEY=VALUE``); the folder's ``params.yaml`` otherwise.
DATASET_PARAMS = "params-{dataset}.yaml"
#: The params file of a sweep arm's runs in a long-runs folder (``longrun.sh`` writes it when it starts one:
#: :func:`raptor.pipeline.sweep.write_arm_params` of the dataset's params).
ARM_PARAMS = "sweeps/{dataset}/{sweep}/{arm}.yaml"

#: Where a long-runs folder's pinned source keeps the tracked records of runs (``raptor collect`` sets:
#: ``results/<set>[/<date>]/<dataset>/<variant>/seed<S>/``), which time a variant the folder has not finished.
RECORDS = "src/results"

#: One RL epoch's validation schedule, as :func:`raptor.runs.loop.remaining_seconds` reads it.
Schedule = tuple[int, int, tuple[int, int]]  # (rl_epochs, valid_every, (valid_every_early, valid_early_epochs))


def _history(run_dir: Path) -> Optional[list[dict[str, Any]]]:
    """A phase's history rows (:func:`raptor.reporting.runs_reader.read_history`, lenient: a status line must
    never fail), or ``None`` when missing, unreadable or not a list."""
    rows = runs_reader.read_history(run_dir, lenient=True)
    return rows if isinstance(rows, list) else None


@dataclass(frozen=True)
class Spec:
    """A run of a long-runs folder: ``variant``, ``seed`` and, for an ablation arm, ``pretrain_epochs``;
    for a sweep's arm, ``sweep`` and ``arm``."""

    dataset: str
    variant: str
    seed: int
    arm_epochs: Optional[int] = None
    sweep: Optional[str] = None
    arm: Optional[str] = None

    @classmethod
    def parse(cls, dataset: str, spec: str) -> "Spec":
        """``VARIANT:SEED``, ``raptor:SEED:pN`` or ``VARIANT:SEED:NAME/ARM`` (what ``longrun.sh queue`` writes)."""
        parts = spec.split(":")
        try:
            if len(parts) == 2:
                return cls(dataset, parts[0], int(parts[1]))
            if len(parts) == 3 and parts[2].count("/") == 1 and all(parts[2].split("/")):
                name, arm = parts[2].split("/")
                return cls(dataset, parts[0], int(parts[1]), sweep=name, arm=arm)
            if len(parts) == 3 and parts[2].startswith("p"):
                return cls(dataset, parts[0], int(parts[1]), int(parts[2][1:]))
        except ValueError:
            pass
        raise ValueError(f"run spec {spec!r}: expected VARIANT:SEED, raptor:SEED:pN or VARIANT:SEED:NAME/ARM")

    def folder(self, root: Path) -> Path:
        """The run's folder under the long-runs folder ``root``."""
        base = root / "runs" / self.dataset
        if self.arm_epochs is not None:
            return base / "ablation" / f"p{self.arm_epochs}" / f"seed{self.seed}"
        if self.sweep is not None:
            return base / "sweeps" / self.sweep / str(self.arm) / self.variant / f"seed{self.seed}"
        return base / self.variant / f"seed{self.seed}"

    @classmethod
    def of_folder(cls, out: Path, root: Optional[Path] = None) -> "Spec":
        """The spec of a run folder (the inverse of :meth:`folder`), read from its place under the long-runs
        folder ``root``'s ``runs/`` (the layouts have 3, 4 and 6 parts there; without ``root``, under the
        nearest ``runs`` folder that gives one of them)."""
        parts = _under_runs(out, root)
        seed = int(parts[-1].removeprefix("seed"))
        if len(parts) == 4:
            return cls(parts[0], "raptor", seed, int(parts[2].removeprefix("p")))
        if len(parts) == 6:
            return cls(parts[0], parts[4], seed, sweep=parts[2], arm=parts[3])
        return cls(parts[0], parts[1], seed)


#: The layouts of a run folder under ``runs/``: ``DS/VARIANT/seedS``, ``DS/ablation/pN/seedS``,
#: ``DS/sweeps/NAME/ARM/VARIANT/seedS`` (the second part naming which).
_LAYOUTS = {3: None, 4: "ablation", 6: "sweeps"}


def _under_runs(out: Path, root: Optional[Path]) -> tuple[str, ...]:
    """The parts of run folder ``out`` below ``root/runs`` (:data:`_LAYOUTS`); :class:`ValueError` if it is
    not a run folder there."""
    if root is not None:
        parts = out.relative_to(Path(root) / "runs").parts
        if len(parts) in _LAYOUTS and (_LAYOUTS[len(parts)] in (None, parts[1])):
            return parts
    else:
        for n, kind in _LAYOUTS.items():  # checked with the `runs` folder above them: a folder named sweeps
            if len(out.parts) > n and out.parts[-n - 1] == "runs" and kind in (None, out.parts[-n + 1]):
                if kind is None and out.parts[-2] in ("ablation", "sweeps"):
                    continue
                return out.parts[-n:]
    raise ValueError(f"{out}: not a run folder of a long-runs folder (runs/DS/VARIANT/seedS, "
                     "runs/DS/ablation/pN/seedS or runs/DS/sweeps/NAME/ARM/VARIANT/seedS)")


@dataclass(frozen=True)
class Measured:
    """A finished run's time: RL (training and validation) and pretraining, with its epoch count."""

    rl_seconds: float
    pretrain_seconds: float
    pretrain_epochs: int


def measured(out: Path) -> Optional[Measured]:
    """What a finished run (``rl/summary.json`` written) took, from its histories (a run with no
    epoch rows, the training-free baseline: its summary's ``seconds``); ``None`` otherwise."""
    summary = runs_reader.read_summary(out / "rl", lenient=True)
    if summary is None:
        return None
    rl = _history(out / "rl")
    pre = _history(out / "pretrain") or []
    if rl:
        return Measured(phase_seconds(rl), phase_seconds(pre), len(pre))
    seconds = summary.get("seconds") if isinstance(summary, dict) else None
    return Measured(float(seconds), 0.0, 0) if isinstance(seconds, (int, float)) else None


def pretrain_pace(finished: Sequence[Measured]) -> Optional[float]:
    """Seconds per pretraining epoch over the ``finished`` runs that pretrained; ``None`` if none did."""
    pre = [m for m in finished if m.pretrain_epochs > 0]
    return sum(m.pretrain_seconds for m in pre) / sum(m.pretrain_epochs for m in pre) if pre else None


def expected_seconds(finished: Sequence[Measured], pretrain_epochs: int) -> Optional[float]:
    """A run's expected time from ``finished`` runs of its variant: the median RL time, plus
    ``pretrain_epochs`` times their :func:`pretrain_pace`. ``None`` when nothing is measured (no
    finished run, or pretraining to estimate and none pretrained)."""
    if not finished:
        return None
    total = statistics.median(m.rl_seconds for m in finished)
    if pretrain_epochs > 0:
        pace = pretrain_pace(finished)
        if pace is None:
            return None
        total += pretrain_epochs * pace
    return total


def seconds_left(out: Path, schedule: Schedule, pretrain_epochs: int, rl_expected: Optional[float] = None,
                 pace: Optional[float] = None) -> Optional[float]:
    """Seconds a started run still trains: pretraining (``pretrain_epochs`` in all) and RL at their
    recent pace (:func:`raptor.runs.loop.remaining_seconds`). A phase not yet timed counts what the
    finished runs took: ``rl_expected`` seconds of RL, ``pace`` seconds per pretraining epoch left;
    ``None`` when a phase can be timed neither way."""
    rl_epochs, valid_every, early = schedule
    pre_h = _history(out / "pretrain") or []
    rl_h = _history(out / "rl") or []
    pre_left = remaining_seconds(pre_h, pretrain_epochs) if pretrain_epochs else 0.0
    if pre_left is None and pace is not None:
        pre_left = max(pretrain_epochs - len(pre_h), 0) * pace
    rl_left = remaining_seconds(rl_h, rl_epochs, valid_every, early) if rl_h else rl_expected
    if pre_left is None or rl_left is None:
        return None
    return pre_left + rl_left


def forecast(alive: Sequence[tuple[Optional[float], int]], queued: Sequence[tuple[Optional[float], int]],
             cores: int) -> list[Optional[tuple[float, Optional[float]]]]:
    """When each queued run would start and end, in seconds from now, as ``longrun.sh`` starts them:
    in queue order, the first one when the runs alive leave it its cores and each later one no earlier
    than the one before it (none overtakes).

    ``alive``: ``(seconds left, threads)`` of the runs training now; ``queued``: ``(expected seconds,
    threads)`` in queue order; threads 0 or above ``cores`` take every core. Returns ``(start, end)``
    per queued run, ``end`` ``None`` when its time is unknown, and ``None`` for a run whose start waits
    on cores held for an unknown time (and for every run after it).
    """
    def need(threads: int) -> int:
        return cores if threads <= 0 or threads > cores else threads

    running: list[tuple[Optional[float], int]] = [(left, need(t)) for left, t in alive]  # (end, cores)
    start: Optional[float] = 0.0
    out: list[Optional[tuple[float, Optional[float]]]] = []
    for seconds, threads in queued:
        want = need(threads)
        while start is not None:
            busy = [(end, c) for end, c in running if end is None or end > start]
            if sum(c for _, c in busy) + want <= cores:
                break
            ends = [end for end, _ in busy if end is not None]
            start = min(ends) if ends else None  # every busy core is held for an unknown time
        if start is None:
            out.append(None)
            continue
        end = None if seconds is None else start + seconds
        running.append((end, want))
        out.append((start, end))
    return out


def job_cores(pids: Sequence[int], default: int) -> int:
    """How many cores a folder's runs may use, as its jobs see it: the most CPUs in the affinity of any of
    ``pids`` (the running jobs: a folder started under ``taskset -c 1`` has one, whatever the process asking
    has), ``default`` when none of them can be read (gone, or not this machine's): :func:`started_cores` for a
    stopped folder."""
    import os

    found = []
    for pid in pids:
        try:
            found.append(len(os.sched_getaffinity(pid)))
        except (OSError, AttributeError):  # an ended process; a platform without affinities
            continue
    return max(found) if found else default


#: A long-runs folder's file holding the cores its last job start saw (``nproc`` of ``longrun.sh start``/``resume``:
#: one under ``taskset -c 1``), what a stopped folder's forecast counts.
STARTED_CORES_FILE = "cores"


def started_cores(root: Path, default: int) -> int:
    """The cores the folder ``root``'s last job start saw (:data:`STARTED_CORES_FILE`), ``default`` (the
    asker's ``nproc``) where no start wrote one or what it holds is not a positive count."""
    try:
        text = (Path(root) / STARTED_CORES_FILE).read_text().strip()
    except OSError:
        return default
    return int(text) if text.isdigit() and int(text) > 0 else default


def _duration(seconds: float) -> str:
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _clock(now: datetime.datetime, seconds: float) -> str:
    at = now + datetime.timedelta(seconds=seconds)
    return f"{at:%H:%M} UTC" if at.date() == now.date() else f"{at:%a %H:%M} UTC"


@dataclass(frozen=True)
class Folder:
    """A long-runs folder as ``longrun.sh status`` sees it: its ``root``, its runs' params (the RL
    schedule, RL-RAPTOR's pretraining epochs, ``train.equal_total_epochs``) and the machine's ``cores``."""

    root: Path
    schedule: Schedule
    pretrain_epochs: int
    cores: int
    equal_total_epochs: bool = False
    #: Further ``results/`` folders of tracked records, read after the pinned source's (:meth:`recorded`).
    records: tuple[Path, ...] = ()

    @classmethod
    def load(cls, root: Path, params_file: Path, cores: int, records: Sequence[Path] = ()) -> "Folder":
        from raptor.config import load_params
        p = load_params(params_file)
        return cls(root, (p.rl.epochs, p.eval.valid_every, (p.eval.valid_every_early, p.eval.valid_early_epochs)),
                   p.pretrain.epochs, cores, p.train.equal_total_epochs, tuple(Path(r) for r in records))

    def of_dataset(self, dataset: str) -> "Folder":
        """The folder as the runs of ``dataset`` see it: with their own params file
        (:data:`DATASET_PARAMS`, which ``longrun.sh`` writes for a ``--set`` given with ``--dataset``)
        where there is one, else this folder's."""
        own = self.root / DATASET_PARAMS.format(dataset=dataset)
        return Folder.load(self.root, own, self.cores, self.records) if own.is_file() else self

    def of_run(self, spec: Spec) -> "Folder":
        """The folder as the run ``spec`` sees it: a sweep arm's run with its arm's params file
        (:data:`ARM_PARAMS`, written when it started; its dataset's before that), another with its dataset's."""
        if spec.sweep is not None:
            own = self.root / ARM_PARAMS.format(dataset=spec.dataset, sweep=spec.sweep, arm=spec.arm)
            if own.is_file():
                return Folder.load(self.root, own, self.cores, self.records)
        return self.of_dataset(spec.dataset)

    def pretrains(self, spec: Spec) -> int:
        """Pretraining epochs of a run: an arm's own, RL-RAPTOR's from the params, none otherwise."""
        if spec.arm_epochs is not None:
            return spec.arm_epochs
        return self.pretrain_epochs if variants.get(spec.variant).pretrained else 0

    def rl_epochs(self, spec: Spec) -> int:
        """RL epochs of a run: ``rl.epochs``, plus ``pretrain.epochs`` for a variant without pretraining
        under ``train.equal_total_epochs`` (the rule of :func:`raptor.pipeline.experiment.effective_epochs`,
        which ``tests/test_forecast.py`` holds this to)."""
        extra = self.pretrain_epochs if self.equal_total_epochs and not variants.get(spec.variant).pretrained else 0
        return self.schedule[0] + extra

    def finished(self, spec: Spec) -> list[Measured]:
        """The measured times of the folder's finished runs of the spec's dataset and variant (not the
        ablation's arms); for a sweep arm's run, those of its arm, else of its sweep's arms (a sweep's budget
        may not be the campaign's), else the variant's."""
        base = self.root / "runs" / spec.dataset
        groups = [(base / spec.variant).glob("seed*")]
        if spec.sweep is not None:
            groups = [(base / "sweeps" / spec.sweep / str(spec.arm) / spec.variant).glob("seed*"),
                      (base / "sweeps" / spec.sweep).glob(f"*/{spec.variant}/seed*")] + groups
        for runs in groups:
            done = [m for m in map(measured, sorted(runs)) if m is not None]
            if done:
                return done
        return self.recorded(spec)

    def recorded(self, spec: Spec) -> list[Measured]:
        """The measured times of the runs of the spec's dataset and variant recorded in the folder's pinned
        source (:data:`RECORDS`: ``raptor collect``'s sets, in a long-runs folder's own layout) that trained
        the spec's RL budget: a guide from other machines and sessions where the folder has finished no run of
        the variant yet (a new folder of a sweep). Where the source has none, those of the first of
        :attr:`records` that has some (the checkout's ``results/``: runs collected after the pin, which time
        the ablation's arms of a campaign whose RL-RAPTOR runs were collected)."""
        budget = self.rl_epochs(spec)
        for base in (self.root / RECORDS, *self.records):
            runs = sorted(base.glob(f"*/{spec.dataset}/{spec.variant}/seed*")) + \
                sorted(base.glob(f"*/*/{spec.dataset}/{spec.variant}/seed*"))
            done = [m for out in runs
                    if (runs_reader.read_summary(out / "rl", lenient=True) or {}).get("rl_epochs") == budget
                    and (m := measured(out)) is not None]
            if done:
                return done
        return []

    def expected(self, spec: Spec) -> Optional[float]:
        """A queued run's expected time (:func:`expected_seconds`), under its own params (:meth:`of_run`)."""
        f = self.of_run(spec)
        return expected_seconds(f.finished(spec), f.pretrains(spec))

    def left(self, spec: Spec) -> Optional[float]:
        """A started run's time left (:func:`seconds_left`, the finished runs timing a phase not yet timed),
        under its own params (:meth:`of_run`)."""
        f = self.of_run(spec)
        finished = f.finished(spec)
        rl = statistics.median(m.rl_seconds for m in finished) if finished else None
        _, valid_every, early = f.schedule
        return seconds_left(spec.folder(f.root), (f.rl_epochs(spec), valid_every, early), f.pretrains(spec),
                            rl, pretrain_pace(finished))


def run_line(folder: Optional[Folder], out: Path, state: str, now: datetime.datetime) -> str:
    """One run's status line: epochs trained, best validation MRR, ``state`` (``running (pid N)``,
    ``stopped``, ``failed (...)``, or ``tested``: then its test MRR from ``eval/metrics.json``) and, until it has trained, the time left (and when a running one ends). ``folder``
    ``None`` (its params unreadable): no estimate."""
    pre_h, rl_h = _history(out / "pretrain"), _history(out / "rl")
    vals = [r["val_mrr"] for r in rl_h or [] if isinstance(r, dict) and r.get("val_mrr") is not None]
    done = (out / "rl" / "summary.json").exists()
    try:
        where = "/".join(_under_runs(out, folder.root if folder is not None else None))
    except ValueError:
        where = str(out)
    parts = [f"{where}:"]
    if pre_h is not None:
        parts.append(f"pretraining {len(pre_h)} epochs,")
    parts.append(f"RL {len(rl_h or [])} epochs" + (" (finished)" if done else "") + ",")
    parts.append(f"best val MRR {max(vals):.4f}," if vals else "no validation yet,")
    if state == "tested":  # (its test metrics written: the run is done, not stopped)
        try:
            state = f"tested (test MRR {float(json.loads((out / 'eval' / 'metrics.json').read_text())['mrr']):.4f})"
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a status line, never an error: "tested" alone
    parts.append(state)
    if done or folder is None:
        return " ".join(parts)
    try:
        spec = Spec.of_folder(out, folder.root)
        left = folder.left(spec)
        if left is not None:
            parts.append(f"| about {_duration(left)} of training left"
                         + (f", ends about {_clock(now, left)}" if state.startswith("running") else ""))
        elif (pre := folder.of_run(spec).pretrains(spec)):
            pre_left = remaining_seconds(pre_h or [], pre)
            if pre_left is not None:
                parts.append(f"| pretraining about {pre_left / 60:.0f} min left, RL not yet timed")
    except Exception as exc:  # a status line, never an error: say why there is no estimate
        parts.append(f"| no estimate ({type(exc).__name__}: {exc})")
    return " ".join(parts)


def _expected(folder: Folder, dataset: str, spec: str) -> Optional[float]:
    try:
        return folder.expected(Spec.parse(dataset, spec))
    except (ValueError, KeyError):  # a spec or variant this folder cannot time: no time, not an error
        return None


def queue_lines(folder: Folder, alive: Sequence[tuple[Path, int]], queued: Sequence[tuple[str, str, int]],
                now: datetime.datetime, stopped: int = 0) -> list[str]:
    """When the queued runs (``(dataset, spec, threads)`` in queue order) would start and end, after
    the ``alive`` runs (``(folder, threads)``, the ``stopped`` of them counted as ``resume`` would
    restart them, before the queue) at their recent pace: :func:`forecast`."""
    def folder_of(ds: str, spec: str) -> Optional[Path]:
        try:
            return Spec.parse(ds, spec).folder(folder.root)
        except ValueError:
            return None
    # a queued run that is one of the alive or stopped runs is started by nothing later (`queue` and `resume` find
    # it alive and pass it by): it is not timed twice
    held = {Path(out) for out, _ in alive}
    queued = [q for q in queued if folder_of(q[0], q[1]) not in held]
    if not queued:
        return []
    def left(out: Path) -> Optional[float]:
        try:
            return folder.left(Spec.of_folder(out, folder.root))
        except (ValueError, KeyError):
            return None

    slots = forecast([(left(out), t) for out, t in alive],
                     [(_expected(folder, ds, spec), t) for ds, spec, t in queued], folder.cores)
    lines = ["queue forecast (each queued run's time: the median of this folder's finished runs of its variant, "
             "else of the runs of the same budget recorded in its source's results/, else in this checkout's; "
             "not counted: the test after training, a lone run's faster pace"
             + (f"; the {stopped} stopped runs counted as running, as `resume` restarts them first" if stopped else "")
             + "):"]
    for (ds, spec, _), slot in zip(queued, slots):
        if slot is None:
            lines.append(f"  {ds} {spec}: start not timed (it waits for runs not yet timed)")
            continue
        start, end = slot
        text = f"  {ds} {spec}: starts in {_duration(start)} (about {_clock(now, start)})"
        text += f", ends in {_duration(end)} (about {_clock(now, end)})" if end is not None else \
            f", its time not measured (no finished or recorded run of its variant on {ds})"
        lines.append(text)
    ends = [slot[1] if slot is not None else None for slot in slots]
    if all(e is not None for e in ends):
        lines.append(f"  the queue ends in {_duration(max(ends))} of running (about {_clock(now, max(ends))} "
                     "if nothing stops it; a stop adds its length)")
    return lines
