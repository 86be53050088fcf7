"""The long runs' time estimates (raptor/runs/forecast.py): the queue's schedule by hand, expected times
from finished runs, and the status lines of a small long-runs folder."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

from raptor.runs.forecast import (Folder, Measured, Spec, expected_seconds, forecast, measured, queue_lines,
                                  run_line, seconds_left)

NOW = datetime.datetime(2026, 11, 27, 23, 0, tzinfo=datetime.timezone.utc)


def test_queued_runs_start_in_order_when_cores_free():
    # two cores; alive runs end at 100 and 50. The first queued run (30 s) takes the core freed at 50;
    # the second (40 s) the one freed at 80 (the first's end: the run ending at 100 still holds one);
    # the third needs both cores: free once the run ending at 100 and the second (120) are done.
    slots = forecast([(100.0, 1), (50.0, 1)], [(30.0, 1), (40.0, 1), (10.0, 2)], cores=2)
    assert slots == [(50.0, 80.0), (80.0, 120.0), (120.0, 130.0)]
    # threads 0 (or more than the cores) take every core; a run that fits starts at once
    assert forecast([(10.0, 0)], [(5.0, 1)], cores=2) == [(10.0, 15.0)]
    assert forecast([(10.0, 1)], [(5.0, 1), (1.0, 7)], cores=2) == [(0.0, 5.0), (10.0, 11.0)]
    assert forecast([], [], cores=2) == []


def test_no_queued_run_overtakes_and_unknown_times_propagate():
    # one core held for an unknown time: runs still start on the other; a run needing both never can,
    # and the run behind it waits for it (in order), though one core would do
    slots = forecast([(None, 1), (10.0, 1)], [(5.0, 1), (5.0, 1), (1.0, 2), (1.0, 1)], cores=2)
    assert slots == [(10.0, 15.0), (15.0, 20.0), None, None]
    # a queued run of unknown time starts (its start is known) and holds its core: the later ones share
    # the other core, and one needing both cannot be timed
    assert forecast([], [(None, 1), (3.0, 1), (2.0, 1), (1.0, 2)], cores=2) == [(0.0, None), (0.0, 3.0), (3.0, 5.0), None]


def test_expected_seconds_is_the_median_rl_time_plus_the_pretraining_per_epoch():
    runs = [Measured(100.0, 40.0, 4), Measured(300.0, 60.0, 4), Measured(200.0, 0.0, 0)]
    assert expected_seconds(runs, 0) == 200.0  # median of 100, 300, 200
    # pretraining: (40 + 60) s over 8 epochs = 12.5 s per epoch (the run that did not pretrain not counted)
    assert expected_seconds(runs, 10) == pytest.approx(200.0 + 125.0)
    assert expected_seconds([], 0) is None
    assert expected_seconds([Measured(100.0, 0.0, 0)], 5) is None  # nothing pretrained to time it by


@pytest.mark.parametrize("dataset, text, folder", [
    ("ICEWS14", "pure_rl:3", "runs/ICEWS14/pure_rl/seed3"),
    ("ICEWS18", "raptor:0:p50", "runs/ICEWS18/ablation/p50/seed0"),
    ("ICEWS14", "raptor:2:titer-defaults/model.embedding_init=normal",
     "runs/ICEWS14/sweeps/titer-defaults/model.embedding_init=normal/raptor/seed2"),
    ("ICEWS14", "pure_rl:0:s/p5", "runs/ICEWS14/sweeps/s/p5/pure_rl/seed0"),  # an arm named like the ablation's
])
def test_a_spec_names_its_folder_and_back(tmp_path, dataset, text, folder):
    spec = Spec.parse(dataset, text)
    assert spec.folder(tmp_path) == tmp_path / folder
    assert Spec.of_folder(tmp_path / folder) == spec


@pytest.mark.parametrize("text", ["pure_rl", "raptor:x", "raptor:0:10", "raptor:0:px", "a:1:p2:3", "a:1:s/", "a:1:/b",
                                  "a:1:s/b/c"])
def test_a_bad_spec_is_an_error_naming_it(text):
    with pytest.raises(ValueError, match=f"run spec '{text}'"):
        Spec.parse("ICEWS14", text)


def _history(n: int, seconds: float, val_every: int = 0, val_seconds: float = 0.0) -> list[dict]:
    rows = [{"epoch": e, "seconds": seconds} for e in range(n)]
    for e in range(n):
        if val_every and (e + 1) % val_every == 0:
            rows[e].update(val_mrr=0.3 + 0.001 * e, val_seconds=val_seconds)
    return rows


def _run(root: Path, rel: str, rl: list[dict], pre: list[dict] | None = None, finished: bool = False) -> Path:
    out = root / rel
    (out / "rl").mkdir(parents=True)
    (out / "rl" / "history.json").write_text(json.dumps(rl))
    if pre is not None:
        (out / "pretrain").mkdir()
        (out / "pretrain" / "history.json").write_text(json.dumps(pre))
    if finished:
        (out / "rl" / "summary.json").write_text("{}")
    return out


@pytest.fixture
def folder(tmp_path):
    """RL 10 epochs validated every 5 (validation 20 s), RL-RAPTOR pretrains 4; two cores. Finished:
    Pure-RL seeds 0 and 1 (10 x 10 s + 2 x 20 s = 140 s; 10 x 12 s + 40 s = 160 s) and RL-RAPTOR seed 0
    (4 x 30 s pretraining, 10 x 15 s + 40 s RL)."""
    root = tmp_path / "lr"
    _run(root, "runs/ICEWS14/pure_rl/seed0", _history(10, 10.0, 5, 20.0), finished=True)
    _run(root, "runs/ICEWS14/pure_rl/seed1", _history(10, 12.0, 5, 20.0), finished=True)
    _run(root, "runs/ICEWS14/raptor/seed0", _history(10, 15.0, 5, 20.0), _history(4, 30.0), finished=True)
    return Folder(root, (10, 5, (0, 0)), pretrain_epochs=4, cores=2)


def test_finished_runs_are_measured_and_started_ones_timed_at_their_pace(folder):
    assert measured(folder.root / "runs/ICEWS14/pure_rl/seed0") == Measured(140.0, 0.0, 0)
    assert measured(folder.root / "runs/ICEWS14/raptor/seed0") == Measured(190.0, 120.0, 4)
    assert folder.expected(Spec("ICEWS14", "pure_rl", 2)) == 150.0  # median of 140 and 160
    assert folder.expected(Spec("ICEWS14", "raptor", 0, 2)) == 190.0 + 2 * 30.0  # an arm: 2 epochs pretrained
    assert folder.expected(Spec("ICEWS14", "titer", 0)) is None  # no finished TITer-150 run
    # Pure-RL seed 2, 6 of 10 epochs at 20 s: 4 x 20 s + one validation round left (epoch 10, 20 s)
    out = _run(folder.root, "runs/ICEWS14/pure_rl/seed2", _history(6, 20.0, 5, 20.0))
    assert seconds_left(out, folder.schedule, 0) == 4 * 20.0 + 20.0
    # RL-RAPTOR seed 1, 3 of 4 pretraining epochs at 40 s and no RL yet: 40 s + the finished run's RL, 190 s
    _run(folder.root, "runs/ICEWS14/raptor/seed1", [], _history(3, 40.0))
    assert folder.left(Spec("ICEWS14", "raptor", 1)) == 40.0 + 190.0


def test_status_lines_say_the_time_left_and_when_queued_runs_start(folder):
    finished = run_line(folder, folder.root / "runs/ICEWS14/raptor/seed0", "stopped", NOW)
    assert finished == "ICEWS14/raptor/seed0: pretraining 4 epochs, RL 10 epochs (finished), best val MRR 0.3090, stopped"
    # tested: its test MRR from eval/metrics.json (unreadable metrics: "tested" alone, never an error)
    (folder.root / "runs/ICEWS14/raptor/seed0/eval").mkdir()
    metrics = folder.root / "runs/ICEWS14/raptor/seed0/eval/metrics.json"
    metrics.write_text(json.dumps({"mrr": 0.29004}))
    tested = run_line(folder, folder.root / "runs/ICEWS14/raptor/seed0", "tested", NOW)
    assert tested.endswith("best val MRR 0.3090, tested (test MRR 0.2900)"), tested
    metrics.write_text("{")
    assert run_line(folder, folder.root / "runs/ICEWS14/raptor/seed0", "tested", NOW).endswith("0.3090, tested")
    out = _run(folder.root, "runs/ICEWS14/pure_rl/seed2", _history(6, 20.0, 5, 20.0))
    line = run_line(folder, out, "running (pid 7)", NOW)
    assert line.endswith("running (pid 7) | about 0 h 01 min of training left, ends about 23:01 UTC"), line
    lines = queue_lines(folder, [(out, 1)], [("ICEWS14", "pure_rl:3", 1), ("ICEWS14", "raptor:1:p2", 1),
                                             ("ICEWS14", "titer:0", 1)], NOW)
    # one core free: pure_rl:3 (150 s) starts now; raptor:1:p2 (250 s) when pure_rl:2 ends (100 s)
    assert lines[1] == "  ICEWS14 pure_rl:3: starts in 0 h 00 min (about 23:00 UTC), ends in 0 h 02 min (about 23:02 UTC)"
    assert lines[2] == "  ICEWS14 raptor:1:p2: starts in 0 h 01 min (about 23:01 UTC), ends in 0 h 05 min (about 23:05 UTC)"
    # titer:0 is not measured: it starts when pure_rl:3 ends (150 s), its end unknown, so no end of the queue
    assert lines[3].startswith("  ICEWS14 titer:0: starts in 0 h 02 min") and "no finished or recorded run of its variant on ICEWS14" in lines[3]
    assert len(lines) == 4
    lines = queue_lines(folder, [], [("ICEWS14", "pure_rl:3", 0)] * 30, NOW)  # 30 x 150 s = 75 min: past midnight
    assert lines[-1] == "  the queue ends in 1 h 15 min of running (about Sat 00:15 UTC if nothing stops it; a stop adds its length)"


def test_a_phase_not_yet_timed_counts_what_the_finished_runs_took(folder):
    # RL-RAPTOR seed 2 just started: no pretraining epoch timed. Pretraining 4 x 30 s (the finished run's
    # pace) + RL 190 s
    _run(folder.root, "runs/ICEWS14/raptor/seed2", [], [])
    assert folder.left(Spec("ICEWS14", "raptor", 2)) == 4 * 30.0 + 190.0
    # with no finished run to time it by, no estimate
    out = _run(folder.root, "runs/ICEWS18/raptor/seed0", [], [])
    assert seconds_left(out, folder.schedule, 4) is None
    line = run_line(folder, out, "running (pid 9)", NOW)
    assert line == "ICEWS18/raptor/seed0: pretraining 0 epochs, RL 0 epochs, no validation yet, running (pid 9)"


def test_a_training_free_run_is_measured_by_its_summary(tmp_path):
    out = tmp_path / "runs/ICEWS14/recurrency/seed0"
    (out / "rl").mkdir(parents=True)
    (out / "rl" / "history.json").write_text("[]")
    (out / "rl" / "summary.json").write_text(json.dumps({"seconds": 54.0}))
    assert measured(out) == Measured(54.0, 0.0, 0)
    (out / "rl" / "summary.json").write_text("{not json")
    assert measured(out) is None


@pytest.mark.parametrize("equal_total", [False, True])
def test_the_rl_budget_is_the_pipelines(tmp_path, equal_total):
    """Folder.rl_epochs follows raptor.pipeline.experiment.effective_epochs for every iterating variant."""
    from raptor.agents import variants
    from raptor.config import params_from_dict
    from raptor.pipeline.experiment import effective_epochs

    params = params_from_dict({"rl": {"epochs": 30}, "pretrain": {"epochs": 7},
                               "train": {"equal_total_epochs": equal_total}})
    f = Folder(tmp_path, (30, 10, (0, 0)), pretrain_epochs=7, cores=2, equal_total_epochs=equal_total)
    for name in ("pure_rl", "raptor", "titer"):
        assert f.rl_epochs(Spec("ICEWS14", name, 0)) == effective_epochs(params, name, 7), name
    assert set(variants.VARIANTS) >= {"pure_rl", "raptor", "titer"}


def test_what_cannot_be_timed_is_said_not_raised(folder):
    # params unreadable: the line keeps its epochs and best MRR, without an estimate
    out = _run(folder.root, "runs/ICEWS14/pure_rl/seed2", _history(6, 20.0, 5, 20.0))
    assert run_line(None, out, "stopped", NOW) == "ICEWS14/pure_rl/seed2: RL 6 epochs, best val MRR 0.3040, stopped"
    # a folder moved aside keeps its line; its name says no seed, so no estimate, and why
    moved = _run(folder.root, "runs/ICEWS14/ablation/p10/seed9.old", _history(2, 20.0))
    line = run_line(folder, moved, "stopped", NOW)
    assert line.startswith("ICEWS14/ablation/p10/seed9.old: RL 2 epochs, no validation yet, stopped | no estimate (ValueError")
    # an unknown variant or a bad spec in the queue: no time, and the runs behind it no start
    lines = queue_lines(folder, [], [("ICEWS14", "nope:0", 0), ("ICEWS14", "bad", 1), ("ICEWS14", "pure_rl:4", 1)], NOW)
    assert lines[1] == "  ICEWS14 nope:0: starts in 0 h 00 min (about 23:00 UTC), its time not measured " \
                       "(no finished or recorded run of its variant on ICEWS14)"
    assert lines[2].endswith("start not timed (it waits for runs not yet timed)") and len(lines) == 4


def test_stopped_runs_are_counted_as_resume_restarts_them(folder):
    out = _run(folder.root, "runs/ICEWS14/pure_rl/seed2", _history(6, 20.0, 5, 20.0))  # 100 s left
    lines = queue_lines(folder, [(out, 0)], [("ICEWS14", "pure_rl:3", 1)], NOW, stopped=1)
    assert "the 1 stopped runs counted as running, as `resume` restarts them first" in lines[0]
    assert lines[1].startswith("  ICEWS14 pure_rl:3: starts in 0 h 01 min (about 23:01 UTC)")


def test_a_queued_run_that_is_also_a_stopped_or_running_one_is_timed_once(folder):
    """A run both in the queue and stopped (a queue made again after the run had started) trains once: `resume`
    restarts it, and the queue's line finds it alive and passes it by."""
    out = _run(folder.root, "runs/ICEWS14/pure_rl/seed2", _history(6, 20.0, 5, 20.0))  # 100 s left
    lines = queue_lines(folder, [(out, 1)], [("ICEWS14", "pure_rl:2", 1), ("ICEWS14", "pure_rl:3", 1)], NOW, stopped=1)
    assert [l for l in lines if "pure_rl:2" in l] == [], lines
    assert lines[1].startswith("  ICEWS14 pure_rl:3: starts in 0 h 00 min"), lines  # the second core is free
    assert queue_lines(folder, [(out, 1)], [("ICEWS14", "pure_rl:2", 1)], NOW) == []


