"""raptor.resources: each measured block gets its own wall time and peak memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raptor.resources import measure

MB = 1_000_000


_SCENARIO = """
import json, time
import numpy as np
from raptor.resources import measure
with measure() as big:
    a = np.ones(400_000_000 // 8)  # touched: 400 MB resident
    a[::512] = 2.0
    time.sleep(0.01)
del a
with measure() as small:
    np.ones(10)
print(json.dumps([big.peak_rss_bytes, small.peak_rss_bytes, big.peak_is_per_block, small.peak_is_per_block,
                  big.seconds, big.describe()]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the per-block peak needs Linux's clear_refs")
def test_each_block_gets_its_own_peak():
    # In a fresh process: one that already freed memory into a tuned allocator (raptor.runtime keeps
    # freed heap resident) would serve the 400 MB without any new resident page.
    out = subprocess.run([sys.executable, "-c", _SCENARIO], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    big, small, big_reset, small_reset, seconds, text = json.loads(out.stdout.strip().splitlines()[-1])
    assert big_reset and small_reset
    assert big > small + 350 * MB  # the second block does not inherit the first's peak
    assert seconds >= 0.01
    assert "GB" in text and "lifetime" not in text


def test_without_the_reset_the_lifetime_peak_is_reported_and_said(monkeypatch):
    import raptor.resources as resources

    monkeypatch.setattr(resources, "_reset_peak", lambda: False)
    with measure() as used:
        pass
    assert not used.peak_is_per_block
    assert used.peak_rss_bytes > 0
    assert "process lifetime" in used.describe()
