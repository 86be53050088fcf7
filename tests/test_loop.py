"""The epoch loop's validation schedule (raptor/runs/loop.py), alone and inside actor-critic training."""

from __future__ import annotations

import pytest

from raptor.runs.rundir import RunOptions
import torch

from helpers import synthetic_env
from raptor.config import EvalConfig, ModelConfig, RLConfig
from raptor.runs.loop import remaining_seconds, validation_due
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import train

SMALL = ModelConfig(entity_dim=16, relation_dim=12, time_dim=5, step_dim=4, mlp_hidden_dim=24)


def test_validation_due_by_hand():
    # the paper's schedule: epochs 20, 40, ... (1-based), i.e. 0-based 19, 39, ...
    assert [e for e in range(60) if validation_due(e, 20)] == [19, 39, 59]
    # issue 39's sweep: every 5 during the first 40 RL epochs, every 20 after
    assert [e + 1 for e in range(100) if validation_due(e, 20, 5, 40)] == [5, 10, 15, 20, 25, 30, 35, 40, 60, 80, 100]
    # early_every 0 is off whatever early_epochs says
    assert [e for e in range(40) if validation_due(e, 20, 0, 40)] == [19, 39]
    # an early window that is not a multiple of `every`: after it, the plain schedule resumes
    assert [e + 1 for e in range(30) if validation_due(e, 10, 3, 7)] == [3, 6, 10, 20, 30]


@pytest.mark.parametrize("early, want", [((0, 0), [2, 5, 6]), ((1, 3), [0, 1, 2, 5, 6])])
def test_training_validates_on_the_schedule(tmp_path, early, want):
    """7 epochs, valid_every 3: epochs 3 and 6 (1-based) and the last; with (1, 3) also every epoch of the
    first three."""
    env, q, E, R = synthetic_env(max_actions=50)[:4]
    calls = []
    ev = EvalConfig(valid_every=3, beam_size=5, valid_every_early=early[0], valid_early_epochs=early[1])
    torch.manual_seed(0)
    res = train(Policy(E, R, SMALL, 3), env, q["train"][:256], RLConfig(epochs=7, batch_size=256), ev, RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: calls.append(1) or {"mrr": 0.1 * len(calls)}, progress=False, resume=False))
    assert [h["epoch"] for h in res.history if h["val_mrr"] is not None] == want
    assert len(calls) == len(want) and res.best_epoch == want[-1]


def test_history_files_hold_every_epoch_and_the_validated_ones(tmp_path):
    """history.csv has a row per epoch (empty cells where an epoch was not validated); validation.csv only
    the validated epochs, so a curve of validation MRR has no false zeros."""
    import csv

    from raptor.runs.loop import write_history
    from raptor.runs.rundir import RunDir

    history = [{"epoch": 0, "reward": 0.1}, {"epoch": 1, "reward": 0.2, "val_mrr": 0.3, "val_seconds": 2.0},
               {"epoch": 2, "reward": 0.25}, {"epoch": 3, "reward": 0.3, "val_mrr": 0.35, "val_seconds": 2.5}]
    write_history(tmp_path, history, ("epoch", "reward", "val_mrr", "val_seconds"))
    rows = list(csv.DictReader(open(RunDir(tmp_path).history_csv)))
    assert [r["val_mrr"] for r in rows] == ["", "0.3", "", "0.35"]
    valid = list(csv.DictReader(open(RunDir(tmp_path).validation_csv)))
    assert valid == [{"epoch": "1", "val_mrr": "0.3", "val_seconds": "2.0"},
                     {"epoch": "3", "val_mrr": "0.35", "val_seconds": "2.5"}]


def test_remaining_seconds_by_hand():
    """10 of 40 epochs done, the last ones at 20 s (an older, slower one outside the recent window, or
    inside it, where the median ignores it; two slow ones of three move it), one
    validation round of 30 s so far: 30 epochs x 20 s, plus the rounds after epochs 20, 30 and 40 (every
    10th, counted from 1) x 30 s; the early schedule adds its own rounds; pretraining has none."""
    history = [{"epoch": 0, "seconds": 99.0}] + [{"epoch": e, "seconds": 20.0} for e in range(1, 10)]
    history[9]["val_seconds"] = 30.0
    assert remaining_seconds(history, 40, 10, recent=9) == 30 * 20 + 3 * 30
    assert remaining_seconds(history, 40, 10, recent=10) == 30 * 20 + 3 * 30
    slowed = [{"epoch": 7, "seconds": 20.0}, {"epoch": 8, "seconds": 50.0}, {"epoch": 9, "seconds": 60.0}]
    assert remaining_seconds(slowed, 40, 0) == 37 * 50
    # every 5th epoch while epoch <= 20, every 10th after: rounds after epochs 15, 20, 30, 40
    assert remaining_seconds(history, 40, 10, early=(5, 20), recent=9) == 30 * 20 + 4 * 30
    # the last epoch is always validated, on the schedule or not: rounds after 20, 30 and 35
    assert remaining_seconds(history, 35, 10, recent=9) == 25 * 20 + 3 * 30
    assert remaining_seconds(history, 40, 0, recent=9) == 30 * 20  # no validation (pretraining)
    assert remaining_seconds(history, 10, 10) == 0.0  # the budget reached
    assert remaining_seconds([], 40, 10) is None  # nothing timed yet