def test_a_dataset_with_its_own_params_is_timed_by_them(folder):
    """`longrun.sh` gives a dataset its own params file (``--dataset DS --set ...``): its runs' RL budget
    and pretraining epochs are that file's; the other datasets keep the folder's."""
    from raptor.runs.forecast import DATASET_PARAMS

    (folder.root / DATASET_PARAMS.format(dataset="ICEWS18")).write_text(
        "rl: {epochs: 20}\npretrain: {epochs: 2}\neval: {valid_every: 10}\n")
    own = folder.of_dataset("ICEWS18")
    assert own.schedule[:2] == (20, 10) and own.pretrain_epochs == 2 and own.cores == folder.cores
    assert folder.of_dataset("ICEWS14") is folder
    # ICEWS18 Pure-RL seed 0, 10 of 20 epochs at 10 s, validated at 10 (5 s): 10 x 10 s + the round at 20
    # (under the folder's params: 10 epochs, so no time left)
    _run(folder.root, "runs/ICEWS18/pure_rl/seed0", _history(10, 10.0, 10, 5.0))
    assert folder.left(Spec("ICEWS18", "pure_rl", 0)) == 10 * 10.0 + 5.0
    # RL-RAPTOR on ICEWS18 pretrains the file's 2 epochs, not the folder's 4
    raptor = _run(folder.root, "runs/ICEWS18/raptor/seed0", [], _history(1, 30.0))
    line = run_line(folder, raptor, "running (pid 3)", NOW)
    assert line.endswith("| pretraining about 0 min left, RL not yet timed"), line  # 1 epoch x 30 s
    # a queued ICEWS18 RL-RAPTOR run: a finished one's RL time (10 x 10 s) + the file's 2 pretraining epochs
    # at its pace (30 s), not the folder's 4
    _run(folder.root, "runs/ICEWS18/raptor/seed1", _history(10, 10.0), _history(2, 30.0), finished=True)
    assert folder.expected(Spec("ICEWS18", "raptor", 2)) == 100.0 + 2 * 30.0


