"""TITer-150 (raptor/agents/titer/training.py, dirichlet.py): TITer's scoring against its literal formula, the Dirichlet fit against
a literal port of TITer's dirichlet.py, reward shaping, REINFORCE, training, beam search, resume and
the inductive mean."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from raptor.runs.rundir import RunOptions
import torch
from scipy.special import gammaln, polygamma, psi

from raptor.agents.titer import training as titer
from helpers import synthetic_env

from raptor.agents.beam import SearchOptions, beam_search
from raptor.config import EnvConfig, EvalConfig
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.evaluation.ranking import build_filter, filtered_ranks
from raptor.agents.rollout import candidate_tensors, query_context
from raptor.agents.titer import dirichlet
from raptor.agents.titer.dirichlet import DirichletFit, dirichlet_statistics, fit_dirichlet, shaped_reward, statistics_of
from raptor.agents.titer.training import (TITerConfig, TITerPolicy, inductive_mean, inductive_mean_table, load_titer_model,
                                          reinforce_loss, train_titer)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Small dims (time_scale 24 as on ICEWS, so the time encoding is exercised off its unit scale).
SMALL = dict(entity_dim=16, relation_dim=12, time_dim=4, state_dim=10, mlp_hidden_dim=14)
LEARN = dict(entity_dim=32, relation_dim=32, time_dim=8, state_dim=32, mlp_hidden_dim=32)


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_env(max_actions=50)


def random_graph(seed, E=9, R=3, T=8, n=60, K=2, max_actions=5):
    rng = np.random.default_rng(seed)
    quads = np.unique(np.stack([rng.integers(0, E, n), rng.integers(0, R, n), rng.integers(0, E, n),
                                rng.integers(0, T, n)], 1), axis=0)
    graph = TemporalGraph.from_quadruples(quads, E, R)
    return TemporalEnv(graph, EnvConfig(max_path_length=K, max_actions=max_actions)), quads


# ------------------------------------------------------------------------------------------------
# The agent: TITer's formula
# ------------------------------------------------------------------------------------------------


def titer_literal_scores(p: TITerPolicy, h, e_q, r_q, ent, rel, dt):
    """TITer's Agent.forward scoring typed out from model/agent.py with the policy's parameters
    (DynamicEmbedding, PolicyMLP, score_weighted_fc), independent of TITerPolicy's own methods."""
    dr = p.config.relation_dim

    def dyn(e, d):  # DynamicEmbedding.forward
        t = torch.cos(p.time_w * (d.unsqueeze(-1).double() * p.config.time_scale) + p.time_b)
        return torch.cat([p.entity_emb.weight[e], t], -1)

    query_entity, query_relation = dyn(e_q, torch.zeros_like(e_q)), p.relation_emb.weight[r_q]
    neighbors_entities, neighbors_relations = dyn(ent, dt), p.relation_emb.weight[rel]
    agent_state = torch.cat([h, query_entity, query_relation], -1)
    output = (torch.relu(agent_state @ p.mlp_l1.weight.t() + p.mlp_l1.bias) @ p.mlp_l2.weight.t()
              + p.mlp_l2.bias).unsqueeze(1)
    relation_score = (neighbors_relations * output[:, :, :dr]).sum(2)
    entities_score = (neighbors_entities * output[:, :, dr:]).sum(2)
    actions = torch.cat([neighbors_relations, neighbors_entities], -1)
    x = torch.cat([actions, agent_state.unsqueeze(1).expand(-1, actions.shape[1], -1)], -1)
    a = torch.sigmoid(x @ p.score_weighted_fc.weight[0] + p.score_weighted_fc.bias)
    return (1 - a) * relation_score + a * entities_score


