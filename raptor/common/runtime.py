"""Where and how a run computes: device, precision, threads, allocator, and per-epoch random seeds.

Shared by training (:mod:`raptor.agents.actor_critic.rl`, :mod:`raptor.agents.actor_critic.pretrain`) and beam search (:mod:`raptor.agents.beam`).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path
from typing import Optional

import numpy as np
import torch

# torch's default generator (which module initialisation draws from) is process-wide, and a stage
# trains `train.parallel_runs` seeds as threads of one process: without this lock two runs seed it
# and draw their initial weights interleaved, so a run's weights depend on the other's timing.
_INIT_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded_init(seed: Optional[int] = None):
    """Build modules inside ``with seeded_init(seed):``: the default generator is seeded with ``seed``
    and no other thread draws from it until the block ends. ``seed=None`` only holds the lock (for
    modules built to load weights into, whose draws must not consume another run's stream)."""
    with _INIT_LOCK:
        if seed is not None:
            torch.manual_seed(seed)
        yield




def autocast(precision: str, device: torch.device | str = "cpu"):
    """Autocast context for ``TrainConfig.precision`` (a no-op for float32)."""
    dev = torch.device(device).type
    if precision == "auto":
        precision = resolve_precision(precision, device)
    if precision == "bfloat16":
        # No weight-cast cache: torch keeps one cache for the whole process and empties it whenever
        # any thread leaves its outermost autocast region, so runs trained as threads of one process
        # (train.parallel_runs) lost cached casts at moments set by the other thread. A weight used
        # at several steps then got a varying number of cast nodes, and its gradient summed partly in
        # bfloat16 (one node) and partly in float32 (several): not bit-reproducible. Without the cache
        # every use has its own cast, each use's gradient is summed in float32, and threads agree.
        return torch.autocast(device_type=dev, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def native_bf16(device: torch.device | str = "cpu", cpu_flags: Optional[set[str]] = None) -> bool:
    """Whether ``device`` computes bfloat16 in hardware: a CUDA GPU that supports it, or a CPU with
    AVX512-BF16 or AMX-BF16 (``cpu_flags``: the flags of /proc/cpuinfo, read when not given). Elsewhere
    torch emulates it: on an AVX2 CPU an RL batch measured 13x the float32 CPU time
    (benchmarks/results/agent_bf16_avx2.json)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return bool({"avx512_bf16", "amx_bf16"} & (_cpu_flags() if cpu_flags is None else cpu_flags))


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def resolve_precision(name: str, device: torch.device | str = "cpu", cpu_flags: Optional[set[str]] = None) -> str:
    """``TrainConfig.precision`` -> the precision a run uses: ``auto`` is bfloat16 where the hardware has
    it (:func:`native_bf16`), else float32; an explicit ``bfloat16`` without it is kept, with a warning."""
    if name == "auto":
        return "bfloat16" if native_bf16(device, cpu_flags) else "float32"
    if name == "bfloat16" and not native_bf16(device, cpu_flags):
        import warnings

        warnings.warn(f"train.precision: bfloat16 on {torch.device(device).type} without native bfloat16 "
                      "(no AVX512-BF16/AMX) is emulated and much slower than float32; use float32 or auto",
                      RuntimeWarning, stacklevel=2)
    return name


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def set_threads(num_threads: int) -> None:
    """``TrainConfig.num_threads`` (0 = all cores)."""
    import os

    n = num_threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(n)


_MALLOC_TUNED = False


def tune_malloc() -> bool:
    """Keep freed memory in glibc's heap instead of returning it to the OS.

    Torch on CPU allocates its large temporaries (``[B, A]``, ``[E, d]`` gradients) with ``malloc``;
    above glibc's mmap threshold every allocation is a fresh ``mmap`` whose pages fault in on first
    touch, which made zero-filling a ``[7129, 128]`` gradient 14x slower than the fill itself. Raising
    the mmap and trim thresholds removes that cost (process-wide, idempotent; a no-op off glibc).
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        ok = bool(libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 1 << 30))
    except (OSError, AttributeError):
        ok = False
    _MALLOC_TUNED = ok
    return ok


def deterministic_algorithms(enabled: bool) -> None:
    """``train.deterministic`` on a CUDA device: ``torch.use_deterministic_algorithms`` (ops that have a
    deterministic kernel use it, e.g. scatter-adds sorted instead of atomic; ops without one warn) and
    cuBLAS's fixed workspace (``CUBLAS_WORKSPACE_CONFIG``, read when cuBLAS starts: the first product
    on the device). On one H200 the same RL batches trained twice gave different weights without it
    and equal weights with it, eager and replayed alike, the replayed epoch 1.4x slower
    (benchmarks/results/gpu_h200/2026-11-27/determinism.json). Process-wide; ``False`` turns it off."""
    import os

    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(enabled, warn_only=True)


def configure_runtime(num_threads: int = 0, deterministic: bool = False) -> None:
    """Threads, allocator and denormal settings for the CPU hot paths (training and beam search).

    Denormal floats are flushed to zero: float32 training on the CPU slowed from 33-38 s to 120-160 s
    per RL epoch (ICEWS14, one thread) once denormals appeared around epoch 10, and a model of that run
    trained 6x faster per batch with flushing on (455 vs 76 ms, docs/agent.md). Values under
    1.2e-38 change nothing a float32 model can resolve; bfloat16 GEMMs flush them anyway.
    ``deterministic``: :func:`deterministic_algorithms` (for a CUDA device; the CPU paths are
    deterministic without it, and it would fill every new CPU tensor with NaN first).
    """
    set_threads(num_threads)
    tune_malloc()
    torch.set_flush_denormal(True)  # False where the CPU cannot (non-x86): then nothing changes
    deterministic_algorithms(deterministic)


def epoch_seed(seed: int, epoch: int, stream: int) -> int:
    """The seed of random stream ``stream`` in epoch ``epoch`` of a run seeded ``seed``: a pure
    function of the three, so a resumed run draws exactly what an uninterrupted one would."""
    return int(np.random.SeedSequence([seed, epoch, stream]).generate_state(1, dtype=np.uint64)[0] >> 1)


def adam(parameters, lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """Adam with the single-kernel (fused) update where torch has it for the device, else foreach."""
    parameters = list(parameters)
    try:
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, foreach=True)
