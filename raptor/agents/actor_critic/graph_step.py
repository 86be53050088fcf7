"""The actor-critic RL step replayed from a CUDA graph (issue 37, item 2; ``train.cuda_graph``).

On a GPU one eager RL step is a few hundred small kernels, each waiting for its launch and for the
host between them: on one H200 an epoch of ICEWS14 at batch 512 took 6.3 s eager and 1.34 s replayed
from a graph, the same step (benchmarks/results/gpu_h200/2026-11-27/graph.json). What a graph can hold
is a step with fixed shapes that reads nothing back:

* the fixed-shape device environment (``DeviceEnv(scan_pad=...)``): candidates ``cap + 1`` wide, scans
  ``scan_pad`` edges longer than the cap; a row whose scan would need more is flagged;
* the sampling uniforms drawn before the step, from the same generators in the same calls as the
  eager rollout draws them (so the step samples what it would eagerly);
* the entropy coefficient as a device scalar (it changes between epochs or batches);
* the loss of ``groups`` seeds stacked in the rows (one seed: ``groups = 1``), its logged parts and
  the overflow flag as one tensor, read once after the replay.

The graph holds zeroing the gradients, the rollout, the loss and the backward; gradient clipping and
Adam run after it, outside. A step that cannot be captured (an op that synchronises, on some other
version of PyTorch) warns and runs uncaptured. A batch with a flagged row is redone exactly, uncaptured (the exact
device environment, the same uniforms); so is a batch of another size (an epoch's last). Each batch
therefore trains what the eager step trains, up to floating-point order (the fixed widths pad the
candidate tensors): ``tests/test_graph_step.py`` checks on the CPU, without capturing, that an epoch
through this step equals the eager epoch bit for bit, overflowing rows included.
"""

from __future__ import annotations

import warnings
from typing import Callable, Optional, Sequence

import numpy as np
import torch

from raptor.agents.rollout import rollout
from raptor.common.runtime import autocast
from raptor.mdp.device_env import DeviceEnv


def rl_forward(model: torch.nn.Module, loss_terms: Callable, precision: str, device) -> Callable:
    """:class:`GraphStep`'s ``forward`` for actor-critic RL: the rollout (under ``precision``'s autocast)
    and ``loss_terms(rollout, beta) -> (loss, parts [G, P] or [P])``."""
    def forward(env, queries, uniforms, beta):
        with autocast(precision, device):
            ro = rollout(model, env, queries, device=device, uniforms=uniforms)
        loss, parts = loss_terms(ro, beta)
        return loss, parts.reshape(parts.shape[0] if parts.dim() > 1 else 1, -1), ro.overflow
    return forward


def use_cuda_graph(mode: str, device, env) -> bool:
    """Whether ``train.cuda_graph = mode`` captures the step: ``auto`` on a CUDA device whose rollouts
    run in the device environment (``env`` a :class:`DeviceEnv`), ``off`` never."""
    if mode not in ("auto", "off"):
        raise ValueError(f"train.cuda_graph must be auto or off, got {mode!r}")
    return mode == "auto" and torch.device(device).type == "cuda" and isinstance(env, DeviceEnv)


