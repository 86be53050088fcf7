"""raptor.runtime: module initialisation under concurrent runs."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from raptor.runtime import seeded_init


def _draw(seed: int) -> torch.Tensor:
    with seeded_init(seed):
        first = torch.rand(4)
        time.sleep(0.02)  # another thread would seed or draw here if it could
        return torch.cat([first, torch.rand(4)])


def test_seeded_init_is_atomic_across_threads():
    alone = {s: _draw(s) for s in range(4)}
    with ThreadPoolExecutor(4) as pool:
        together = dict(zip(range(4), pool.map(_draw, range(4))))
    for s in range(4):
        assert torch.equal(together[s], alone[s]), s
    assert not torch.equal(alone[0], alone[1])


def test_seeded_init_without_a_seed_only_holds_the_lock():
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    with seeded_init():
        pass
    assert torch.equal(torch.rand(2), expected)  # nothing reseeded, nothing drawn