def test_a_sweep_arms_run_is_timed_by_its_arms_params(folder):
    """A sweep arm's run (``runs/DS/sweeps/NAME/ARM/VARIANT/seedS``) reads its budget from its arm's params
    file (:data:`ARM_PARAMS`) once written, its dataset's before; its time is measured by the finished runs
    of its variant, the sweep's arms' included."""
    from raptor.runs.forecast import ARM_PARAMS

    spec = Spec.parse("ICEWS14", "pure_rl:0:wd/fast")
    assert folder.of_run(spec) is folder  # no arm file yet: the dataset's (here the folder's) params
    arm = folder.root / ARM_PARAMS.format(dataset="ICEWS14", sweep="wd", arm="fast")
    arm.parent.mkdir(parents=True)
    arm.write_text("rl: {epochs: 4}\neval: {valid_every: 2}\n")
    assert folder.of_run(spec).schedule[:2] == (4, 2)
    out = _run(folder.root, "runs/ICEWS14/sweeps/wd/fast/pure_rl/seed0", _history(2, 10.0, 2, 5.0))
    assert folder.left(spec) == 2 * 10.0 + 5.0  # 2 of its 4 epochs left and one validation round
    line = run_line(folder, out, "stopped", NOW)
    assert line.startswith("ICEWS14/sweeps/wd/fast/pure_rl/seed0: RL 2 epochs,") and "0 h 00 min" in line, line
    queued = Spec.parse("ICEWS14", "pure_rl:3:wd/fast")
    assert folder.expected(queued) == 150.0  # no arm of the sweep finished: the variant's runs (140 and 160)
    _run(folder.root, "runs/ICEWS14/sweeps/wd/slow/pure_rl/seed1", _history(10, 100.0), finished=True)
    assert folder.expected(queued) == 1000.0  # the sweep's finished arms before the campaign's runs
    _run(folder.root, "runs/ICEWS14/sweeps/wd/fast/pure_rl/seed1", _history(4, 1.0), finished=True)
    assert folder.expected(queued) == 4.0  # its own arm's first


