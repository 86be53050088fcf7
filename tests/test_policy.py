"""Policy network: shapes, masking, LSTM cell, and the decomposed scorer against the literal one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from raptor.config import ModelConfig
from raptor.agents.policy import Policy, gather_dot, lookup
from raptor.agents.rollout import CandidateTensors

SMALL = ModelConfig(entity_dim=16, relation_dim=12, time_dim=5, step_dim=4, mlp_hidden_dim=24)
#: The LSTM narrower than the action embedding (model.lstm_hidden_dim): d_h = 10, d_a = 28.
NARROW_H = replace(SMALL, lstm_hidden_dim=10)
BOTH = pytest.mark.parametrize("cfg", [SMALL, NARROW_H], ids=["d_h=d_a", "d_h<d_a"])


def make_batch(rng, E, R, B=7, A=9, max_dt=30):
    ent = torch.from_numpy(rng.integers(0, E + 1, (B, A)))
    rel = torch.from_numpy(rng.integers(0, 2 * R + 2, (B, A)))
    dt = torch.from_numpy(rng.integers(0, max_dt, (B, A)))
    mask = torch.from_numpy(rng.random((B, A)) < 0.7)
    mask[:, 0] = True
    return ent, rel, dt, mask


def _assert_fused_equals_naive(pol, batch, dtype, tol):
    """The decomposed scorer against the literal one: values, ``-inf`` off the mask, and the gradients
    of ``s`` and of every parameter."""
    ent, rel, dt, mask = batch
    s = torch.randn(ent.shape[0], pol.d_action, dtype=dtype, requires_grad=True)
    w = torch.randn(ent.shape, dtype=dtype)

    def run(fn):
        pol.zero_grad(set_to_none=True)
        s.grad = None
        z = fn(s, ent, rel, dt, mask)
        (torch.where(mask, z, 0) * w).sum().backward()
        grads = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in pol.named_parameters()}
        return z.detach(), s.grad.clone(), grads

    z1, gs1, g1 = run(pol.candidate_logits)
    z2, gs2, g2 = run(pol.candidate_logits_naive)
    assert z1.dtype == dtype
    assert torch.isinf(z1[~mask]).all() and (z1[~mask] < 0).all()
    torch.testing.assert_close(z1[mask], z2[mask], rtol=tol, atol=tol)
    torch.testing.assert_close(gs1, gs2, rtol=tol, atol=tol)
    for n in g1:
        torch.testing.assert_close(g1[n], g2[n], rtol=tol, atol=tol, msg=n)
    assert g1["time_w"].abs().sum() > 0 and g1["entity_emb.weight"].abs().sum() > 0


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-4)])
def test_decomposed_logits_equal_naive_values_and_gradients(dtype, tol):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    E, R = 11, 3
    pol = Policy(E, R, SMALL, max_path_length=3).to(dtype)
    _assert_fused_equals_naive(pol, make_batch(rng, E, R), dtype, tol)


@pytest.mark.parametrize("parallel", [False, True], ids=["one-thread", "two-threads"])
def test_fused_scorer_with_a_long_time_table_and_split_over_threads(parallel, monkeypatch):
    """``dt`` up to 4,000 days (ICEWS05-15's range: a time table far longer than a state's candidates,
    which the kernel gathers from rather than multiplying it whole), and the kernels split over the two
    worker threads as with ``torch.get_num_threads() >= 2`` on a large batch: the same values and
    gradients as the literal scorer."""
    import raptor.agents.policy as policy_module

    monkeypatch.setattr(policy_module, "_parallel", lambda work: parallel)
    torch.manual_seed(2)
    rng = np.random.default_rng(2)
    E, R = 11, 3
    pol = Policy(E, R, SMALL, max_path_length=3).double()
    batch = make_batch(rng, E, R, B=9, A=6, max_dt=4000)
    assert int(batch[2].max()) > 3000
    _assert_fused_equals_naive(pol, batch, torch.float64, 1e-12)


def test_gather_dot_and_lookup_match_torch_including_non_leaf_tables():
    torch.manual_seed(1)
    table = torch.randn(13, 6, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 13, (5, 7))
    s = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    for make in (lambda: table, lambda: table * 2.0):  # leaf (direct accumulation) and non-leaf
        table.grad = None
        s.grad = None
        (gather_dot(s, make(), idx) ** 2).sum().backward()
        ga, gs = table.grad.clone(), s.grad.clone()
        table.grad = None
        s.grad = None
        ((nn.functional.embedding(idx, make()) * s[:, None, :]).sum(-1) ** 2).sum().backward()
        torch.testing.assert_close(ga, table.grad)
        torch.testing.assert_close(gs, s.grad)
        table.grad = None
        (lookup(make(), idx) ** 3).sum().backward()
        gl = table.grad.clone()
        table.grad = None
        (nn.functional.embedding(idx, make()) ** 3).sum().backward()
        torch.testing.assert_close(gl, table.grad)


@BOTH
def test_lstm_cell_matches_torch_lstmcell(cfg):
    torch.manual_seed(2)
    pol = Policy(5, 2, cfg).double()
    da, dh = pol.d_action, pol.d_path
    assert dh == (cfg.lstm_hidden_dim or da)
    ref = nn.LSTMCell(da, dh).double()
    with torch.no_grad():
        ref.weight_ih.copy_(pol.lstm_weight_ih)
        ref.weight_hh.copy_(pol.lstm_weight_hh)
        ref.bias_ih.copy_(pol.lstm_bias)
        ref.bias_hh.zero_()
    x = torch.randn(4, da, dtype=torch.float64)
    h, c = (torch.randn(4, dh, dtype=torch.float64) for _ in range(2))
    h1, c1 = pol.lstm_cell(x, (h, c))
    h2, c2 = ref(x, (h, c))
    torch.testing.assert_close(h1, h2)
    torch.testing.assert_close(c1, c2)


@pytest.mark.parametrize("precision, tol", [("float32", 1e-6), ("bfloat16", 2e-2)])
@pytest.mark.parametrize("shared", [True, False])
@BOTH
def test_lstm_cell_without_autograd_equals_the_autograd_path(precision, tol, shared, cfg):
    """Beam search's LSTM step (fused bias, one sigmoid over the four gates) is the same function."""
    from raptor.common.runtime import autocast

    torch.manual_seed(3)
    pol = Policy(5, 2, cfg)
    pol.INFERENCE_BLOCK_ROWS = 128  # three blocks, the last one partial
    da, dh = pol.d_action, pol.d_path
    x = torch.randn(300, da)
    if shared:
        h0, c0 = pol.initial_path_state(300)
    else:
        h0, c0 = torch.randn(300, dh), torch.randn(300, dh)
    with autocast(precision):
        h1, c1 = pol.lstm_cell(x, (h0, c0))  # autograd path (the parameters require grad)
        with torch.inference_mode():
            h2, c2 = pol.lstm_cell(x, (h0, c0))
    assert h1.requires_grad and not h2.requires_grad
    assert h2.dtype == c2.dtype == torch.float32 and h2.shape == c2.shape == (300, dh)
    torch.testing.assert_close(h2, h1.detach(), atol=tol, rtol=tol)
    torch.testing.assert_close(c2, c1.detach(), atol=tol, rtol=tol)


