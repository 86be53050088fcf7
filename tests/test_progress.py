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