def test_a_variant_the_folder_has_not_finished_is_timed_by_its_sources_records_of_the_same_budget(folder):
    """No finished TITer-150 run in the folder: its time comes from the runs recorded in the pinned source's
    results/ (``raptor collect`` sets, dated or not) that trained the same RL budget; the folder's own finished
    runs, once there, come first."""
    from raptor.runs.forecast import RECORDS

    spec = Spec("ICEWS14", "titer", 3)
    assert folder.expected(spec) is None
    records = folder.root / RECORDS
    for rel, seconds, epochs in (("paper-ICEWS14/2026-11-27/ICEWS14/titer/seed0", 30.0, 10),
                                 ("paper-ICEWS14/2026-11-28/ICEWS14/titer/seed1", 50.0, 10),
                                 ("quick-ICEWS14/ICEWS14/titer/seed0", 1.0, 4),         # another budget
                                 ("paper-ICEWS18/2026-11-29/ICEWS18/titer/seed0", 1.0, 10)):  # another dataset
        out = _run(records, rel, _history(epochs, seconds, 5, 20.0))
        (out / "rl" / "summary.json").write_text(json.dumps({"rl_epochs": epochs}))
    assert folder.expected(spec) == (10 * 30.0 + 40.0 + 10 * 50.0 + 40.0) / 2  # the median of the two
    line = queue_lines(folder, [], [("ICEWS14", "titer:3", 1)], NOW)[1]
    assert line.endswith("ends in 0 h 07 min (about 23:07 UTC)"), line
    _run(folder.root, "runs/ICEWS14/titer/seed0", _history(10, 2.0, 5, 20.0), finished=True)
    assert folder.expected(spec) == 10 * 2.0 + 40.0