@pytest.mark.parametrize("precision, tol", [("float32", 1e-5), ("bfloat16", 2e-2)])
@BOTH
def test_advance_path_from_tables_equals_the_action_embedding_path(precision, tol, cfg):
    """Beam search feeds the LSTM ``W_ih a`` as a sum of table rows (entity, relation, time difference)."""
    from raptor.common.runtime import autocast

    torch.manual_seed(4)
    E, R, B = 11, 3, 300
    pol = Policy(E, R, cfg)
    pol.INFERENCE_BLOCK_ROWS = 128
    e, r = torch.randint(0, E + 1, (B,)), torch.randint(0, 2 * R + 2, (B,))  # padding and STOP rows included
    dt = torch.randint(0, 40, (B,))
    hc = (torch.randn(B, pol.d_path), torch.randn(B, pol.d_path))
    with autocast(precision):
        h1, c1 = pol.advance_path(hc, e, r, dt)
        with torch.inference_mode():
            tables = pol.path_input_tables(int(dt.max()))
            h2, c2 = pol.advance_path(hc, e, r, dt, tables=tables)
            h3, c3 = pol.advance_path(pol.initial_path_state(B), e, r, dt, tables=tables)
        h4, c4 = pol.advance_path(pol.initial_path_state(B), e, r, dt)
    assert tables["time"].shape == (int(dt.max()) + 1, 4 * pol.d_path)
    for got, want in ((h2, h1), (c2, c1), (h3, h4), (c3, c4)):
        torch.testing.assert_close(got, want.detach(), atol=tol, rtol=tol)


