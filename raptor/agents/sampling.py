"""How an action is drawn from the policy's logits over the candidates of a batch of states.

* :func:`sample_step`: the training rollout's sampler: ``(choice, log pi(choice), H(pi))`` of a
  row in one pass. On CPU one fused numba kernel with an analytic backward (:class:`_SampleStep`);
  elsewhere the same computation in torch ops. ``tests/test_sampling.py`` checks both against
  :func:`sample_actions` plus ``log_softmax`` and the entropy formula (the naive reference).
* :func:`sample_actions`: plain inverse-CDF sampling, optionally restricted to ``allowed`` slots
  (pretraining's label-guided exploration).
"""

from __future__ import annotations

from typing import Optional

import numba
import numpy as np
import torch


def sample_actions(logits: torch.Tensor, generator: Optional[torch.Generator] = None,
                   allowed: Optional[torch.Tensor] = None, u: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Sample one slot per row from ``softmax(logits)`` (restricted to ``allowed`` if given; a row
    with nothing allowed falls back to all valid slots). Returns int64 ``[B]``.

    ``u``: the rows' float32 uniforms ``[B]`` drawn beforehand (several seeds' rows stacked, each
    seed's drawn from its own generator: :class:`raptor.agents.actor_critic.seeds.SeedUniforms`); else
    drawn here from ``generator``, the same ``B`` values in the same order."""
    z = logits.detach().float()
    if allowed is not None:
        restricted = z.masked_fill(~allowed, float("-inf"))
        ok = torch.isfinite(restricted).any(dim=1, keepdim=True)
        z = torch.where(ok, restricted, z)
    # Inverse-CDF sampling: one uniform per row (torch.multinomial draws one per candidate).
    p = torch.softmax(z, dim=1)
    cdf = torch.cumsum(p, dim=1)
    if u is None:
        u = torch.rand(z.shape[0], generator=generator, device=z.device, dtype=cdf.dtype)
    choice = torch.searchsorted(cdf, u.to(cdf.dtype)[:, None] * cdf[:, -1:], right=True).squeeze(1)
    # Guard against rounding at the top end and zero-probability slots.
    last_valid = (p > 0).to(torch.int64).cumsum(1).argmax(1)
    choice = torch.minimum(choice, last_valid)
    return choice


@numba.njit(cache=True, nogil=True)
def _sample_fwd(z, mask, u, choice, logp_c, ent, p):  # pragma: no cover - compiled
    B, A = z.shape
    for b in range(B):
        m = -np.inf
        last = 0
        for a in range(A):
            if mask[b, a]:
                last = a
                if z[b, a] > m:
                    m = z[b, a]
        tot = 0.0
        for a in range(A):
            if mask[b, a]:
                e = np.exp(z[b, a] - m)
                p[b, a] = e
                tot += e
            else:
                p[b, a] = 0.0
        lse = m + np.log(tot)
        target = u[b] * tot
        cum = 0.0
        ch = -1
        h = 0.0
        for a in range(A):
            if mask[b, a]:
                cum += p[b, a]
                if ch < 0 and cum > target:
                    ch = a
                pa = p[b, a] / tot
                p[b, a] = pa
                h -= pa * (z[b, a] - lse)
        if ch < 0:
            ch = last
        choice[b] = ch
        logp_c[b] = z[b, ch] - lse
        ent[b] = h


@numba.njit(cache=True, nogil=True)
def _sample_bwd(gl, ge, z, mask, p, choice, logp_c, ent, dz):  # pragma: no cover - compiled
    B, A = z.shape
    for b in range(B):
        lse = z[b, choice[b]] - logp_c[b]
        h = ent[b]
        for a in range(A):
            if mask[b, a]:
                pa = p[b, a]
                dz[b, a] = -gl[b] * pa - ge[b] * pa * (z[b, a] - lse + h)
            else:
                dz[b, a] = 0.0
        dz[b, choice[b]] += gl[b]


class _SampleStep(torch.autograd.Function):
    """Sample ``a ~ softmax(z)`` over ``mask`` (inverse CDF with one uniform ``u`` per row) and return
    ``(choice, log pi(choice), H(pi))`` in one pass, with the analytic backward. Same distribution
    and values as ``log_softmax`` + :func:`sample_actions` + the entropy formula (tests check it)."""

    @staticmethod
    def forward(ctx, z, mask, u):
        z_ = z.detach().float().contiguous()
        B = z_.shape[0]
        choice = torch.empty(B, dtype=torch.int64)
        logp_c = torch.empty(B, dtype=torch.float32)
        ent = torch.empty(B, dtype=torch.float32)
        p = torch.empty_like(z_)
        _sample_fwd(z_.numpy(), mask.contiguous().numpy(), u.contiguous().numpy(), choice.numpy(), logp_c.numpy(),
                    ent.numpy(), p.numpy())
        ctx.save_for_backward(z_, mask, p, choice, logp_c, ent)
        ctx.mark_non_differentiable(choice)
        return choice, logp_c, ent

    @staticmethod
    def backward(ctx, _gc, gl, ge):
        z_, mask, p, choice, logp_c, ent = ctx.saved_tensors
        B = z_.shape[0]
        gl = torch.zeros(B) if gl is None else gl.float().contiguous()
        ge = torch.zeros(B) if ge is None else ge.float().contiguous()
        dz = torch.empty_like(z_)
        _sample_bwd(gl.numpy(), ge.numpy(), z_.numpy(), mask.numpy(), p.numpy(), choice.numpy(), logp_c.numpy(),
                    ent.numpy(), dz.numpy())
        return dz, None, None


def sample_step(z: torch.Tensor, mask: torch.Tensor, generator: Optional[torch.Generator] = None,
                u: Optional[torch.Tensor] = None):
    """``(choice [B], log pi(choice) [B], entropy [B])`` of one step over the ``mask``-ed slots of
    ``z [B, A]`` (CPU: one fused kernel; other devices: :func:`sample_step_torch`). ``u``: the step's
    float64 uniforms ``[B]`` drawn beforehand (a captured step cannot draw them); else drawn here."""
    if u is None:
        u = torch.rand(z.shape[0], generator=generator, device=z.device, dtype=torch.float64)
    if z.device.type == "cpu":
        return _SampleStep.apply(z, mask, u)
    return sample_step_torch(z, mask, u)


def sample_step_torch(z: torch.Tensor, mask: torch.Tensor, u: torch.Tensor):
    """:func:`sample_step` in torch ops, given the uniforms ``u [B]`` (float64): the GPU path."""
    logp = torch.log_softmax(z.float(), dim=1)
    p = logp.exp()
    cdf = torch.cumsum(p.double(), dim=1)
    choice = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    # rounding at the top end: the last valid slot (a mask may have holes: env.mask_before_cap=false)
    last_valid = mask.to(torch.int64).cumsum(1).argmax(1)
    choice = torch.minimum(choice, last_valid)
    ent = -(p * logp.masked_fill(~mask, 0.0)).sum(1)
    return choice, logp.gather(1, choice[:, None]).squeeze(1), ent