def test_candidate_logits_equal_titers_formula_values_and_gradients(synthetic):
    env, q, E, R, _ = synthetic
    torch.manual_seed(0)
    pol = TITerPolicy(E, R, TITerConfig(**SMALL), 3).double()
    state = env.reset(q["train"][q["train"][:, 3] > 20][:40])  # late queries: long histories
    B = state.batch_size
    cands = env.candidates(state)
    ct = candidate_tensors(state, cands, "cpu")
    assert ct.mask.sum() > 3 * B  # real candidates, and padding in some rows
    assert (~ct.mask).any()
    h = torch.randn(B, pol.config.state_dim, dtype=torch.float64)  # any history state
    e_q, r_q = torch.from_numpy(state.query_entity), torch.from_numpy(state.query_relation)

    ctx = query_context(pol, state, "cpu")
    s, v = pol.heads(ctx, h, 1)
    assert v is None  # TITer has no critic
    z = pol.candidate_logits(s, ct.entity, ct.relation, ct.dt, ct.mask)
    lit = titer_literal_scores(pol, h, e_q, r_q, ct.entity, ct.relation, ct.dt)
    naive = pol.candidate_logits_naive(h, e_q, r_q, ct.entity, ct.relation, ct.dt, ct.mask)
    assert torch.all(torch.isinf(z[~ct.mask])) and torch.all(torch.isinf(naive[~ct.mask]))
    torch.testing.assert_close(z[ct.mask], lit[ct.mask], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(naive[ct.mask], lit[ct.mask], rtol=1e-12, atol=1e-12)

    # gradients of every parameter through the decomposed path equal the literal formula's
    w = torch.randn_like(lit)
    pol.zero_grad()
    (torch.log_softmax(z, 1)[ct.mask] * w[ct.mask]).sum().backward()
    fast = {n: p.grad.clone() for n, p in pol.named_parameters() if not n.startswith("lstm")}
    pol.zero_grad()
    lit = titer_literal_scores(pol, h, e_q, r_q, ct.entity, ct.relation, ct.dt).masked_fill(~ct.mask, float("-inf"))
    (torch.log_softmax(lit, 1)[ct.mask] * w[ct.mask]).sum().backward()
    for n, p in pol.named_parameters():
        if n.startswith("lstm"):
            continue  # h is an input here
        torch.testing.assert_close(fast[n], p.grad, rtol=1e-9, atol=1e-10, msg=n)
        assert p.grad.abs().sum() > 0, n


def test_path_encoder_is_titers_lstm_with_its_inputs(synthetic):
    env, q, E, R, _ = synthetic
    torch.manual_seed(1)
    pol = TITerPolicy(E, R, TITerConfig(**SMALL), 3).double()
    state = env.reset(q["train"][:16])
    e_q, r_q, t_q = (torch.from_numpy(x) for x in (state.query_entity, state.query_relation, state.query_time))
    with pytest.raises(RuntimeError, match="precompute_query"):
        pol.initial_path_state(16)
    ctx = query_context(pol, state, "cpu")
    h0, c0 = pol.initial_path_state(16)  # handed over from precompute_query (beam search's order)
    stop = torch.full_like(e_q, 2 * R)
    zero = torch.zeros(16, pol.config.state_dim, dtype=torch.float64)

    def ent(e, d):
        return torch.cat([pol.entity_emb.weight[e], torch.cos(pol.time_w * d[:, None].double() * 24.0 + pol.time_b)], 1)

    # step 0: LSTMCell([Emb_R(NO_OP); e(e_q, 0)], (0, 0)) - TITer starts at the query time
    want_h, want_c = pol.lstm(torch.cat([pol.relation_emb.weight[stop], ent(e_q, torch.zeros_like(t_q))], 1), (zero, zero))
    torch.testing.assert_close(h0, want_h)
    torch.testing.assert_close(c0, want_c)
    assert torch.equal(ctx["h0"], h0)
    # next step: [Emb_R(r_k); e(e_{k+1}, t_q - t_{k+1})], LSTM updated after every action (STOP too)
    e1, r1, t1 = torch.randint(0, E, (16,)), torch.randint(0, 2 * R + 1, (16,)), torch.randint(0, 5, (16,))
    h1, c1 = pol.advance_path((h0, c0), e1, r1, t_q - t1)
    want = pol.lstm(torch.cat([pol.relation_emb.weight[r1], ent(e1, t_q - t1)], 1), (h0, c0))
    torch.testing.assert_close(h1, want[0])
    torch.testing.assert_close(c1, want[1])


def test_default_config_is_titers():
    cfg = TITerConfig()
    assert (cfg.entity_dim, cfg.relation_dim, cfg.time_dim, cfg.state_dim, cfg.mlp_hidden_dim) == (100, 100, 20, 100, 100)
    assert (cfg.batch_size, cfg.learning_rate, cfg.gamma, cfg.entropy_beta, cfg.entropy_decay) == (512, 1e-3, 0.95, 0.01, 0.9)
    assert cfg.baseline_lambda == 0.0 and cfg.reward_shaping and cfg.dirichlet_k == 300 and cfg.im_mu == 0.1
    p = TITerPolicy(50, 4, cfg)
    assert p.entity_emb.weight.shape == (51, 80) and p.relation_emb.weight.shape == (10, 100)
    assert p.score_weighted_fc.in_features == 500 and p.mlp_l1.in_features == 300 and p.mlp_l2.out_features == 200
    torch.testing.assert_close(p.time_w, torch.from_numpy(1 / 10 ** np.linspace(0, 9, 20)).float())
    from raptor.config import ConfigError, params_from_dict

    with pytest.raises(ConfigError, match=r"titer.time_dim \(100\) must be smaller than titer.entity_dim"):
        params_from_dict({"titer": {"time_dim": 100}})
    with pytest.raises(ConfigError, match="titer.entropy_decay_per"):
        params_from_dict({"titer": {"entropy_decay_per": "step"}})


# ------------------------------------------------------------------------------------------------
# Dirichlet fit: a literal port of TITer's model/dirichlet.py as the reference
# ------------------------------------------------------------------------------------------------


def _ll(D, a):
    return len(D) * (gammaln(a.sum()) - gammaln(a).sum() + ((a - 1) * np.log(D).mean(0)).sum())


def _ipsi_ref(y, tol=1.48e-9, maxiter=10):
    x0 = np.piecewise(y, [y >= -2.22, y < -2.22], [lambda x: np.exp(x) + 0.5, lambda x: -1 / (x - psi(1))])
    for _ in range(maxiter):
        x1 = x0 - (psi(x0) - y) / polygamma(1, x0)
        if np.linalg.norm(x1 - x0) < tol:
            return x1
        x0 = x1
    return x1


def titer_mle_reference(D, tol=1e-7, maxiter=100, inner=1000):
    """TITer's dirichlet._meanprecision (with _init_a, _fit_s, _fit_m, _ipsi), per relation, scipy."""
    D = D + 1e-9
    logp = np.log(D).mean(0)
    E, E2 = D.mean(0), (D ** 2).mean(0)
    a0 = (E[0] - E2[0]) / ((E2[0] - E[0] ** 2) + 1e-9) * E
    s0 = a0.sum()
    if s0 < 0:
        a0 = a0 / s0
    elif s0 == 0:
        a0 = np.ones(a0.shape) / len(a0)
    for _ in range(maxiter):
        s1 = a0.sum()  # _fit_s
        m = a0 / s1
        for _ in range(inner):
            s0 = s1
            g = psi(s1) - (m * psi(s1 * m)).sum() + (m * logp).sum()
            h = polygamma(1, s1) - (m ** 2 * polygamma(1, s1 * m)).sum()
            if g + s1 * h < 0:
                s1 = 1 / (1 / s0 + g / h / s0 ** 2)
            if s1 <= 0:
                s1 = s0 * np.exp(-g / (s0 * h + g))
            if s1 <= 0:
                s1 = 1 / (1 / s0 + g / (s0 ** 2 * h + 2 * s0 * g))
            if s1 <= 0:
                s1 = s0 - g / h
            assert s1 > 0
            a = s1 * m
            if abs(s1 - s0) < tol:
                break
        s = a.sum()  # _fit_m
        b0 = a
        for _ in range(inner):
            b1 = _ipsi_ref(logp + (b0 / s * (psi(b0) - logp)).sum())
            b1 = b1 / b1.sum() * s
            if np.linalg.norm(b1 - b0) < tol:
                break
            b0 = b1
        if abs(_ll(D, b1) - _ll(D, a0)) < tol:
            return b1
        a0 = b1
    return b1


def titer_observations(train_quads, R, k):
    """TITer's MLE_Dirchlet.get_entity_occ_times + get_relations_observed_data, as loops (our inverse
    id r + R instead of its r + R + 1; bins >= k skipped where TITer would raise)."""
    occ: dict = {}
    for s, r, o, t in train_quads.tolist():
        for e in (s, o):
            occ.setdefault(e, {})
            occ[e][t] = occ[e].get(t, 0) + 1
    data: dict = {}
    for s, r, o, t in train_quads.tolist():
        for rel, target in ((r, o), (r + R, s)):
            v = np.zeros(k)
            for time_, c in occ[target].items():
                if time_ < t and t - time_ < k:
                    v[t - time_] = c
            data.setdefault(rel, []).append(v)
    return {r: np.array(v) for r, v in data.items()}


def test_special_functions_match_scipy():
    neg = -np.linspace(0.1, 5.3, 37)
    x = np.concatenate([np.geomspace(1e-4, 1e4, 400), neg[np.abs(neg - np.round(neg)) > 1e-3]])  # no poles
    for i, xi in enumerate(x):
        assert dirichlet._digamma(xi) == pytest.approx(psi(xi), rel=1e-13, abs=1e-13)
        assert dirichlet._trigamma(xi) == pytest.approx(polygamma(1, xi), rel=1e-13)
        if xi > 0:
            assert dirichlet._psi_psi1(xi) == pytest.approx((psi(xi), float(polygamma(1, xi))), rel=1e-13, abs=1e-13)


def test_dirichlet_statistics_equal_titers_observations(synthetic):
    env, q, E, R, splits = synthetic
    k = 12
    st = dirichlet_statistics(q["train"], E, R, k, eps=1e-9, chunk=100)  # several chunks
    ref = titer_observations(splits["train"].astype(np.int64), R, k)
    assert set(np.flatnonzero(st.count)) == set(ref)
    for r, D in ref.items():
        assert st.count[r] == len(D)
        np.testing.assert_allclose(st.mean_log[r], np.log(D + 1e-9).mean(0), rtol=1e-12)
        np.testing.assert_allclose(st.mean[r], (D + 1e-9).mean(0), rtol=1e-12)
        assert st.mean_sq0[r] == pytest.approx(((D[:, 0] + 1e-9) ** 2).mean(), rel=1e-12)
    assert max(D.max() for D in ref.values()) > 1  # counts, not indicators


def test_dirichlet_fit_equals_literal_port_of_titer(synthetic):
    """The relations of the synthetic graph (their likelihoods have a maximum: the fit converges)
    and count matrices like ICEWS14's rare relations (sum_j exp(mean log D_j) > 1: no maximum; the
    fit runs into the caps, its fixed point cycles, which the fit cuts short) must give TITer's
    numbers. Caps reduced from (100, 1000) to keep the literal port fast; the same go to both."""
    env, q, E, R, splits = synthetic
    k, maxiter, inner = 12, 20, 300
    caps = TITerConfig(dirichlet_maxiter=maxiter, dirichlet_inner_maxiter=inner)
    graph_obs = titer_observations(splits["train"].astype(np.int64), R, k)
    st = dirichlet_statistics(q["train"], E, R, k)
    fit = fit_dirichlet(st, caps, workers=2)
    assert set(np.flatnonzero(fit.fitted)) == set(graph_obs)
    assert np.all(np.exp(st.mean_log[list(graph_obs)]).sum(1) < 1)
    for r, D in graph_obs.items():
        np.testing.assert_allclose(fit.alpha[r], titer_mle_reference(D, maxiter=maxiter, inner=inner), rtol=1e-6)

    rng = np.random.default_rng(0)
    counts = []
    for n in (3, 5, 8, 10):
        D = rng.poisson(rng.gamma(2.0, 0.25, size=30), size=(n, 30)).astype(float)
        D[:, 0] = 0  # bin 0 (the query's own time) is never observed
        counts.append(D)
    st = statistics_of(counts)
    assert (np.exp(st.mean_log).sum(1) > 1).sum() >= 3
    fit = fit_dirichlet(st, caps, workers=2)
    assert fit.fitted.all() and (fit.rounds == maxiter).any()  # ran into the cap
    for r, D in enumerate(counts):
        np.testing.assert_allclose(fit.alpha[r], titer_mle_reference(D, maxiter=maxiter, inner=inner), rtol=1e-6)
    # the cycle shortcut changes nothing, bit for bit (window 1 = no shortcut)
    plain = fit_dirichlet(st, caps, workers=1, cycle_window=1)
    assert np.array_equal(plain.alpha, fit.alpha)


def test_dirichlet_fit_recovers_known_parameters():
    rng = np.random.default_rng(0)
    alphas = [np.array([0.5, 2.0, 4.0, 1.0]), np.array([8.0, 3.0, 30.0, 0.7])]
    obs = [rng.dirichlet(a, size=20000) for a in alphas] + [np.zeros((0, 4))]
    fit = fit_dirichlet(statistics_of(obs))
    assert fit.fitted.tolist() == [True, True, False]
    for a, got in zip(alphas, fit.alpha):
        np.testing.assert_allclose(got, a, rtol=0.05)
    ref = titer_mle_reference(obs[0])
    np.testing.assert_allclose(fit.alpha[0], ref, rtol=1e-8)


# ------------------------------------------------------------------------------------------------
# Reward shaping and REINFORCE
# ------------------------------------------------------------------------------------------------


def test_shaped_reward_values():
    alpha = np.array([[1.0, 1.0, 2.0], [1e4, 1e-3, 1e-3], [np.nan] * 3])
    fit = DirichletFit(alpha=alpha, fitted=np.array([True, True, False]), rounds=np.array([1, 1, 0]), seconds=0.0)
    n = 40000
    rel = np.repeat([0, 1, 2, 0], n)
    dt = np.repeat([2, 0, 1, 3], n)  # dt = 3 = k: outside the prior
    reward = np.ones(4 * n)
    reward[::7] = 0
    out = shaped_reward(reward, fit, rel, dt, np.random.default_rng(0))
    assert np.all(out[reward == 0] == 0)
    a, b, c, d = (out[i * n:(i + 1) * n][reward[i * n:(i + 1) * n] == 1] for i in range(4))
    # relation 0, bin 2: p ~ Beta(2, 2): 1 + p has mean 1.5, variance 1/20
    assert np.all((a > 1) & (a < 2)) and a.mean() == pytest.approx(1.5, abs=0.01) and a.var() == pytest.approx(0.05, abs=0.003)
    assert b.mean() == pytest.approx(2.0, abs=1e-5)  # all mass on bin 0
    assert np.all(c == 1.0) and np.all(d == 1.0)  # no fit / dt >= k: p = 0
    again = shaped_reward(reward, fit, rel, dt, np.random.default_rng(0))
    assert np.array_equal(out, again)
    # the marginal equals the component of a full Dirichlet draw (TITer's rvs(1)[0][dt])
    full = np.random.default_rng(1).dirichlet(alpha[0], size=n)[:, 2]
    assert a.mean() - 1 == pytest.approx(full.mean(), abs=0.01)


def test_reinforce_loss_is_titers():
    torch.manual_seed(0)
    B, K, gamma = 6, 3, 0.95
    logp = (-torch.rand(B, K)).requires_grad_()
    ent = torch.rand(B, K, requires_grad=True)
    reward = torch.tensor([1.0, 0.0, 1.7, 0.0, 0.0, 1.2])  # shaped
    g = titer.discounted_returns(reward, K, gamma)
    # TITer's calc_cum_discounted_reward
    cum = torch.zeros(B, K)
    cum[:, K - 1] = reward
    run = torch.zeros(B)
    for t in reversed(range(K)):
        run = gamma * run + cum[:, t]
        cum[:, t] = run
    torch.testing.assert_close(g, cum)
    base, beta = 0.3, 0.01 * 0.9 ** 5
    loss, parts = reinforce_loss(logp, ent, g, base, beta)
    final = g - base
    final = (final - final.mean()) / (torch.std(final) + 1e-6)
    want = torch.mean(-logp * final) - beta * ent.mean()
    assert float(loss.detach()) == pytest.approx(float(want.detach()), rel=1e-6)
    assert parts["loss"] == pytest.approx(float(loss.detach()))
    loss.backward()
    torch.testing.assert_close(logp.grad, -final / (B * K))
    torch.testing.assert_close(ent.grad, torch.full((B, K), -beta / (B * K)))
    bl = titer.ReactiveBaseline(0.25)
    bl.update(2.0)
    bl.update(1.0)
    assert bl.value == pytest.approx(0.75 * 0.5 + 0.25)


def test_entropy_coefficient_decays_per_batch_like_titers_trainer():
    cfg = TITerConfig()
    assert titer.entropy_coefficient(cfg, 0, 0, 10) == 0.01
    assert titer.entropy_coefficient(cfg, 2, 3, 10) == pytest.approx(0.01 * 0.9 ** 23)
    assert titer.entropy_coefficient(TITerConfig(entropy_decay_per="epoch"), 2, 3, 10) == pytest.approx(0.01 * 0.81)


# ------------------------------------------------------------------------------------------------
# Training, resume, model files
# ------------------------------------------------------------------------------------------------


def test_training_raises_the_reward(synthetic):
    env, q, E, R, _ = synthetic
    torch.manual_seed(0)
    cfg = TITerConfig(batch_size=128, **LEARN)
    pol = TITerPolicy(E, R, cfg, 3)
    res = train_titer(pol, env, q["train"], cfg, EvalConfig(), RunOptions(seed=0, epochs=20, progress=False, resume=False))
    rewards = [h["reward"] for h in res.history]
    assert np.mean(rewards[-3:]) > 2.5 * np.mean(rewards[:3]), rewards
    assert all(h["shaped_reward"] >= h["reward"] for h in res.history)  # 1 + p >= 1 where R = 1
    assert res.history[1]["entropy_beta"] == pytest.approx(0.01 * 0.9 ** math.ceil(len(q["train"]) / 128))


def test_resume_and_determinism(synthetic, tmp_path):
    env, q, E, R, _ = synthetic
    cfg = TITerConfig(batch_size=256, baseline_lambda=0.05, **SMALL)  # a moving baseline: kept in checkpoints
    ev = EvalConfig(valid_every=2, beam_size=5)
    prior = dirichlet.fit_time_prior(q["train"], E, R, cfg)

    def evaluate(p):
        res = beam_search(p, env, q["valid"][:40], ev)
        return {"mrr": float(np.mean(res.cand_entity[:, 0] == q["valid"][:40, 2]))}

    def run(out, **kw):
        torch.manual_seed(0)
        return train_titer(TITerPolicy(E, R, cfg, 3), env, q["train"], cfg, ev, RunOptions(**{"seed": 3, "epochs": 3, "out_dir": out, "evaluate_fn": evaluate, "progress": False, "resume": False, **kw}), time_prior=prior)

    full = run(tmp_path / "a")
    again = run(None)
    keys = ("reward", "shaped_reward", "loss", "entropy", "baseline", "val_mrr")
    assert [[h[k] for k in keys] for h in full.history] == [[h[k] for k in keys] for h in again.history]
    assert full.history[-1]["baseline"] != 0.0

    class Interrupt(Exception):
        pass

    def stop(epoch, _):
        if epoch == 0:
            raise Interrupt

    with pytest.raises(Interrupt):
        run(tmp_path / "b", on_epoch_end=stop)
    torch.manual_seed(123)  # another initialisation: everything must come from the checkpoint
    resumed = train_titer(TITerPolicy(E, R, cfg, 3), env, q["train"], cfg, ev, RunOptions(seed=3, epochs=3, out_dir=tmp_path / "b", evaluate_fn=evaluate, progress=False, resume=True), time_prior=prior)
    assert [[h[k] for k in keys] for h in full.history] == [[h[k] for k in keys] for h in resumed.history]
    pa, _ = load_titer_model(tmp_path / "a" / "final.pt")
    pb, meta = load_titer_model(tmp_path / "b" / "final.pt")
    for (n, ta), tb in zip(pa.state_dict().items(), pb.state_dict().values()):
        assert torch.equal(ta, tb), n
    assert meta["seed"] == 3 and meta["architecture"] == "titer" and meta["model"]["state_dim"] == SMALL["state_dim"]
    hist = json.loads((tmp_path / "b" / "history.json").read_text())
    assert [h["epoch"] for h in hist] == [0, 1, 2] and hist[1]["val_mrr"] is not None and hist[0]["val_mrr"] is None
    for name in ("checkpoint.pt", "best.pt", "final.pt", "history.csv", "dirichlet.npz"):
        assert (tmp_path / "b" / name).exists()
    best, _ = load_titer_model(tmp_path / "b" / "best.pt")
    assert isinstance(best, TITerPolicy)


#: The walks TITer trains in: the shared MDP, TITer's own, and TITer's own with same-time edges.
WALKS = [("forward", False), ("backward", False), ("backward", True)]


@pytest.mark.parametrize("walk,same_time", WALKS)
def test_a_rollout_in_the_device_environment_is_the_host_ones(synthetic, walk, same_time):
    """TITer's rollout with the device environment's candidates (torch, here on the CPU): the same
    episodes as with the host environment's, bit for bit (the same candidates in the same slots, so the
    same logits and the same draws from the same generator)."""
    env, q, E, R, _ = synthetic
    host = env.with_walk(walk, same_time)
    dev = on_device(host, "cpu", "torch")
    assert isinstance(dev, DeviceEnv) and dev.walk == walk and dev.same_time == same_time
    torch.manual_seed(0)
    pol = TITerPolicy(E, R, TITerConfig(**SMALL), 3)
    batch = q["train"][::5][:256]
    a, b = (titer.rollout(pol, e, batch, torch.Generator().manual_seed(7)) for e in (host, dev))
    assert isinstance(a.reward, np.ndarray) and isinstance(b.reward, torch.Tensor)
    final = b.final.numpy()
    for name in ("entity", "time", "path_entity", "path_relation", "path_time", "visited"):
        np.testing.assert_array_equal(getattr(final, name), getattr(a.final, name), err_msg=name)
    np.testing.assert_array_equal(b.reward.numpy(), a.reward)
    assert torch.equal(a.log_prob, b.log_prob) and torch.equal(a.entropy, b.entropy)
    assert a.reward.any() and (a.final.path_relation != env.stop_relation).any()  # real episodes
    # what the reward shaping reads, on the host from one copy of the device's vectors
    for x, y in zip(titer.shaping_inputs(a), titer.shaping_inputs(b)):
        np.testing.assert_array_equal(x, y)
        assert x.dtype == y.dtype


@pytest.mark.parametrize("walk,same_time", WALKS)
def test_training_in_the_device_environment_is_the_host_ones_and_resumes(synthetic, tmp_path, monkeypatch, walk,
                                                                           same_time):
    """Two epochs of TITer's training (reward shaping on, a moving baseline) with ``env_backend`` torch
    and numpy: the same history and weights, exactly. Exactly, not within rounding: the episodes are the
    same bit for bit (above), the shaping draws come from the same NumPy stream on the same host
    vectors, and the loss, baseline and means are the same float32 / float64 operations on the same
    values in the same order on the same device. A device run interrupted after its first epoch and
    resumed equals the uninterrupted one."""
    env, q, E, R, _ = synthetic
    base = TemporalEnv(env.graph, env.config)  # its own cache of device environments
    host = base.with_walk(walk, same_time)
    cfg = TITerConfig(batch_size=256, baseline_lambda=0.05, **SMALL)
    steps = []
    candidates = DeviceEnv.candidates
    monkeypatch.setattr(DeviceEnv, "candidates", lambda self, state: steps.append(self.walk) or candidates(self, state))
    assert cfg.reward_shaping and cfg.clip_gradient
    train = q["train"][:1100]  # 5 batches, the last one short
    prior = dirichlet.fit_time_prior(train, E, R, cfg)
    keys = ("reward", "shaped_reward", "loss", "actor_loss", "entropy", "grad_norm", "baseline", "entropy_beta")

    def run(backend, out=None, init=0, **kw):
        torch.manual_seed(init)
        pol = TITerPolicy(E, R, cfg, 3)
        res = train_titer(pol, host, train, cfg, EvalConfig(), RunOptions(
            **{"seed": 2, "epochs": 2, "out_dir": out, "progress": False, "resume": False, "env_backend": backend,
               **kw}), time_prior=prior)
        return [[h[k] for k in keys] for h in res.history], pol

    want, pa = run("numpy")
    assert not steps and not host._device_envs
    got, pb = run("torch", tmp_path / "a")
    assert steps == [walk] * (2 * 5 * 3)  # 2 epochs of 5 batches of K = 3 steps
    assert got == want
    assert want[1][keys.index("shaped_reward")] > want[1][keys.index("reward")] > 0  # shaping drew
    assert want[1][keys.index("baseline")] != 0.0
    for (n, x), y in zip(pa.state_dict().items(), pb.state_dict().values()):
        assert torch.equal(x, y), n
    # the training built the device environment of its walk once, in the cache that the environment
    # shares with every with_walk copy of it (as TITer's agent makes one per call: agent.env(ctx))
    assert list(host._device_envs) == [(walk, same_time, "cpu")]
    assert host._device_envs[(walk, same_time, "cpu")] is on_device(base.with_walk(walk, same_time), "cpu", "torch")

    class Interrupt(Exception):
        pass

    def stop(epoch, _):
        if epoch == 0:
            raise Interrupt

    with pytest.raises(Interrupt):
        run("torch", tmp_path / "b", on_epoch_end=stop)
    assert (tmp_path / "b" / "checkpoint.pt").exists()
    resumed, pr = run("torch", tmp_path / "b", init=123, resume=True)  # the weights must come from the checkpoint
    assert resumed == got
    for (n, x), y in zip(pb.state_dict().items(), pr.state_dict().values()):
        assert torch.equal(x, y), n


# ------------------------------------------------------------------------------------------------
# Beam search (unchanged raptor.agents.beam) with TITerPolicy
# ------------------------------------------------------------------------------------------------


def enumerate_paths(policy, env, query):
    """All K-step paths of one query with their log-probabilities, through the literal formula."""
    out = []
    e_q = torch.tensor([int(query[0])])
    r_q = torch.tensor([int(query[1])])

    def rec(state, hc, logp):
        if state.step == env.K:
            out.append((logp, int(state.entity[0])))
            return
        cands = env.candidates(state)
        ct = candidate_tensors(state, cands, "cpu")
        z = titer_literal_scores(policy, hc[0], e_q, r_q, ct.entity, ct.relation, ct.dt)
        lp = torch.log_softmax(z.masked_fill(~ct.mask, float("-inf")), 1)[0]
        for a in range(int(cands.count[0]) + 1):
            nxt = env.step(state, cands, np.array([a]))
            hc2 = policy.advance_path(hc, torch.from_numpy(nxt.entity), torch.from_numpy(nxt.path_relation[:, -1].copy()),
                                      torch.from_numpy(nxt.query_time - nxt.time))
            rec(nxt, hc2, logp + float(lp[a]))

    with torch.no_grad():
        s0 = env.reset(np.asarray(query)[None])
        query_context(policy, s0, "cpu")
        rec(s0, policy.initial_path_state(1), 0.0)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_search_with_titer_is_exact_and_ranks_are_valid(seed):
    env, quads = random_graph(seed)
    torch.manual_seed(seed)
    pol = TITerPolicy(env.num_entities, env.num_relations, TITerConfig(**SMALL), env.K).double()
    rng = np.random.default_rng(seed)
    queries = np.stack([rng.integers(0, 9, 6), rng.integers(0, 6, 6), rng.integers(0, 9, 6), rng.integers(2, 9, 6)], 1)
    res = beam_search(pol, env, queries, EvalConfig(beam_size=400), SearchOptions(chunk_size=4))
    for i, query in enumerate(queries):
        want: dict[int, float] = {}
        for lp, e in enumerate_paths(pol, env, query):
            want[e] = max(want.get(e, -np.inf), lp)
        got = {int(e): float(s) for e, s in zip(res.cand_entity[i], res.cand_score[i]) if e >= 0}
        assert set(got) == set(want)
        for e in want:
            assert got[e] == pytest.approx(want[e], abs=1e-6)
    filt = build_filter(quads, env.num_relations)
    ranks = filtered_ranks(res.cand_entity, res.cand_score, queries[:, 2], queries[:, [0, 1, 3]], filt, env.num_entities)
    assert np.all((ranks >= 1) & (ranks <= env.num_entities))
    reached = (res.cand_entity == queries[:, 2:3]).any(1)
    assert np.all(ranks[reached] <= (res.cand_entity >= 0).sum(1)[reached])


# ------------------------------------------------------------------------------------------------
# Inductive mean
# ------------------------------------------------------------------------------------------------


def im_setup():
    """Entities 0..5 in training; 6 appears only later (unseen). Relation 0 has training subjects
    {0, 1, 2}, its inverse (id R + 0) the objects {3, 4}; relation 1 only {5}."""
    E, R = 7, 3
    train = np.array([[0, 0, 3, 0], [1, 0, 4, 1], [2, 0, 3, 1], [5, 1, 0, 2]])
    later = np.array([[6, 2, 1, 3], [6, 1, 2, 4], [6, 0, 4, 4], [4, 2, 6, 5]])
    graph = TemporalGraph.from_quadruples(np.concatenate([train, later]), E, R)
    return E, R, train, TemporalEnv(graph, EnvConfig(max_path_length=2, max_actions=10))


def test_inductive_mean_vectors():
    E, R, train, env = im_setup()
    torch.manual_seed(0)
    pol = TITerPolicy(E, R, TITerConfig(**SMALL), 2)
    im = inductive_mean_table(pol, train)
    W = pol.entity_emb.weight.detach()
    torch.testing.assert_close(im.mean[0], W[[0, 1, 2]].mean(0))
    torch.testing.assert_close(im.mean[R + 0], W[[3, 4]].mean(0))
    torch.testing.assert_close(im.mean[1], W[5])
    assert im.has_mean.tolist()[:2 * R] == [True, True, False, True, True, False]
    assert im.unseen.tolist() == [False] * 6 + [True, True]  # entity 6 and the padding row
    # the shifted query embedding of an unseen entity: mu e + (1 - mu) IM(r_q); seen ones unchanged
    with inductive_mean(pol, train, mu=0.25):
        emb = pol.query_embedding(torch.tensor([6, 6, 3, 6]), torch.tensor([0, 2, 0, R]))["entity_emb"]
    d = pol.d_static
    torch.testing.assert_close(emb[0, :d], 0.25 * W[6] + 0.75 * W[[0, 1, 2]].mean(0))
    torch.testing.assert_close(emb[1, :d], W[6])  # relation 2 had no training subjects: no shift
    torch.testing.assert_close(emb[2, :d], W[3])  # seen entity
    torch.testing.assert_close(emb[3, :d], 0.25 * W[6] + 0.75 * W[[3, 4]].mean(0))
    assert pol.inductive is None  # removed after the block


def test_inductive_mean_in_beam_search_equals_titers_embedding_shift():
    """TITer shifts the weight row of e_q for the query's search: a policy copy with that row
    replaced must give the same beam search as the installed inductive mean, query by query."""
    E, R, train, env = im_setup()
    torch.manual_seed(0)
    pol = TITerPolicy(E, R, TITerConfig(**SMALL), 2).double()
    queries = np.array([[6, 0, 4, 4], [6, R + 1, 5, 5], [6, 2, 2, 5], [1, 0, 6, 5]])
    ev = EvalConfig(beam_size=50)
    plain = beam_search(pol, env, queries, ev)
    with inductive_mean(pol, train, mu=0.1) as p:
        shifted = beam_search(p, env, queries, ev)
        im = p.inductive
    W = pol.entity_emb.weight.detach()
    for i, (e, r, _, _) in enumerate(queries):
        ref = TITerPolicy(E, R, TITerConfig(**SMALL), 2).double()
        ref.load_state_dict(pol.state_dict())
        if im.unseen[e] and im.has_mean[r]:
            with torch.no_grad():
                ref.entity_emb.weight[e] = 0.1 * W[e] + 0.9 * im.mean[r]
        want = beam_search(ref, env, queries[i:i + 1], ev)
        np.testing.assert_array_equal(shifted.cand_entity[i], want.cand_entity[0])
        np.testing.assert_allclose(shifted.cand_score[i], want.cand_score[0], rtol=1e-12)
    # queries 0 and 1 are shifted (scores change), 2 (no mean for relation 2) and 3 (seen) are not
    changed = [not np.allclose(shifted.cand_score[i], plain.cand_score[i]) for i in range(4)]
    assert changed == [True, True, False, False]


def test_early_stopping_and_model_files(synthetic, tmp_path):
    """eval.patience stops TITer's training as Pure-RL's; a RAPTOR policy file is refused as a TITer model."""
    from raptor.runs.checkpoints import CheckpointError, save_model
    from raptor.agents.policy import Policy

    env, q, E, R, _ = synthetic
    cfg = TITerConfig(batch_size=512, reward_shaping=False, **SMALL)
    mrrs = iter([0.2, 0.1, 0.1, 0.3])
    res = train_titer(TITerPolicy(E, R, cfg, 3), env, q["train"][:512], cfg, EvalConfig(valid_every=1, patience=2), RunOptions(seed=0, epochs=4, out_dir=tmp_path, evaluate_fn=lambda p: {"mrr": next(mrrs)}, progress=False, resume=False))
    assert [h["epoch"] for h in res.history] == [0, 1, 2] and res.best_epoch == 0 and res.stopped_early
    assert not (tmp_path / "dirichlet.npz").exists()  # no reward shaping, no prior
    _, meta = load_titer_model(tmp_path / "best.pt")
    assert meta["epoch"] == 0 and meta["val_mrr"] == 0.2
    save_model(tmp_path / "raptor.pt", Policy(E, R), {"num_entities": E})
    with pytest.raises(CheckpointError, match="not a TITer model"):
        load_titer_model(tmp_path / "raptor.pt")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_device_beam_search_equals_the_host_one_with_titers_agent(seed):
    """TITer's policy through the device search (raptor.agents.beam.search_beams_on_device, here with
    torch tensors on the CPU): the host search's candidates, scores and best paths, with its inductive
    mean installed too."""
    env, quads = random_graph(seed)
    torch.manual_seed(seed)
    pol = TITerPolicy(env.num_entities, env.num_relations, TITerConfig(**SMALL), env.K).double()
    rng = np.random.default_rng(seed)
    queries = np.stack([rng.integers(0, 9, 6), rng.integers(0, 6, 6), rng.integers(0, 9, 6), rng.integers(2, 9, 6)], 1)
    for beam in (3, 400):
        ev = EvalConfig(beam_size=beam)
        host = beam_search(pol, env, queries, ev, SearchOptions(chunk_size=4, backend="host"))
        dev = beam_search(pol, env, queries, ev, SearchOptions(backend="device", device_chunk_size=4))
        np.testing.assert_array_equal(dev.cand_entity, host.cand_entity)
        np.testing.assert_allclose(dev.cand_score, host.cand_score, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(dev.path_entity, host.path_entity)
    E, R, train, env2 = im_setup()
    pol2 = TITerPolicy(E, R, TITerConfig(**SMALL), 2).double()
    q2 = np.array([[6, 0, 4, 4], [6, R + 1, 5, 5], [6, 2, 2, 5], [1, 0, 6, 5]])
    with inductive_mean(pol2, train, mu=0.1) as p:
        host = beam_search(p, env2, q2, EvalConfig(beam_size=50), SearchOptions(backend="host"))
        dev = beam_search(p, env2, q2, EvalConfig(beam_size=50), SearchOptions(backend="device"))
    np.testing.assert_array_equal(dev.cand_entity, host.cand_entity)
    np.testing.assert_allclose(dev.cand_score, host.cand_score, rtol=1e-6, atol=1e-6)


def test_a_dirichlet_fit_is_saved_whole_under_its_own_name(tmp_path):
    """``dirichlet.npz`` is renamed into place (no partial file for a reader) under exactly its name."""
    fit = DirichletFit(alpha=np.array([[1.0, 2.0], [np.nan, np.nan]]), fitted=np.array([True, False]),
                       rounds=np.array([3, 0]), seconds=0.5)
    fit.save(tmp_path / "dirichlet.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dirichlet.npz"]
    with np.load(tmp_path / "dirichlet.npz") as z:
        np.testing.assert_array_equal(z["alpha"], fit.alpha)
        assert z["rounds"].tolist() == [3, 0] and float(z["seconds"]) == 0.5
