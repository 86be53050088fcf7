"""The epoch loop every training phase runs through: resume, checkpoints, history and hooks.

A phase (actor-critic RL in :mod:`raptor.agents.actor_critic.rl`, reachability pretraining in :mod:`raptor.agents.actor_critic.pretrain`)
says what one epoch does and what else it keeps; the loop owns what is the same for all of them::

    resume from out/checkpoint.pt (or the previous one, if the latest is unreadable)
    replay the resumed history to the hook, marked "replayed"
    for each remaining epoch, unless the phase says it is done (early stopping):
        row = phase.run_epoch(epoch)              # train one epoch: {metric: value}
        phase.after_epoch(epoch, row, last)       # validation, best model, snapshots (optional)
        checkpoint (atomic, the previous one kept), history files, hook, progress bar

A checkpoint holds the policy, the optimizer, the history, the run's ``meta`` and the phase's own
``state`` (e.g. the best validation MRR so far), so a resumed run continues exactly where an
uninterrupted one would be. Whether a run folder may be resumed at all (same params, inputs and
code) is decided before, by its fingerprint (:meth:`raptor.runs.rundir.RunDir.prepare`).

The epoch budget is not in the fingerprint: a run continues toward a larger budget from its
checkpoint. It never stands for a smaller one: a checkpoint past the budget now asked (its weights
after fewer epochs are not kept), or one that reached it while training toward another budget (that
epoch was not validated as the last), cannot continue (:func:`budget_mismatch`); the run folder is
then trained afresh. Every checkpoint records the budget it was trained toward (``n_epochs``).
"""

from __future__ import annotations

import csv
import io as _io
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

from raptor.runs import checkpoints
from raptor.common.io import RunMismatchError, atomic_write_json, atomic_write_text
from raptor.runs.rundir import RunDir, RunOptions

#: A phase's latest checkpoint in its run folder (the one before it: ``checkpoint.pt.prev``).
CHECKPOINT_FILE = RunDir.CHECKPOINT

#: ``(epoch, row)`` hook called after every epoch (and for every replayed epoch on resume).
EpochHook = Callable[[int, dict[str, Any]], None]


@dataclass
class Phase:
    """What a training phase adds to the loop."""

    #: Progress-bar label ("train", "pretrain").
    name: str
    #: ``format`` of its checkpoints and their name in errors (:mod:`raptor.runs.checkpoints`).
    checkpoint_format: str
    checkpoint_what: str
    #: Trains one epoch (0-based) and returns its history row (without ``epoch`` and ``seconds``).
    run_epoch: Callable[[int], dict[str, Any]]
    #: Writes ``history`` into the run folder.
    write_history: Callable[[Path, list[dict[str, Any]]], None]
    #: ``(epoch, row, last) -> bool``: after the epoch is trained, before it is checkpointed; may add
    #: to ``row``; True forces a checkpoint at this epoch.
    after_epoch: Optional[Callable[[int, dict[str, Any], bool], bool]] = None
    #: After the epoch's checkpoint (or its ``after_epoch``, where none is due): puts in place what must
    #: not be on disk before the checkpoint that accounts for it (the best model: a kill between the two
    #: would leave the best model of an epoch the resumed run trains again, perhaps otherwise).
    after_checkpoint: Optional[Callable[[], None]] = None
    #: The progress bar's postfix for a row.
    postfix: Callable[[dict[str, Any]], dict[str, Any]] = lambda row: {}
    #: Extra values kept in checkpoints and restored on resume (the phase reads and updates them).
    state: dict[str, Any] = field(default_factory=dict)
    #: True when the phase ends before ``n_epochs`` (early stopping); asked before every epoch, so a
    #: resumed run that had stopped trains nothing more. Reads ``state`` only.
    done: Optional[Callable[[], bool]] = None
    #: The phase's result depends on its epoch budget (the last epoch is validated, the final model
    #: is the last epoch's): a checkpoint that :func:`budget_mismatch` refuses is not continued.
    #: Pretraining's results are its snapshots after ``n`` epochs, equal for every budget >= n.
    budget_bound: bool = True


