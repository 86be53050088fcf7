"""How long the long runs still take, and when queued ones would start and end: the estimates that
``scripts/longrun.sh status`` prints (status lines, not promises).

A long-runs folder (``docs/deployment.md``) holds ``runs/<dataset>/<variant>/seed<S>/`` and the
pretraining-epochs ablation's arms ``runs/<dataset>/ablation/p<N>/seed<S>/`` (RL-RAPTOR pretrained for
``N`` epochs), each with ``pretrain/history.json`` (RL-RAPTOR) and ``rl/history.json``, and
``rl/summary.json`` once trained. A queued run is named by its spec: ``VARIANT:SEED`` or
``raptor:SEED:pN``. Times are seconds; history rows carry the epoch's ``seconds`` and, after a
validation round, its ``val_seconds``.

A queued run's expected time is measured, not modelled: the median over the folder's finished runs of
the same variant and dataset of their RL time (training and validation), plus their pretraining time
per epoch times the epochs it pretrains. The test after training (a minute or two) is not counted,
nor the faster pace of a run left alone (``longrun.sh rebalance`` gives it every core): the forecast
errs late.
"""

from __future__ import annotations

import datetime
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from raptor.runs.loop import remaining_seconds

#: One RL epoch's validation schedule, as :func:`raptor.runs.loop.remaining_seconds` reads it.
Schedule = tuple[int, int, tuple[int, int]]  # (rl_epochs, valid_every, (valid_every_early, valid_early_epochs))


def read_history(path: Path) -> Optional[list[dict[str, Any]]]:
    """The rows of a ``history.json``, or ``None`` when it is missing or unreadable (a run writes it
    atomically, but a status line must never fail)."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rows if isinstance(rows, list) else None


def phase_seconds(history: Sequence[dict[str, Any]]) -> float:
    """Seconds a phase took: its epochs' ``seconds`` plus their validation rounds' ``val_seconds``."""
    return sum(float(r.get("seconds") or 0) + float(r.get("val_seconds") or 0) for r in history)


@dataclass(frozen=True)
class Spec:
    """A run of a long-runs folder: ``variant``, ``seed`` and, for an ablation arm, ``pretrain_epochs``."""

    dataset: str
    variant: str
    seed: int
    arm_epochs: Optional[int] = None

    @classmethod
    def parse(cls, dataset: str, spec: str) -> "Spec":
        """``VARIANT:SEED`` or ``raptor:SEED:pN`` (what ``longrun.sh queue`` writes)."""
        parts = spec.split(":")
        try:
            if len(parts) == 2:
                return cls(dataset, parts[0], int(parts[1]))
            if len(parts) == 3 and parts[2].startswith("p"):
                return cls(dataset, parts[0], int(parts[1]), int(parts[2][1:]))
        except ValueError:
            pass
        raise ValueError(f"run spec {spec!r}: expected VARIANT:SEED or raptor:SEED:pN")

    def folder(self, root: Path) -> Path:
        """The run's folder under the long-runs folder ``root``."""
        base = root / "runs" / self.dataset
        if self.arm_epochs is not None:
            return base / "ablation" / f"p{self.arm_epochs}" / f"seed{self.seed}"
        return base / self.variant / f"seed{self.seed}"

    @classmethod
    def of_folder(cls, out: Path) -> "Spec":
        """The spec of a run folder (the inverse of :meth:`folder`)."""
        seed = int(out.name.removeprefix("seed"))
        if out.parent.parent.name == "ablation":
            return cls(out.parent.parent.parent.name, "raptor", seed, int(out.parent.name.removeprefix("p")))
        return cls(out.parent.parent.name, out.parent.name, seed)


@dataclass(frozen=True)
class Measured:
    """A finished run's time: RL (training and validation) and pretraining, with its epoch count."""

    rl_seconds: float
    pretrain_seconds: float
    pretrain_epochs: int


def measured(out: Path) -> Optional[Measured]:
    """What a finished run (``rl/summary.json`` written) took, from its histories; ``None`` otherwise."""
    rl = read_history(out / "rl" / "history.json")
    if not (out / "rl" / "summary.json").exists() or not rl:
        return None
    pre = read_history(out / "pretrain" / "history.json") or []
    return Measured(phase_seconds(rl), phase_seconds(pre), len(pre))


def expected_seconds(finished: Sequence[Measured], pretrain_epochs: int) -> Optional[float]:
    """A run's expected time from ``finished`` runs of its variant: the median RL time, plus
    ``pretrain_epochs`` times their mean pretraining seconds per epoch. ``None`` when nothing is
    measured (no finished run, or pretraining to estimate and none pretrained)."""
    if not finished:
        return None
    total = statistics.median(m.rl_seconds for m in finished)
    if pretrain_epochs > 0:
        pre = [m for m in finished if m.pretrain_epochs > 0]
        if not pre:
            return None
        total += pretrain_epochs * sum(m.pretrain_seconds for m in pre) / sum(m.pretrain_epochs for m in pre)
    return total


def seconds_left(out: Path, schedule: Schedule, pretrain_epochs: int,
                 rl_expected: Optional[float] = None) -> Optional[float]:
    """Seconds a started run still trains: pretraining (``pretrain_epochs`` in all) and RL at their
    recent pace (:func:`raptor.runs.loop.remaining_seconds`). An RL phase not yet timed counts
    ``rl_expected`` (the median of finished runs); ``None`` when a phase can be timed neither way."""
    rl_epochs, valid_every, early = schedule
    pre_h = read_history(out / "pretrain" / "history.json") or []
    rl_h = read_history(out / "rl" / "history.json") or []
    pre_left = remaining_seconds(pre_h, pretrain_epochs) if pretrain_epochs else 0.0
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