@pytest.mark.parametrize("shared", [True, False])
@BOTH
def test_table_gates_kernel_is_bit_identical_to_torch_gathers(shared, cfg):
    """The compiled one-pass sum of table rows gives the same bits as torch's gathers and adds (the
    path a GPU takes), so beam search's float32 results did not move with it."""
    torch.manual_seed(5)
    E, R, B = 13, 4, 700
    pol = Policy(E, R, cfg)
    pol.INFERENCE_BLOCK_ROWS = 256
    e, r, dt = torch.randint(0, E + 1, (B,)), torch.randint(0, 2 * R + 2, (B,)), torch.randint(0, 30, (B,))
    hc = pol.initial_path_state(B) if shared else (torch.randn(B, pol.d_path), torch.randn(B, pol.d_path))
    with torch.inference_mode():
        tables = pol.path_input_tables(29)
        fast = pol.advance_path(hc, e, r, dt, tables=tables)
        # float64 tables take the torch path; rounded back to float32 they hold the same values
        slow_tables = {k: v.double() for k, v in tables.items()}
        slow = pol.advance_path(hc, e, r, dt, tables=slow_tables)
        gates = tables["entity"][e] + tables["relation"][r] + tables["time"][dt]
        from raptor.agents.policy import _sum_table_rows
        out = torch.empty_like(gates)
        bias = torch.randn(gates.shape[1])
        _sum_table_rows(*(t.numpy() for t in tables.values()), e.numpy(), r.numpy(), dt.numpy(), bias.numpy(),
                        out.numpy())
    assert torch.equal(out, gates + bias)
    for a, b in zip(fast, slow):
        torch.testing.assert_close(a, b.float(), atol=1e-6, rtol=1e-6)


def test_shapes_masking_and_softmax():
    torch.manual_seed(3)
    rng = np.random.default_rng(3)
    E, R, K = 9, 2, 3
    pol = Policy(E, R, SMALL, max_path_length=K)
    ent, rel, dt, mask = make_batch(rng, E, R, B=6, A=8)
    qe = torch.from_numpy(rng.integers(0, E, 6))
    qr = torch.from_numpy(rng.integers(0, 2 * R, 6))
    h, c = pol.initial_path_state(6)
    assert h.shape == (6, pol.d_action) and torch.equal(h[0], h[5])  # h_0 shared by all queries
    for k in range(K):
        z, v = pol(qe, qr, h, k, CandidateTensors(ent, rel, dt, mask))
        assert z.shape == (6, 8) and v.shape == (6,)
        p = torch.softmax(z, 1)
        assert torch.all(p[~mask] == 0)
        torch.testing.assert_close(p.sum(1), torch.ones(6))
        h, c = pol.advance_path((h, c), ent[:, 0], rel[:, 0], dt[:, 0])
    u = pol.state_input(pol.query_embedding(qe, qr), h, 1)
    assert u.shape == (6, SMALL.entity_dim + SMALL.relation_dim + pol.d_action + SMALL.step_dim)
    # query relation embedding uses dt = 0: r(r_q, 0) = [Emb_R(r_q); cos(b)]
    q = pol.query_embedding(qe, qr)
    torch.testing.assert_close(q[:, -SMALL.time_dim:], torch.cos(pol.time_b).expand(6, -1))