def test_records_collected_after_the_pin_time_what_the_source_has_not_recorded(folder, tmp_path):
    """The pinned source predates the records of its own campaign's runs (collected and committed later): the
    checkout's results/ (``longrun.sh status`` passes it) times them, after the source's; an ablation arm
    counts RL-RAPTOR's RL time plus its own pretraining epochs at their pace."""
    import dataclasses
    from raptor.runs.forecast import RECORDS

    spec = Spec("ICEWS18", "raptor", 0, 10)  # raptor:0:p10 on a dataset the folder has not run
    checkout = tmp_path / "checkout" / "results"
    out = _run(checkout, "paper-ICEWS18/2026-11-29/ICEWS18/raptor/seed0", _history(10, 50.0, 5, 20.0), _history(4, 8.0))
    (out / "rl" / "summary.json").write_text(json.dumps({"rl_epochs": 10}))
    assert folder.expected(spec) is None  # the source's records only
    with_checkout = dataclasses.replace(folder, records=(checkout,))
    assert with_checkout.expected(spec) == 10 * 50.0 + 40.0 + 10 * 8.0
    # through a dataset's own params file the extra records stay (of_dataset / of_run load it again)
    (folder.root / "params-ICEWS18.yaml").write_text("rl:\n  epochs: 10\neval:\n  valid_every: 5\n")
    assert with_checkout.of_dataset("ICEWS18").records == (checkout,)
    assert with_checkout.of_dataset("ICEWS18").expected(spec) == 10 * 50.0 + 40.0 + 10 * 8.0
    # the pinned source's records, where it has some, come first
    src = _run(folder.root / RECORDS, "p/ICEWS18/raptor/seed1", _history(10, 5.0, 5, 20.0), _history(4, 1.0))
    (src / "rl" / "summary.json").write_text(json.dumps({"rl_epochs": 10}))
    assert with_checkout.expected(spec) == 10 * 5.0 + 40.0 + 10 * 1.0


