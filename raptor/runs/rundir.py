"""A run folder: the names of its files, the fingerprint of the run it holds, and its preparation.

Every training run (a pretraining seed, a (variant, seed) RL run) and every evaluation writes to a
folder of its own; :class:`RunDir` is the one place that names the files in it (``best.pt``,
``history.json``, ... : never a literal elsewhere in the library, the tasks or the flows), says what
a run was computed from (:meth:`RunDir.fingerprint`, written to ``run_config.json``) and decides
whether a folder's checkpoints may be continued (:meth:`RunDir.prepare`).

A run resumes where it stopped only from a folder whose fingerprint (resolved params, the content of
its inputs, the code) equals its own; otherwise the folder is emptied and the run says why. A
finished result is never reused for inputs it was not computed from.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from raptor.config import Params, result_params
from raptor.common.io import RunMismatchError, atomic_write_json, read_json_object, sha256_file

log = logging.getLogger("raptor")


@dataclass(frozen=True)
class RunDir:
    """One run's folder (``RunDir(out).best`` is ``out/best.pt``); the class attributes are the file names."""

    path: Path

    #: The fingerprint of the run whose checkpoints are here (:meth:`fingerprint`); a record keeps it.
    CONFIG = "run_config.json"
    #: Per-epoch history rows (every key), and their table (the selected fields).
    HISTORY = "history.json"
    HISTORY_CSV = "history.csv"
    #: The validated epochs only (``epoch``, ``val_mrr``, ``val_seconds``): what a validation curve draws
    #: (in ``history.csv`` the other epochs' cells are empty, which plotting tools read as 0).
    VALIDATION_CSV = "validation.csv"
    #: A phase's latest checkpoint (the one before it: ``checkpoint.pt.prev``).
    CHECKPOINT = "checkpoint.pt"
    #: The model of the best validation MRR, and the last epoch's.
    BEST = "best.pt"
    FINAL = "final.pt"
    #: A finished run's summary (:func:`raptor.pipeline.experiment.run_variant`).
    SUMMARY = "summary.json"
    #: An evaluation's metrics and its ranked predictions (:func:`raptor.pipeline.experiment.evaluate_model`).
    METRICS = "metrics.json"
    PREDICTIONS = "predictions.parquet"
    #: A pretraining run's final weights, and its weights after ``{epochs}`` epochs (its snapshots).
    PRETRAINED = "pretrained.pt"
    SNAPSHOT = "pretrained-e{epochs}.pt"

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def history(self) -> Path:
        return self.path / self.HISTORY

    @property
    def history_csv(self) -> Path:
        return self.path / self.HISTORY_CSV

    @property
    def validation_csv(self) -> Path:
        return self.path / self.VALIDATION_CSV

    @property
    def checkpoint(self) -> Path:
        return self.path / self.CHECKPOINT

    @property
    def best(self) -> Path:
        return self.path / self.BEST

    @property
    def final(self) -> Path:
        return self.path / self.FINAL

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def predictions(self) -> Path:
        return self.path / self.PREDICTIONS

    @property
    def pretrained(self) -> Path:
        return self.path / self.PRETRAINED

    def finished_best(self) -> Path:
        """``best.pt`` of a run whose training finished: ``summary.json`` is written last and names the
        model it finished with (``model_sha256``). A killed run's ``best.pt`` (no summary), or one that a
        continued training rewrote and did not finish, is a mid-training snapshot that an evaluation must
        not take for the run's model. (A summary written before ``model_sha256`` names no model.)"""
        if not self.summary.is_file():
            state = "is not trained" if not self.best.exists() else "did not finish training (no summary.json)"
            raise FileNotFoundError(f"{self.path} {state}: train it to the end first (the finetune stage, or "
                                    "`raptor train` with the same params)")
        finished = read_json_object(self.summary, "train the run again").get("model_sha256")
        if finished is not None and (not self.best.is_file() or sha256_file(self.best) != finished):
            raise FileNotFoundError(f"{self.best} is not the model the run finished with (training went on and "
                                    "did not finish): train it to the end first")
        return self.best

    def snapshot(self, epochs: int) -> Path:
        """Where a pretraining run (:func:`raptor.agents.actor_critic.pretrain.pretrain_run`) keeps its weights after
        ``epochs`` epochs: what a pretrained variant's RL phase starts from."""
        return self.path / self.SNAPSHOT.format(epochs=int(epochs))

    def epochs_done(self) -> int:
        """Rows of the history written so far (0 without one)."""
        return len(json.loads(self.history.read_text())) if self.history.exists() else 0

    # -- the fingerprint ---------------------------------------------------------------------------

    @staticmethod
    def fingerprint(params: Params, kind: str, seed: int, inputs: dict[str, Optional[str]], code: str,
                    continued: Sequence[str] = (), ignored_sections: Sequence[str] = (),
                    **extra: Any) -> dict[str, Any]:
        """Everything that changes a run's results: every params field that can (the schema marks the
        others, :func:`raptor.config.result_params`) except ``continued`` (epoch counts: more epochs
        continue a run) and ``ignored_sections`` (those whose effect reaches the run through an input,
        e.g. pretraining through its weights), the content hashes of its ``inputs`` and the ``code``
        hash of the modules it runs."""
        flat = {k: v for k, v in result_params(params).items()
                if k not in continued and not any(k.startswith(s + ".") for s in ignored_sections)}
        return {"kind": kind, "seed": int(seed), "params": flat, "inputs": dict(inputs), "code": code, **extra}

    @staticmethod
    def rl_fingerprint(params: Params, variant: str, seed: int, inputs: dict[str, Optional[str]], code: str,
                       pretrain_epochs: int = 0, precision: Optional[str] = None) -> dict[str, Any]:
        """The fingerprint of one RL run: labels and pretraining reach it through ``init_model`` (an
        input), and it holds only the params its agent reads (actor-critic: model, rl; TITer: titer).
        ``precision``: the one its training resolved ``train.precision`` to (``auto`` is bfloat16 on one
        machine and float32 on another: a run does not change precision when it moves)."""
        from raptor.agents import variants

        return RunDir.fingerprint(params, "rl", seed, inputs, code, continued=("rl.epochs",),
                                  ignored_sections=("pretrain", "labeling") + variants.get(variant).unread_params,
                                  variant=variant, pretrain_epochs=int(pretrain_epochs), precision=precision)

    @staticmethod
    def differences(old: dict, new: dict, prefix: str = "") -> list[str]:
        """What differs between two fingerprints: ``key: old -> new`` (inputs and code by name only)."""
        out = []
        for key in sorted(set(old) | set(new)):
            a, b = old.get(key), new.get(key)
            name = f"{prefix}{key}"
            if isinstance(a, dict) and isinstance(b, dict):
                out += RunDir.differences(a, b, name + ".")
            elif a != b:
                out.append(name if prefix.startswith(("inputs", "code")) or name == "code"
                           else f"{name}: {a!r} -> {b!r}")
        return out

    # -- preparation -------------------------------------------------------------------------------

    def verdict(self, fingerprint: dict[str, Any], resume: bool = True,
                cannot_continue: Optional[Callable[[Path], Optional[str]]] = None) -> Optional[str]:
        """Why :meth:`prepare` would empty this folder for ``fingerprint``, or ``None`` when the folder
        is new (or missing) or would be continued. Reads the folder, writes nothing."""
        out = self.path
        if not out.is_dir():
            return None
        marker = self.config
        reason = None
        if marker.exists():
            try:
                old = json.loads(marker.read_text())
            except ValueError:
                old = {}
            if not resume:
                reason = "asked to start afresh"
            elif old != fingerprint:
                diff = self.differences(old, fingerprint)
                reason = "changed since its checkpoints were written: " + "; ".join(diff[:8]) + (
                    f" (+{len(diff) - 8} more)" if len(diff) > 8 else "")
        elif any(out.iterdir()):
            reason = f"holds files of an unknown run (no {self.CONFIG})" if resume else "asked to start afresh"
        if reason is None and cannot_continue is not None:
            reason = cannot_continue(out)
        return reason

    def prepare(self, fingerprint: dict[str, Any], resume: bool = True,
                cannot_continue: Optional[Callable[[Path], Optional[str]]] = None,
                resume_only: bool = False) -> Optional[str]:
        """Make the folder hold only checkpoints of this ``fingerprint``: a folder written by any other
        configuration (or any folder, without ``resume``, or one that ``cannot_continue(path)`` gives a
        reason against) is emptied. Returns why it was emptied (also logged; :meth:`verdict` says it
        beforehand), or ``None`` when the folder was new or is continued.

        ``resume_only``: never empty a folder that holds files; raise :class:`RunMismatchError` naming
        the reason instead, and leave the folder as it was (hours of a long run are not thrown away
        because the code or a param moved under it)."""
        out = self.path
        out.mkdir(parents=True, exist_ok=True)
        reason = self.verdict(fingerprint, resume, cannot_continue)
        if reason is not None and resume_only:
            raise RunMismatchError(f"{out}: refusing to start afresh (it holds a run that cannot be continued: "
                                   f"{reason}); move or delete the folder to start a new run there")
        if reason is not None:
            log.warning("%s: starting afresh, %s", out, reason)
            for child in out.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        atomic_write_json(self.config, fingerprint)
        return reason


