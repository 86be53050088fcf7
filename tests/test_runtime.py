"""raptor.common.runtime: module initialisation under concurrent runs."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import torch

from raptor.common.runtime import seeded_init


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


def _two_use_grad(cache_cleared_between_uses: bool) -> torch.Tensor:
    """The weight gradient of a layer used twice under ``raptor.common.runtime.autocast("bfloat16")``,
    optionally with another thread entering and leaving autocast between the two uses (which empties
    torch's process-wide autocast cache, as a parallel run's rollout does)."""
    import threading

    from raptor.common.runtime import autocast

    gen = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(64, 64, generator=gen))
        lin.bias.copy_(torch.randn(64, generator=gen))
    x = torch.randn(256, 64, generator=gen)
    with autocast("bfloat16"):
        h = torch.tanh(lin(x))
        if cache_cleared_between_uses:
            def other_run():
                with autocast("bfloat16"):
                    torch.ones(2, 2) @ torch.ones(2, 2)
            t = threading.Thread(target=other_run)
            t.start()
            t.join()
        y = lin(h)
    y.float().square().sum().backward()
    return lin.weight.grad


def test_bfloat16_gradients_do_not_depend_on_another_threads_autocast():
    """Runs trained as threads of one process (train.parallel_runs) must equal lone runs in
    bfloat16 too: with torch's default weight-cast cache, another thread leaving autocast between two
    uses of a weight changed how its gradient was summed (bfloat16 vs float32), and the runs' losses
    parted after a few batches."""
    assert torch.equal(_two_use_grad(False), _two_use_grad(True))


def test_configure_runtime_flushes_denormals():
    """Denormal float32 arithmetic is flushed to zero after configure_runtime (a 6x slowdown otherwise)."""
    import torch

    from raptor.common.runtime import configure_runtime

    n = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        tiny = torch.tensor([1e-39], dtype=torch.float32)
        assert (tiny * 1.5).item() != 0.0  # a denormal survives without flushing
        configure_runtime(n)
        assert (tiny * 1.5).item() == 0.0
    finally:
        torch.set_flush_denormal(False)
        torch.set_num_threads(n)


def test_configure_runtime_turns_deterministic_algorithms_on_and_off(monkeypatch):
    """train.deterministic on a CUDA device: PyTorch's deterministic kernels and cuBLAS's fixed workspace
    (set before cuBLAS starts); a later configuration without it turns them off again."""
    import os

    import torch

    from raptor.common.runtime import configure_runtime

    n = torch.get_num_threads()
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        configure_runtime(n, deterministic=True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()  # an op without a deterministic kernel warns
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        configure_runtime(n)
        assert not torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_flush_denormal(False)
        torch.set_num_threads(n)