def test_bfloat16_autocast_logits_close_to_float32():
    torch.manual_seed(4)
    rng = np.random.default_rng(4)
    pol = Policy(40, 5, ModelConfig(), max_path_length=3)
    ent, rel, dt, mask = make_batch(rng, 40, 5, B=32, A=20)
    qe = torch.from_numpy(rng.integers(0, 40, 32))
    qr = torch.from_numpy(rng.integers(0, 10, 32))
    h, _ = pol.initial_path_state(32)
    z32, v32 = pol(qe, qr, h, 0, CandidateTensors(ent, rel, dt, mask))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        z16, v16 = pol(qe, qr, h, 0, CandidateTensors(ent, rel, dt, mask))
    assert z16.dtype == torch.float32
    p32, p16 = torch.softmax(z32, 1), torch.softmax(z16, 1)
    assert (p32 - p16).abs().max() < 0.02
    # the fast heads under autocast agree with the float32 reference too
    pre = pol.precompute_query(pol.query_embedding(qe, qr))
    s32, _ = pol.heads(pre, h, 0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        pre16 = pol.precompute_query(pol.query_embedding(qe, qr))
        s16, v16b = pol.heads(pre16, h, 0)
        zf = pol.candidate_logits(s16, ent, rel, dt, mask)
    torch.testing.assert_close(s32, pol.actor(pol.state_input(pol.query_embedding(qe, qr), h, 0)))
    assert (torch.softmax(zf, 1) - p32).abs().max() < 0.02
    assert (v16b.float() - v32).abs().max() < 0.05


@BOTH
def test_fast_heads_equal_mlp_on_u_and_shared_h_lstm_path(cfg):
    torch.manual_seed(5)
    rng = np.random.default_rng(5)
    E, R = 9, 2
    pol = Policy(E, R, cfg, max_path_length=3).double()
    qe = torch.from_numpy(rng.integers(0, E, 6))
    qr = torch.from_numpy(rng.integers(0, 2 * R, 6))
    q = pol.query_embedding(qe, qr)
    pre = pol.precompute_query(q)
    h = torch.randn(6, pol.d_path, dtype=torch.float64)
    for k in range(3):
        s, v = pol.heads(pre, h, k)
        u = pol.state_input(q, h, k)
        assert u.shape == (6, pol.d_state_input) and s.shape == (6, pol.d_action)
        torch.testing.assert_close(s, pol.actor(u))
        torch.testing.assert_close(v, pol.critic(u))
    # h_0 shared by all rows (expanded) takes the one-row path for W_hh h + b
    h0, c0 = pol.initial_path_state(6)
    assert h0.stride(0) == 0
    x = torch.randn(6, pol.d_action, dtype=torch.float64)
    h1, c1 = pol.lstm_cell(x, (h0, c0))
    h2, c2 = pol.lstm_cell(x, (h0.contiguous(), c0.contiguous()))
    torch.testing.assert_close(h1, h2)
    torch.testing.assert_close(c1, c2)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("detach", [True, False])
def test_critic_loss_trains_only_the_critic_mlp(fast, detach):
    """The critic reads a detached state input: its loss reaches no parameter outside ``critic_mlp``
    (embeddings, time encoding, LSTM, step embeddings and the actor stay untouched). With
    ``critic_detach: false`` it also trains what ``u`` is made of, but never the actor's MLP."""
    torch.manual_seed(3)
    E, R, B = 9, 3, 6
    pol = Policy(E, R, replace(SMALL, critic_detach=detach), max_path_length=3)
    qe, qr = torch.randint(0, E, (B,)), torch.randint(0, R, (B,))
    hc = pol.initial_path_state(B)
    hc = pol.advance_path(hc, torch.randint(0, E, (B,)), torch.randint(0, R, (B,)), torch.randint(0, 5, (B,)))
    query = pol.query_embedding(qe, qr)
    for step in range(pol.max_path_length):
        pol.zero_grad(set_to_none=True)
        if fast:
            _, v = pol.heads(pol.precompute_query(query), hc[0], step)
        else:
            v = pol.critic(pol._critic_input(pol.state_input(query, hc[0], step)))
        (v ** 2).sum().backward(retain_graph=True)
        touched = {n for n, p in pol.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}
        assert touched, "the critic loss reached no parameter at all"
        if detach:
            assert all(n.startswith("critic_mlp.") for n in touched), sorted(touched)
        else:
            assert not any(n.startswith("actor_mlp.") for n in touched), sorted(touched)
            encoder = {"entity_emb.weight", "relation_emb.weight", "step_emb.weight", "lstm_weight_ih", "a_init"}
            assert encoder <= touched, sorted(encoder - touched)


@pytest.mark.parametrize("detach", [True, False])
def test_fast_critic_gradients_equal_the_mlp_on_u(detach):
    """The decomposed critic head (query and step blocks once per episode) gives the gradients of
    ``MLP_crt(u)`` on every parameter, whether the critic's input is detached or not."""
    torch.manual_seed(6)
    E, R, B = 9, 3, 5
    pol = Policy(E, R, replace(SMALL, critic_detach=detach), max_path_length=3).double()
    qe, qr = torch.randint(0, E, (B,)), torch.randint(0, R, (B,))

    def grads(fast: bool) -> dict[str, torch.Tensor]:
        pol.zero_grad(set_to_none=True)
        hc = pol.advance_path(pol.initial_path_state(B), torch.randint(0, E, (B,), generator=torch.Generator().manual_seed(1)),
                              torch.randint(0, R, (B,), generator=torch.Generator().manual_seed(2)),
                              torch.randint(0, 5, (B,), generator=torch.Generator().manual_seed(3)))
        query = pol.query_embedding(qe, qr)
        pre = pol.precompute_query(query)
        loss = 0
        for step in range(pol.max_path_length):
            if fast:
                _, v = pol.heads(pre, hc[0], step)
            else:
                v = pol.critic(pol._critic_input(pol.state_input(query, hc[0], step)))
            loss = loss + (v ** 2).sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None}

    fast, slow = grads(True), grads(False)
    assert fast.keys() == slow.keys() and ("lstm_weight_ih" in fast) == (not detach)
    for n in fast:
        torch.testing.assert_close(fast[n], slow[n], msg=n)