def budget_mismatch(ck: Optional[dict[str, Any]], n_epochs: int) -> Optional[str]:
    """Why the checkpoint ``ck`` cannot continue toward ``n_epochs`` epochs as an uninterrupted
    ``n_epochs``-epoch run would (``None``: it can, or there is none).

    * it trained more epochs than ``n_epochs``: its weights after ``n_epochs`` epochs are not kept;
    * it trained exactly ``n_epochs`` epochs toward another budget (an interrupted longer run): its
      last epoch was not validated as the last, unless it had stopped early there.
    Fewer epochs than ``n_epochs`` continue (a larger budget extends a run)."""
    if ck is None:
        return None
    trained, budget = int(ck["epoch"]) + 1, ck.get("n_epochs")
    history = ck.get("history") or []
    stopped = bool(history and history[-1].get("early_stop"))
    if trained > n_epochs:
        return (f"it trained {trained} epochs, more than the {n_epochs} now asked (its weights after "
                f"{n_epochs} epochs are not kept)")
    if trained == n_epochs and budget != n_epochs and not stopped:
        return (f"its {trained} epochs were trained toward {budget} epochs, not as a run of {n_epochs} "
                f"(the last epoch was not validated as the last)")
    return None


def checkpoint_progress(out: str | Path, fmt: str, what: str) -> tuple[int, bool]:
    """``(epochs the latest readable checkpoint of format ``fmt`` in ``out`` holds, whether its run had
    stopped early there)``: where a run continues (its history files may lag behind it, after a kill
    between the two). ``(0, False)`` where there is none, or none of this format can be read (a folder
    another agent wrote, a damaged file): such a run starts afresh."""
    try:
        ck = checkpoints.load_latest(Path(out) / CHECKPOINT_FILE, fmt, what)
    except checkpoints.CheckpointError:
        return 0, False
    if ck is None:
        return 0, False
    history = ck.get("history") or []
    return int(ck["epoch"]) + 1, bool(history and history[-1].get("early_stop"))


def checkpoint_budget_mismatch(out: Path, fmt: str, what: str, n_epochs: int) -> Optional[str]:
    """:func:`budget_mismatch` of the latest readable checkpoint of format ``fmt`` in ``out``."""
    return budget_mismatch(checkpoints.load_latest(out / CHECKPOINT_FILE, fmt, what), n_epochs)


def run_epochs(phase: Phase, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
               run: RunOptions) -> list[dict[str, Any]]:
    """Run ``phase`` up to ``run.epochs`` epochs (fewer if ``phase.done``); returns the whole history
    (resumed epochs included). ``run.meta``: what the checkpoints record (complete: nothing is added).

    With ``run.out_dir``: ``checkpoint.pt`` after every ``run.checkpoint_every``-th epoch, the last one and
    whenever ``after_epoch`` asks, and the history files after every epoch. With ``run.resume``, the
    latest readable checkpoint in ``out`` is continued (a checkpoint of another seed, or one that
    cannot continue toward ``n_epochs`` (:func:`budget_mismatch`) for a ``budget_bound`` phase, is
    refused: :meth:`raptor.runs.rundir.RunDir.prepare` empties such a folder first).
    """
    from raptor.common.progress import progress_bar

    history, start = resume(phase, policy, optimizer, run)
    # Counted by hand, not by iterating the bar: a bar in a log file (rate-limited) counts lazily, so
    # the postfix of epoch n was printed beside a count of epochs long past.
    bar = progress_bar(desc=phase.name, enabled=run.progress, initial=start, total=run.epochs)
    for epoch in range(start, run.epochs):
        if phase.done is not None and phase.done():
            break
        t0 = time.perf_counter()
        row: dict[str, Any] = {"epoch": epoch, **phase.run_epoch(epoch)}
        row["seconds"] = time.perf_counter() - t0
        mark_resumed(row, start)
        end_epoch(phase, run, row, history, lambda: (policy.state_dict(), optimizer.state_dict()))
        bar.update(1)
        bar.set_postfix(**phase.postfix(row))
    bar.close()
    return history