def test_a_resume_rewrites_history_files_left_behind_their_checkpoint(tmp_path):
    """A kill between the last epoch's checkpoint and its history files left them an epoch short; the
    resumed run has nothing to train, so the files are written again from the checkpoint's history."""
    import json

    from raptor.runs.loop import write_history
    from raptor.runs.rundir import RunDir

    env, q, E, R = synthetic_env(max_actions=50)[:4]
    ev = EvalConfig(valid_every=1, beam_size=5)

    def run(resume: bool):
        torch.manual_seed(0)
        return train(Policy(E, R, SMALL, 3), env, q["train"][:256], RLConfig(epochs=3, batch_size=256), ev,
                     RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: {"mrr": 0.5}, progress=False,
                                resume=resume))

    full = run(False).history
    fields = ("epoch", "reward", "val_mrr", "val_seconds")
    write_history(tmp_path, full[:-1], fields)  # what the kill left: the checkpoint at epoch 2, the files at 1
    assert len(json.loads(RunDir(tmp_path).history.read_text())) == 2
    again = run(True).history
    assert again == full  # resumed at the end: nothing trained, the checkpoint's history returned
    assert json.loads(RunDir(tmp_path).history.read_text()) == json.loads(json.dumps(full))
    assert RunDir(tmp_path).validation_csv.read_text().splitlines()[-1].startswith("2,0.5,")


def test_checkpoint_progress_counts_the_checkpoint_and_sees_an_early_stop(tmp_path):
    from raptor.agents.actor_critic.rl import CHECKPOINT_FORMAT
    from raptor.runs.loop import checkpoint_progress

    env, q, E, R = synthetic_env(max_actions=50)[:4]
    scores = iter([0.5, 0.4, 0.3, 0.2])
    assert checkpoint_progress(tmp_path, CHECKPOINT_FORMAT, "RL checkpoint") == (0, False)
    torch.manual_seed(0)
    res = train(Policy(E, R, SMALL, 3), env, q["train"][:256], RLConfig(epochs=4, batch_size=256),
                EvalConfig(valid_every=1, beam_size=5, patience=1),
                RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: {"mrr": next(scores)}, progress=False))
    assert res.stopped_early and len(res.history) == 2
    assert checkpoint_progress(tmp_path, CHECKPOINT_FORMAT, "RL checkpoint") == (2, True)
    # another format (a folder another agent wrote): nothing this run can continue
    assert checkpoint_progress(tmp_path, "raptor.agents.titer.training-checkpoint/v1", "x") == (0, False)


def test_the_best_model_on_disk_is_always_the_checkpointed_best_epochs(tmp_path, monkeypatch):
    """Validation finds a new best before the epoch's checkpoint is written: a kill between the two must not
    leave that epoch's model as best.pt, since the resumed run trains the epoch again (on another machine or
    thread count, perhaps to a lower MRR) and would test a model its record does not name. The new best waits
    in best.pt.next until the checkpoint is written; a resumed run drops a stale one."""
    from raptor.agents.base import load_model
    from raptor.runs import checkpoints as ck
    from raptor.runs.rundir import RunDir

    env, q, E, R = synthetic_env(max_actions=50)[:4]
    ev = EvalConfig(valid_every=1, beam_size=5)

    def run(scores, resume):
        it = iter(scores)
        torch.manual_seed(0)
        return train(Policy(E, R, SMALL, 3), env, q["train"][:256], RLConfig(epochs=3, batch_size=256), ev,
                     RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: {"mrr": next(it)}, progress=False,
                                resume=resume))

    real_save = ck.save

    def killed_at_epoch_1(path, obj, keep_previous=False):
        if obj.get("epoch") == 1 and str(path).endswith("checkpoint.pt"):
            raise KeyboardInterrupt("killed before epoch 1's checkpoint")
        return real_save(path, obj, keep_previous)

    monkeypatch.setattr(ck, "save", killed_at_epoch_1)
    with pytest.raises(KeyboardInterrupt):
        run([0.3, 0.5, 0.1], resume=False)  # epoch 1 validates better than epoch 0, then the kill
    best = RunDir(tmp_path).best
    assert load_model(best)[1]["epoch"] == 0  # not the killed attempt's epoch 1
    assert best.with_name("best.pt.next").exists()
    monkeypatch.setattr(ck, "save", real_save)
    res = run([0.2, 0.1], resume=True)  # epoch 1 again, elsewhere: worse than epoch 0 this time
    assert res.best_epoch == 0 and load_model(best)[1]["epoch"] == 0
    assert not best.with_name("best.pt.next").exists()
    res = run([], resume=True)  # trained: nothing left, the best model as recorded
    assert load_model(best)[1]["epoch"] == res.best_epoch == 0
