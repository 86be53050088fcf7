"""raptor.common.resources: each measured block gets its own wall time and peak memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from raptor.common.resources import measure

MB = 1_000_000


_SCENARIO = """
import json, time
import numpy as np
from raptor.common.resources import measure
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
    # In a fresh process: one that already freed memory into a tuned allocator (raptor.common.runtime keeps
    # freed heap resident) would serve the 400 MB without any new resident page.
    out = subprocess.run([sys.executable, "-c", _SCENARIO], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    big, small, big_reset, small_reset, seconds, text = json.loads(out.stdout.strip().splitlines()[-1])
    assert big_reset and small_reset
    assert big > small + 350 * MB  # the second block does not inherit the first's peak
    assert seconds >= 0.01
    assert "GB" in text and "lifetime" not in text


def test_without_the_reset_the_lifetime_peak_is_reported_and_said(monkeypatch):
    import raptor.common.resources as resources

    monkeypatch.setattr(resources, "_reset_peak", lambda: False)
    with measure() as used:
        pass
    assert not used.peak_is_per_block
    assert used.peak_rss_bytes > 0
    assert "process lifetime" in used.describe()


_RELEASE = """
import json
import numpy as np
from raptor.common.runtime import tune_malloc
from raptor.common.resources import release_freed_memory

def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024

assert tune_malloc()
before = rss()
a = np.ones(300_000_000 // 8)  # below the tuned 1 GiB thresholds: heap, not mmap, and kept when freed
del a
kept = rss()
released = release_freed_memory()
after = rss()
print(json.dumps([before, kept, after, released]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_release_returns_heap_that_the_tuned_allocator_kept():
    # A fresh process: the tuned allocator keeps the freed 300 MB resident, the release gives it back
    # (what the pipeline does between stages, so a stage's peak is not an earlier stage's garbage).
    out = subprocess.run([sys.executable, "-c", _RELEASE], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    before, kept, after, released = json.loads(out.stdout.strip().splitlines()[-1])
    assert released
    assert kept > before + 250 * MB
    assert after < kept - 250 * MB