class GraphStep:
    """Zero grads, forward and backward of a batch of ``rows`` queries (``G`` seeds' batches stacked,
    seed-major), over static buffers, captured as a CUDA graph on first use (``capture=True``) or run
    uncaptured (``capture=False``: the same computation, e.g. on the CPU).

    ``forward(env, queries, uniforms, beta) -> (loss, parts [G, P], overflow or None)`` is the
    phase's batch (RL: rollout and actor-critic loss; pretraining: the labeled walk and its BCE) with
    ``uniforms[k]`` the draws of step ``k``; ``exact`` is the environment a flagged or odd-sized batch
    is redone in; ``fixed`` the fixed-shape one the step runs in; ``uniform_dtype`` the dtype the
    phase's sampler draws (float64 RL, float32 pretraining)."""

    def __init__(self, model: torch.nn.Module, fixed: DeviceEnv, exact, rows: int, forward: Callable,
                 capture: bool, uniform_dtype: torch.dtype = torch.float64):
        if fixed.scan_pad is None:
            raise ValueError("GraphStep needs a fixed-shape environment (DeviceEnv(scan_pad=...))")
        self.model, self.fixed, self.exact = model, fixed, exact
        #: the shape of ``forward``'s parts (``[G, P]``), known after the first batch
        self.parts_shape: Optional[torch.Size] = None
        self.forward, self.capture, self.uniform_dtype = forward, capture, uniform_dtype
        self.device = fixed.device
        self.rows = rows
        self.queries = torch.zeros((rows, 4), dtype=torch.int64, device=self.device)
        # A batch reaches the device through pinned memory: a copy from pageable memory would wait for
        # everything queued before it (the last batch's optimizer step) and so add a host sync.
        self.staging = torch.zeros((rows, 4), dtype=torch.int64, pin_memory=self.device.type == "cuda")
        self.uniforms = torch.zeros((fixed.K, rows), dtype=uniform_dtype, device=self.device)
        self.beta = torch.zeros((), dtype=torch.float32, device=self.device)
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.out: Optional[torch.Tensor] = None
        #: batches redone exactly because a row overflowed the fixed scan (not counting odd-sized ones)
        self.redone = 0

    def _forward_backward(self, env, queries, uniforms, beta) -> torch.Tensor:
        """``[G P + 1]``: each seed's parts, then the overflow flag (0 or 1)."""
        for p in self.model.parameters():
            if p.grad is not None:
                p.grad.zero_()
        loss, parts, overflow = self.forward(env, queries, uniforms, beta)
        self.parts_shape = parts.shape
        loss.backward()
        flag = overflow if overflow is not None else torch.zeros((), dtype=torch.bool, device=self.device)
        return torch.cat([parts.double().reshape(-1), flag.double().reshape(1)])

    def _capture(self, warmup: int = 3) -> None:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # warm-up outside the graph (allocator, cuBLAS workspaces, gradients)
            for _ in range(warmup):
                self._forward_backward(self.fixed, self.queries, self.uniforms, self.beta)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._forward_backward(self.fixed, self.queries, self.uniforms, self.beta)

    def __call__(self, batch: np.ndarray, uniforms: Sequence[torch.Tensor], beta: float = 0.0) -> torch.Tensor:
        """Run the step for ``batch`` (int ``[n, 4]``, seed-major) with the per-step uniforms
        ``uniforms[k]`` (``[n]``, already drawn) and entropy coefficient ``beta`` (RL): the gradients
        are left in the parameters; returns each seed's parts ``[G, P]`` (float64, on the host).

        The batch's one wait for the device is the read of its parts and overflow flag together (one
        copy): the staging of the next batch and the optimizer step queue behind it without another."""
        u = torch.stack([uk.to(self.uniform_dtype) for uk in uniforms])
        if len(batch) != self.rows:  # an epoch's last, smaller batch: exactly, uncaptured
            out = self._forward_backward(self.exact, batch, u, beta).cpu()
            return out[:-1].reshape(self.parts_shape)
        # The staging buffer is free: the last copy out of it finished before the last batch's read.
        self.staging.numpy()[:] = batch
        self.queries.copy_(self.staging, non_blocking=True)
        self.uniforms.copy_(u)
        self.beta.fill_(beta)
        if self.capture and self.graph is None:
            try:
                self._capture()
            except RuntimeError as exc:  # an op that cannot be captured: train on, uncaptured
                self.capture, self.graph = False, None
                warnings.warn(f"train.cuda_graph: the training step could not be captured ({exc}); it runs "
                              "eagerly (the same training, slower)", RuntimeWarning, stacklevel=2)
        if self.graph is not None:
            self.graph.replay()
            out = self.out
        else:
            out = self._forward_backward(self.fixed, self.queries, self.uniforms, self.beta)
        # a copy on the CPU too: the next batch overwrites ``out`` (.cpu() of a CPU tensor is itself)
        host = out.clone() if out.device.type == "cpu" else out.cpu()
        if bool(host[-1]):  # a row's candidates were cut short: redo the batch exactly, same uniforms
            self.redone += 1
            host = self._forward_backward(self.exact, batch, u, beta).cpu()
        return host[:-1].reshape(self.parts_shape)


def graph_step(model: torch.nn.Module, env, host_env, rows: int, forward: Callable, run,
               uniform_dtype: torch.dtype = torch.float64):
    """The environment a training epoch steps through: ``env`` itself, or (``run.cuda_graph`` and
    :func:`use_cuda_graph`) a :class:`GraphStep` running ``forward`` over the fixed-shape twin of
    ``host_env`` (``run.graph_scan_pad``) that redoes flagged and odd-sized batches in ``env``."""
    if not use_cuda_graph(run.cuda_graph, run.device, env):
        return env
    fixed = DeviceEnv(host_env, run.device, scan_pad=run.graph_scan_pad)
    return GraphStep(model, fixed, env, rows, forward, capture=True, uniform_dtype=uniform_dtype)


def draw_uniforms(generators: Sequence[torch.Generator], rows_per_seed: int, K: int, device,
                  dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """The ``K`` steps' uniforms ``[S rows_per_seed]`` of a walk: per step, each seed's ``rows_per_seed``
    from its own generator, in the calls the eager step makes (:func:`raptor.agents.sampling.sample_step`,
    float64, one seed; :class:`raptor.agents.actor_critic.stack.SeedUniforms` stacked; pretraining's
    :func:`raptor.agents.sampling.sample_actions`, float32)."""
    return [torch.cat([torch.rand(rows_per_seed, generator=g, device=device, dtype=dtype)
                       for g in generators]) for _ in range(K)]