@pytest.mark.parametrize("rel, spec", [
    ("runs/ICEWS14/pure_rl/seed0", Spec("ICEWS14", "pure_rl", 0)),
    ("runs/ICEWS14/ablation/p10/seed1", Spec("ICEWS14", "raptor", 1, 10)),
    ("runs/ICEWS14/sweeps/wd/ablation/raptor/seed3", Spec("ICEWS14", "raptor", 3, sweep="wd", arm="ablation")),
    ("runs/ICEWS14/sweeps/seed-x/sweeps/pure_rl/seed2", Spec("ICEWS14", "pure_rl", 2, sweep="seed-x", arm="sweeps")),
])
@pytest.mark.parametrize("root", ["lr", "sweeps", "runs/ablation"])
def test_a_run_folder_is_read_from_its_place_under_runs_whatever_the_names_around(tmp_path, rel, spec, root):
    """The folder of long runs may be called `sweeps`, an arm `ablation`, a sweep `seed-x`: the layout is told
    by the run's place under the folder's runs/, not by the names near it."""
    base = tmp_path / root
    assert Spec.of_folder(base / rel, base) == spec
    assert spec.folder(base) == base / rel
    if root != "runs/ablation":  # without the folder, the nearest `runs` above: ambiguous only for that one
        assert Spec.of_folder(base / rel) == spec


def test_a_folders_cores_are_its_running_jobs_affinity(tmp_path):
    """A folder started under ``taskset -c 0`` trains on one core whatever the process asking has: the
    forecast counts the running jobs' CPU affinity (the largest), the asker's count when none can be read."""
    import os
    import subprocess

    from raptor.runs.forecast import job_cores

    assert job_cores([], 7) == 7
    assert job_cores([2 ** 22 + 12345], 7) == 7  # no such process
    assert job_cores([os.getpid()], 7) == len(os.sched_getaffinity(0))
    one = {min(os.sched_getaffinity(0))}  # as `taskset -c N` leaves a job (set before it runs)
    pinned = subprocess.Popen(["sleep", "30"], preexec_fn=lambda: os.sched_setaffinity(0, one))
    try:
        assert job_cores([pinned.pid], 7) == 1
        assert job_cores([pinned.pid, os.getpid()], 7) == len(os.sched_getaffinity(0))
    finally:
        pinned.kill()
        pinned.wait()


def test_started_cores_reads_the_folders_count_or_falls_back(tmp_path):
    """A stopped folder's cores: what its last start wrote, a positive count, else the asker's."""
    from raptor.runs.forecast import STARTED_CORES_FILE, started_cores

    assert started_cores(tmp_path, 7) == 7                       # no start wrote one
    for text, expected in (("1\n", 1), ("16", 16), ("0", 7), ("two", 7), ("", 7), ("-1", 7)):
        (tmp_path / STARTED_CORES_FILE).write_text(text)
        assert started_cores(tmp_path, 7) == expected, text
