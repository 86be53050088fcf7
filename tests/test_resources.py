"""raptor.resources: each measured block gets its own wall time and peak memory."""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest

from raptor.resources import measure

MB = 1_000_000


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the per-block peak needs Linux's clear_refs")
def test_each_block_gets_its_own_peak():
    with measure() as big:
        a = np.ones(400 * MB // 8)  # touched: 400 MB resident
        a[::512] = 2.0
        time.sleep(0.01)
    del a
    with measure() as small:
        np.ones(10)
    assert big.peak_is_per_block and small.peak_is_per_block
    assert big.peak_rss_bytes > small.peak_rss_bytes + 350 * MB  # the second block does not inherit the first's peak
    assert big.seconds >= 0.01
    assert "GB" in big.describe() and "lifetime" not in big.describe()


def test_without_the_reset_the_lifetime_peak_is_reported_and_said(monkeypatch):
    import raptor.resources as resources

    monkeypatch.setattr(resources, "_reset_peak", lambda: False)
    with measure() as used:
        pass
    assert not used.peak_is_per_block
    assert used.peak_rss_bytes > 0
    assert "process lifetime" in used.describe()
