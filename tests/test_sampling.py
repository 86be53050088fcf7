"""The action samplers (raptor/agents/sampling.py) against their naive reference: ``log_softmax``, the
entropy formula and inverse-CDF sampling in plain torch ops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raptor.agents.sampling import sample_actions, sample_step, sample_step_torch


def naive_step(z: torch.Tensor, mask: torch.Tensor, u: torch.Tensor):
    """The reference: a Python loop per row over the valid slots, float64."""
    choice, logp_c, ent = [], [], []
    for b in range(z.shape[0]):
        valid = [a for a in range(z.shape[1]) if mask[b, a]]
        zz = z[b, valid].double()
        logp = zz - torch.logsumexp(zz, 0)
        p = logp.exp()
        cum, pick = 0.0, valid[-1]
        for a, pa in zip(valid, p.tolist()):
            cum += pa
            if cum > u[b].item():
                pick = a
                break
        choice.append(pick)
        logp_c.append(float(logp[valid.index(pick)]))
        ent.append(float(-(p * logp).sum()))
    return torch.tensor(choice), torch.tensor(logp_c, dtype=torch.float64), torch.tensor(ent, dtype=torch.float64)


def test_sample_actions_respects_mask_and_allowed():
    torch.manual_seed(0)
    z = torch.tensor([[0.0, 1.0, float("-inf"), 2.0], [0.0, float("-inf"), float("-inf"), float("-inf")]])
    gen = torch.Generator().manual_seed(0)
    c = sample_actions(z.repeat(4000, 1), gen).reshape(4000, 2)
    assert torch.all(c[:, 1] == 0)
    counts = np.bincount(c[:, 0].numpy(), minlength=4)
    assert counts[2] == 0
    p = torch.softmax(z[0], 0).numpy()
    np.testing.assert_allclose(counts / counts.sum(), p, atol=0.04)
    allowed = torch.tensor([[True, False, False, False], [False, True, False, False]])
    for _ in range(50):
        c = sample_actions(z, gen, allowed)
        assert c[0] == 0 and c[1] == 0  # row 1: nothing allowed is valid -> falls back to valid


def test_fused_sample_step_matches_torch_reference():
    torch.manual_seed(0)
    z = torch.randn(64, 9, dtype=torch.float32) * 3
    mask = torch.rand(64, 9) < 0.6
    mask[:, 0] = True
    z = z.masked_fill(~mask, float("-inf")).requires_grad_(True)
    gl, ge = torch.randn(64), torch.randn(64)
    choice, logp_c, ent = sample_step(z, mask, torch.Generator().manual_seed(3))
    assert torch.all(mask[torch.arange(64), choice])
    (logp_c * gl + ent * ge).sum().backward()
    g1 = z.grad.clone()
    z.grad = None
    logp = torch.log_softmax(z, 1)
    ref_lp = logp.gather(1, choice[:, None]).squeeze(1)
    ref_ent = -(logp.exp() * logp.masked_fill(~mask, 0.0)).sum(1)
    torch.testing.assert_close(logp_c, ref_lp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref_ent.detach(), rtol=1e-5, atol=1e-5)
    (ref_lp * gl + ref_ent * ge).sum().backward()
    torch.testing.assert_close(g1, z.grad, rtol=1e-4, atol=1e-5)
    # sampling frequencies follow softmax(z)
    zz = torch.tensor([[0.0, 1.0, 2.0, float("-inf")]]).repeat(20000, 1)
    m = torch.isfinite(zz)
    c, _, _ = sample_step(zz, m, torch.Generator().manual_seed(1))
    freq = np.bincount(c.numpy(), minlength=4) / 20000
    np.testing.assert_allclose(freq, torch.softmax(zz[0], 0).numpy(), atol=0.015)


@pytest.mark.parametrize("holes", [False, True])
def test_fused_and_torch_sample_step_equal_the_naive_reference(holes):
    """Both paths (CPU kernel, GPU torch ops) pick the slot the per-row loop picks for the same
    uniforms, with its log-probability and entropy; masks with holes (env.mask_before_cap=false)
    included, where no masked slot may ever be chosen."""
    from raptor.agents.sampling import _SampleStep

    g = torch.Generator().manual_seed(7)
    B, A = 300, 12
    z = torch.randn(B, A, generator=g) * 2
    if holes:
        mask = torch.rand(B, A, generator=g) < 0.5
        mask[torch.arange(B), torch.randint(0, A, (B,), generator=g)] = True  # a valid slot per row
    else:  # the valid slots first, then padding
        mask = torch.arange(A)[None, :] < torch.randint(1, A + 1, (B, 1), generator=g)
    z = z.masked_fill(~mask, float("-inf"))
    u = torch.rand(B, generator=g, dtype=torch.float64)
    u[:3] = torch.tensor([0.0, 1.0 - 1e-12, 0.5])
    want = naive_step(z, mask, u)
    for got in (_SampleStep.apply(z, mask, u), sample_step_torch(z, mask, u)):
        assert torch.all(mask[torch.arange(B), got[0]])
        assert torch.equal(got[0], want[0])
        torch.testing.assert_close(got[1].double(), want[1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[2].double(), want[2], rtol=1e-5, atol=1e-5)