def resume(phase: Phase, policy: torch.nn.Module, optimizer: torch.optim.Optimizer,
           run: RunOptions) -> tuple[list[dict[str, Any]], int]:
    """``(history, first epoch to train)`` of ``run``: with ``run.resume`` and a readable checkpoint in
    ``run.out_dir``, its weights, optimizer state and ``phase.state`` are restored into ``policy``,
    ``optimizer`` and ``phase``, its history files are written again where they lag behind it
    (:func:`rewrite_history`) and its history is replayed to ``run.on_epoch_end`` (marked
    ``replayed``); else ``([], 0)``. Refuses a checkpoint of another seed or one that cannot continue
    toward ``run.epochs`` (:func:`budget_mismatch`, for a ``budget_bound`` phase)."""
    out = Path(run.out_dir) if run.out_dir is not None else None
    ckpt = out / CHECKPOINT_FILE if out is not None else None
    ck = checkpoints.load_latest(ckpt, phase.checkpoint_format, phase.checkpoint_what) \
        if run.resume and ckpt is not None else None
    if ck is None:
        return [], 0
    if ck["meta"].get("seed", run.seed) != run.seed:
        raise ValueError(f"{ckpt} was written with seed {ck['meta'].get('seed')}, not {run.seed}: "
                         "use another --out or the same seed")
    mismatch = budget_mismatch(ck, run.epochs) if phase.budget_bound else None
    if mismatch is not None:
        raise RunMismatchError(f"{ckpt}: cannot continue toward {run.epochs} epochs: {mismatch}; "
                               "use --fresh or another --out")
    policy.load_state_dict(ck["policy"])
    optimizer.load_state_dict(ck["optimizer"])
    history = ck["history"]
    phase.state.update({k: ck[k] for k in phase.state if k in ck})
    rewrite_history(phase, run, history)
    if run.on_epoch_end is not None:  # a resumed run reports its whole history (e.g. to a new MLflow
        for row in history:            # run), marked ``replayed``: those epochs were trained before
            run.on_epoch_end(row["epoch"], {**row, "replayed": True})
    return history, ck["epoch"] + 1


def mark_resumed(row: dict[str, Any], start: int) -> None:
    """Mark ``row`` ``resumed`` when it is the first epoch a process trained after continuing a run from
    its checkpoint (``start``: the epoch it continued at): a record says where a run was resumed."""
    if start > 0 and row["epoch"] == start:
        row["resumed"] = True


def phase_seconds(history: Sequence[dict[str, Any]]) -> float:
    """Seconds a phase took: its epochs' ``seconds`` plus their validation rounds' ``val_seconds``."""
    return sum(float(r.get("seconds") or 0) + float(r.get("val_seconds") or 0) for r in history)


def resumed_at(history: Sequence[dict[str, Any]]) -> list[int]:
    """The epochs at which a run was continued from a checkpoint by another process (:func:`mark_resumed`)."""
    return [row["epoch"] for row in history if row.get("resumed")]


def rewrite_history(phase: Phase, run: RunOptions, history: list[dict[str, Any]]) -> None:
    """The history files of a resumed run written again from its checkpoint's history where
    ``history.json`` (written last of them) holds other epochs: a kill between an epoch's checkpoint and
    its history files left them an epoch short, and a run resumed at its last epoch trains nothing that
    would write them again (rows past the checkpoint, to be trained again, go)."""
    if not history or run.out_dir is None:
        return
    written = RunDir(run.out_dir).history
    try:
        epochs = [row["epoch"] for row in json.loads(written.read_text())]
    except (OSError, ValueError, TypeError, KeyError):
        epochs = None
    if epochs != [row["epoch"] for row in history]:
        phase.write_history(Path(run.out_dir), history)