def _todays_reset_parameters(self) -> None:
    """``Policy.reset_parameters`` before ``model.embedding_init`` existed (verbatim)."""
    import math

    from raptor.constants import pad_entity

    nn.init.xavier_uniform_(self.entity_emb.weight)
    nn.init.xavier_uniform_(self.relation_emb.weight)
    nn.init.xavier_uniform_(self.step_emb.weight)
    nn.init.normal_(self.a_init, std=1.0 / math.sqrt(self.d_action))
    bound = 1.0 / math.sqrt(self.d_path)
    for p in (self.lstm_weight_ih, self.lstm_weight_hh, self.lstm_bias):
        nn.init.uniform_(p, -bound, bound)
    with torch.no_grad():
        self.entity_emb.weight[pad_entity(self.num_entities)].zero_()


@BOTH
def test_default_embedding_init_is_todays_bit_for_bit(cfg, monkeypatch):
    torch.manual_seed(3)
    now = Policy(11, 3, cfg, max_path_length=3)
    monkeypatch.setattr(Policy, "reset_parameters", _todays_reset_parameters)
    torch.manual_seed(3)
    before = Policy(11, 3, cfg, max_path_length=3)
    for (name, a), b in zip(now.state_dict().items(), before.state_dict().values()):
        assert torch.equal(a, b), name


def test_embedding_init_normal_is_n01_and_xavier_keeps_its_bound():
    """``model.embedding_init``: N(0, 1) (nn.Embedding's default, TITer's) for the entity and relation
    tables, or Xavier-uniform with bound sqrt(6 / (rows + cols)); the padding row is zero either way
    and the step embedding stays Xavier."""
    E, R = 3000, 200
    cfg = ModelConfig(entity_dim=64, relation_dim=64, time_dim=8, step_dim=8, mlp_hidden_dim=16)
    tables = {}
    for how in ("normal", "xavier"):
        torch.manual_seed(0)
        pol = Policy(E, R, replace(cfg, embedding_init=how), max_path_length=3)
        assert torch.all(pol.entity_emb.weight[E] == 0)  # the padding row
        tables[how] = (pol.entity_emb.weight[:E].detach(), pol.relation_emb.weight.detach())
        step, (k, d) = pol.step_emb.weight.detach(), pol.step_emb.weight.shape
        assert float(step.abs().max()) <= (6 / (k + d)) ** 0.5
    for w in tables["normal"]:  # 192,000 and 22,512 draws: the sample std is within 1-2% of 1
        assert abs(float(w.mean())) < 0.02
        assert float(w.std()) == pytest.approx(1.0, abs=0.03)
        assert float(w.abs().max()) > 3.5  # not a bounded distribution
    for w, rows in zip(tables["xavier"], (E + 1, 2 * R + 2)):
        bound = (6 / (rows + w.shape[1])) ** 0.5  # entity: sqrt(6 / (3001 + 64)) = 0.0442
        assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.99 * bound
        assert float(w.std()) == pytest.approx(bound / 3 ** 0.5, rel=0.03)  # uniform on [-b, b]
    with pytest.raises(ValueError, match="embedding_init"):
        from raptor.agents.policy import init_embedding

        init_embedding(torch.empty(3, 2), "uniform")