def _duration(seconds: float) -> str:
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _clock(now: datetime.datetime, seconds: float) -> str:
    at = now + datetime.timedelta(seconds=seconds)
    return f"{at:%H:%M} UTC" if at.date() == now.date() else f"{at:%a %H:%M} UTC"


@dataclass(frozen=True)
class Folder:
    """A long-runs folder as ``longrun.sh status`` sees it: its ``root``, its runs' params (the
    schedule and the pretraining epochs of RL-RAPTOR) and the machine's ``cores``."""

    root: Path
    schedule: Schedule
    pretrain_epochs: int
    cores: int

    @classmethod
    def load(cls, root: Path, params_file: Path, cores: int) -> "Folder":
        from raptor.config import load_params
        p = load_params(params_file)
        return cls(root, (p.rl.epochs, p.eval.valid_every, (p.eval.valid_every_early, p.eval.valid_early_epochs)),
                   p.pretrain.epochs, cores)

    def pretrains(self, spec: Spec) -> int:
        """Pretraining epochs of a run: an arm's own, RL-RAPTOR's from the params, none otherwise."""
        from raptor.agents import variants
        if spec.arm_epochs is not None:
            return spec.arm_epochs
        return self.pretrain_epochs if variants.get(spec.variant).pretrained else 0

    def finished(self, spec: Spec) -> list[Measured]:
        """The measured times of the folder's finished runs of the spec's dataset and variant (not arms)."""
        runs = sorted((self.root / "runs" / spec.dataset / spec.variant).glob("seed*"))
        return [m for m in map(measured, runs) if m is not None]

    def expected(self, spec: Spec) -> Optional[float]:
        return expected_seconds(self.finished(spec), self.pretrains(spec))

    def left(self, spec: Spec) -> Optional[float]:
        finished = self.finished(spec)
        rl = statistics.median(m.rl_seconds for m in finished) if finished else None
        return seconds_left(spec.folder(self.root), self.schedule, self.pretrains(spec), rl)


def run_line(folder: Folder, out: Path, state: str, now: datetime.datetime) -> str:
    """One run's status line: epochs trained, best validation MRR, ``state`` (``running (pid N)`` or
    ``stopped``) and, until it has trained, the time left (and when a running one ends)."""
    spec = Spec.of_folder(out)
    pre_h, rl_h = read_history(out / "pretrain" / "history.json"), read_history(out / "rl" / "history.json")
    vals = [r["val_mrr"] for r in rl_h or [] if r.get("val_mrr") is not None]
    done = (out / "rl" / "summary.json").exists()
    depth = 4 if spec.arm_epochs is not None else 3
    parts = [f"{'/'.join(out.parts[-depth:])}:"]
    if pre_h is not None:
        parts.append(f"pretraining {len(pre_h)} epochs,")
    parts.append(f"RL {len(rl_h or [])} epochs" + (" (finished)" if done else "") + ",")
    parts.append(f"best val MRR {max(vals):.4f}," if vals else "no validation yet,")
    parts.append(state)
    if done:
        return " ".join(parts)
    left = folder.left(spec)
    if left is not None:
        parts.append(f"| about {_duration(left)} of training left"
                     + (f", ends about {_clock(now, left)}" if state.startswith("running") else ""))
    elif folder.pretrains(spec):
        pre_left = remaining_seconds(pre_h or [], folder.pretrains(spec))
        if pre_left is not None:
            parts.append(f"| pretraining about {pre_left / 60:.0f} min left, RL not yet timed")
    return " ".join(parts)


def queue_lines(folder: Folder, alive: Sequence[tuple[Path, int]], queued: Sequence[tuple[str, str, int]],
                now: datetime.datetime) -> list[str]:
    """When the queued runs (``(dataset, spec, threads)`` in queue order) would start and end, after
    the ``alive`` runs (``(folder, threads)``) at their recent pace: :func:`forecast`."""
    if not queued:
        return []
    specs = [Spec.parse(ds, spec) for ds, spec, _ in queued]
    slots = forecast([(folder.left(Spec.of_folder(out)), t) for out, t in alive],
                     [(folder.expected(s), t) for s, (_, _, t) in zip(specs, queued)], folder.cores)
    lines = ["queue forecast (each run's time: the median of this folder's finished runs of its variant; "
             "the test and a lone run's faster pace not counted):"]
    for (ds, spec, _), slot in zip(queued, slots):
        if slot is None:
            lines.append(f"  {ds} {spec}: start not timed (it waits for runs not yet timed)")
            continue
        start, end = slot
        text = f"  {ds} {spec}: starts in {_duration(start)} (about {_clock(now, start)})"
        text += f", ends in {_duration(end)} (about {_clock(now, end)})" if end is not None else \
            f", its time not measured (no finished {Spec.parse(ds, spec).variant} run of {ds} here)"
        lines.append(text)
    ends = [slot[1] if slot is not None else None for slot in slots]
    if all(e is not None for e in ends):
        lines.append(f"  the queue ends in {_duration(max(ends))} of running (about {_clock(now, max(ends))} "
                     "if nothing stops it; a stop adds its length)")
    return lines