def end_epoch(phase: Phase, run: RunOptions, row: dict[str, Any], history: list[dict[str, Any]],
              states: Callable[[], tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """What follows the training of epoch ``row["epoch"]``: ``phase.after_epoch`` (validation),
    ``row`` appended to ``history``, the checkpoint when due (``states()``: the policy's and the
    optimizer's state dicts, asked only then), the history files and ``run.on_epoch_end``."""
    epoch = row["epoch"]
    last = epoch == run.epochs - 1
    forced = phase.after_epoch(epoch, row, last) if phase.after_epoch is not None else False
    history.append(row)
    if run.out_dir is not None:
        out = Path(run.out_dir)
        if last or forced or (epoch + 1) % run.checkpoint_every == 0:
            policy_state, optimizer_state = states()
            checkpoints.save(out / CHECKPOINT_FILE,
                             {"format": phase.checkpoint_format, "epoch": epoch, "n_epochs": run.epochs,
                              "policy": policy_state, "optimizer": optimizer_state, "history": history,
                              "meta": run.meta, **phase.state}, keep_previous=True)
        if phase.after_checkpoint is not None:
            phase.after_checkpoint()
        phase.write_history(out, history)
    if run.on_epoch_end is not None:
        run.on_epoch_end(epoch, row)


# ------------------------------------------------------------------------------------------------
# What every RL phase (actor-critic, TITer) adds: history files, validation, the best model
# ------------------------------------------------------------------------------------------------


#: The columns of ``validation.csv`` (:attr:`raptor.runs.rundir.RunDir.validation_csv`).
VALIDATION_FIELDS = ("epoch", "val_mrr", "val_seconds")


def write_history(out: Path, history: list[dict[str, Any]], fields: Sequence[str]) -> None:
    """``history.csv`` (``fields``, empty where missing), ``validation.csv`` (the validated epochs' rows
    only) and ``history.json`` (every key), each atomically; the JSON last, so that where it holds an
    epoch the tables hold it too (:func:`rewrite_history`)."""
    def table(columns: Sequence[str], rows: list[dict[str, Any]]) -> str:
        buf = _io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in rows:
            w.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
        return buf.getvalue()

    atomic_write_text(RunDir(out).history_csv, table(fields, history))
    validated = [row for row in history if row.get("val_mrr") is not None]
    atomic_write_text(RunDir(out).validation_csv, table([f for f in VALIDATION_FIELDS if f in fields], validated))
    atomic_write_json(RunDir(out).history, history)


@dataclass
class TrainResult:
    history: list[dict[str, Any]]
    best_mrr: Optional[float]
    best_epoch: Optional[int]
    out_dir: Optional[str] = None
    #: Ended before its epoch budget by early stopping (``eval.patience``).
    stopped_early: bool = False
    #: The most seeds its epochs were trained with at once, as one batched step (history rows'
    #: ``stacked_seeds``: :mod:`raptor.agents.actor_critic.seeds`); 1: alone.
    stacked_seeds: int = 1


def validation_due(epoch: int, every: int, early_every: int = 0, early_epochs: int = 0) -> bool:
    """Whether 0-based ``epoch`` ends with a validation round: every ``early_every``-th epoch while
    ``epoch + 1 <= early_epochs`` (when ``early_every > 0``), every ``every``-th after (counted from
    epoch 1, so the two schedules meet where ``early_epochs`` is a multiple of both)."""
    n = epoch + 1
    if early_every > 0 and n <= early_epochs:
        return n % early_every == 0
    return n % every == 0


class Selection:
    """Validation rounds, the best model and early stopping of an RL phase.

    After every ``valid_every``-th epoch (every ``early[0]``-th during the first ``early[1]`` epochs,
    :func:`validation_due`) and the last: ``evaluate_fn(policy)`` (validation MRR and
    more) into the row, the best-MRR weights to ``out/best.pt``; ``patience > 0`` ends the phase after
    that many rounds in a row without a better MRR. Its counters live in ``state`` (the phase's
    checkpointed state), so a resumed run selects as an uninterrupted one.

    A new best model is written to ``best.pt.next`` and renamed to ``best.pt`` by :meth:`commit` once
    the epoch's checkpoint is written (``Phase.after_checkpoint``): ``best.pt`` is always the model of
    the checkpointed ``state["best_epoch"]``. A ``best.pt.next`` found on start belongs to an epoch no
    checkpoint holds (a kill between the two), which the resumed run trains again: it is removed.
    """

    def __init__(self, policy: torch.nn.Module, evaluate_fn: Optional[Callable[[Any], dict[str, float]]],
                 valid_every: int, patience: int, out: Optional[Path], meta: dict[str, Any],
                 early: tuple[int, int] = (0, 0)) -> None:
        self.policy, self.evaluate_fn, self.out, self.meta = policy, evaluate_fn, out, meta
        self.valid_every, self.patience, self.early = valid_every, patience, early
        self.state: dict[str, Any] = {"best_mrr": None, "best_epoch": None, "rounds_since_best": 0}
        self.pending = RunDir(out).best.with_name(RunDir.BEST + ".next") if out is not None else None
        if self.pending is not None:
            self.pending.unlink(missing_ok=True)

    def done(self) -> bool:
        return self.patience > 0 and self.state["rounds_since_best"] >= self.patience

    def after_epoch(self, epoch: int, row: dict[str, Any], last: bool) -> bool:
        """Validate if due; True (checkpoint this epoch) when it did."""
        row["val_mrr"] = None
        if self.evaluate_fn is None or not (validation_due(epoch, self.valid_every, *self.early) or last):
            return False
        t1 = time.perf_counter()
        self.policy.eval()
        metrics = self.evaluate_fn(self.policy)
        row["val_seconds"] = time.perf_counter() - t1
        row["val_mrr"] = float(metrics["mrr"])
        row.update({f"val_{k}": v for k, v in metrics.items() if k != "mrr"})
        st = self.state
        if st["best_mrr"] is None or row["val_mrr"] > st["best_mrr"]:
            st.update(best_mrr=row["val_mrr"], best_epoch=epoch, rounds_since_best=0)
            if self.pending is not None:
                checkpoints.save_model(self.pending, self.policy, {**self.meta, "epoch": epoch, "val_mrr": row["val_mrr"]})
        else:
            st["rounds_since_best"] += 1
        if self.done():
            row["early_stop"] = True
        return True  # the best model or the early-stopping count moved: checkpoint it

    def commit(self) -> None:
        """The best model written at this epoch's validation, in place (after the epoch's checkpoint)."""
        if self.pending is not None and self.pending.exists():
            os.replace(self.pending, RunDir(self.out).best)

    def finish(self, history: list[dict[str, Any]], n_epochs: int) -> TrainResult:
        """``final.pt`` (and ``best.pt`` = final when nothing was validated); the result."""
        last_epoch = history[-1]["epoch"] if history else n_epochs - 1  # earlier after early stopping
        if self.out is not None:
            checkpoints.save_model(RunDir(self.out).final, self.policy, {**self.meta, "epoch": last_epoch})
            if self.state["best_epoch"] is None:  # no validation: the final weights are the selected ones
                checkpoints.save_model(RunDir(self.out).best, self.policy,
                                       {**self.meta, "epoch": last_epoch, "val_mrr": None})
        return TrainResult(history=history, best_mrr=self.state["best_mrr"], best_epoch=self.state["best_epoch"],
                           out_dir=str(self.out) if self.out is not None else None, stopped_early=self.done())


def rl_postfix(row: dict[str, Any]) -> dict[str, Any]:
    """The epoch bar's postfix of an RL phase (a :class:`Selection`'s rows carry ``val_mrr``)."""
    return {"reward": f"{row['reward']:.3f}", "mrr": row["val_mrr"] if row["val_mrr"] is not None else "-"}


def remaining_seconds(history: Sequence[dict[str, Any]], n_epochs: int, valid_every: int = 0,
                      early: tuple[int, int] = (0, 0), recent: int = 10) -> Optional[float]:
    """Seconds a phase still needs to reach ``n_epochs`` at its recent pace (an estimate for a
    status line, not a promise): the median training ``seconds`` of its last ``recent`` history rows
    (a median, so that a few epochs slowed by other work on the machine, or by a restart, do not move
    it) times the epochs left, plus one validation round (the last round's ``val_seconds``) for each
    epoch left that ends with one (:func:`validation_due` with ``valid_every`` and ``early``, and the
    last epoch; none when ``valid_every`` is 0, as in pretraining). ``0.0`` when the budget is
    reached; ``None`` for a phase with no epoch timed yet."""
    done = len(history)
    if done >= n_epochs:
        return 0.0
    times = [float(r["seconds"]) for r in history[-recent:] if r.get("seconds") is not None]
    if not times:
        return None
    left = n_epochs - done
    total = left * statistics.median(times)
    rounds = [float(r["val_seconds"]) for r in history if r.get("val_seconds") is not None]
    if valid_every > 0 and rounds:
        due = sum(1 for e in range(done, n_epochs) if e == n_epochs - 1 or validation_due(e, valid_every, *early))
        total += due * rounds[-1]
    return total