@dataclass(frozen=True)
class RunOptions:
    """How one training run goes (everything besides the context, the policy and its params):
    what :meth:`Agent.train`, :func:`raptor.pipeline.experiment.run_variant`, :func:`raptor.agents.actor_critic.pretrain.pretrain`,
    :func:`raptor.agents.actor_critic.rl.train`, :func:`raptor.agents.titer.training.train_titer` and :func:`raptor.runs.loop.run_epochs` take.

    ``epochs``: the epoch budget (``None``: the params' own); ``evaluate_fn``: ``policy -> {"mrr": ...}``
    on the validation split (best model, early stopping); ``on_epoch_end``: ``(epoch, metrics)`` after
    every epoch; ``meta``: what the saved models record (the agent adds what rebuilds the policy);
    ``num_threads``: torch threads (``None``: ``train.num_threads``); ``resume_only``: refuse to empty a
    folder whose run cannot be continued (:meth:`raptor.runs.rundir.RunDir.prepare`); ``checkpoint_every``:
    a checkpoint after every that many epochs (and the last); ``env_backend``: where rollouts
    (and pretraining's walks and labels) build their candidates."""

    seed: int = 0
    epochs: Optional[int] = None
    out_dir: Optional[Path] = None
    device: Any = "cpu"
    precision: str = "float32"
    resume: bool = True
    progress: bool = True
    evaluate_fn: Optional[Callable[[Any], dict[str, float]]] = None
    on_epoch_end: Optional[Callable[[int, dict[str, Any]], None]] = None
    meta: Optional[dict[str, Any]] = None
    num_threads: Optional[int] = None
    resume_only: bool = False
    checkpoint_every: int = 1
    #: Where rollouts (and pretraining's walks and labels) build their candidates: ``auto`` (on the
    #: device for CUDA), ``numpy`` (host) or ``torch`` (:func:`raptor.mdp.device_env.on_device`).
    env_backend: str = "auto"
    #: ``auto``: the RL step replayed from a CUDA graph where it can be (``off``: never;
    #: :mod:`raptor.agents.actor_critic.graph_step`); ``graph_scan_pad``: its fixed scan's slack.
    cuda_graph: str = "auto"
    graph_scan_pad: int = 256
