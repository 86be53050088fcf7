"""raptor.common.progress: live bars on a terminal; in a log file no nested bars, and rate-limited lines."""

from __future__ import annotations

import io

from raptor.common import progress


def test_in_a_log_file_nested_bars_are_off_and_top_level_bars_rate_limited(monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    nested = progress.progress_bar(range(3), nested=True, file=io.StringIO())
    assert nested.disable
    log = io.StringIO()
    top = progress.progress_bar(range(1000), desc="train", file=log, mininterval=1.0)
    assert not top.disable and top.mininterval >= progress.LOG_INTERVAL_S
    assert sum(1 for _ in top) == 1000
    top.close()
    text = log.getvalue()
    assert "\x1b[A" not in text and "1000/1000" in text
    # Plain lines (no carriage-return fragments): one at the start and one at the end, not one per item.
    assert "\r" not in text and len(text.splitlines()) <= 3, repr(text[:500])
    assert all(line == line.strip() and line for line in text.splitlines())


def test_on_a_terminal_every_bar_shows(monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    nested = progress.progress_bar(range(3), nested=True, file=io.StringIO(), mininterval=1.0)
    assert not nested.disable and nested.leave is False and nested.mininterval == 1.0


def test_disabled_bars_stay_disabled(monkeypatch):
    for terminal in (True, False):
        monkeypatch.setattr(progress, "on_terminal", lambda t=terminal: t)
        assert progress.progress_bar(range(3), enabled=False, file=io.StringIO()).disable


def test_in_a_log_file_an_epoch_line_counts_that_epoch(monkeypatch, capsys):
    """The epoch loop's bar: each epoch's postfix is printed beside its own count (the lazily counted
    bar printed `0/400` beside the second epoch's numbers)."""
    import torch

    from raptor.runs.loop import Phase, run_epochs
    from raptor.runs.rundir import RunOptions

    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    log = io.StringIO()
    real = progress.LineFile
    monkeypatch.setattr(progress, "LineFile", lambda f=None: real(log))
    model = torch.nn.Linear(1, 1)
    phase = Phase("train", "test-format", "test run", run_epoch=lambda e: {"loss": float(e)},
                  write_history=lambda out, h: None, postfix=lambda row: {"loss": row["loss"]})
    run_epochs(phase, model, torch.optim.SGD(model.parameters(), lr=0.1), RunOptions(epochs=3, resume=False))
    lines = [line for line in log.getvalue().splitlines() if "loss=" in line]
    assert [line.split("|")[2].split()[0] for line in lines][:3] == ["1/3", "2/3", "3/3"], lines
    assert ["loss=0" in lines[0], "loss=1" in lines[1], "loss=2" in lines[2]] == [True] * 3
