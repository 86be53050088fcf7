"""Several seeds trained at once (raptor/agents/actor_critic/seeds.py): each seed trains what it would
train alone, up to floating-point order; its run folder is a run folder of its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers import synthetic_env

from raptor.agents.actor_critic import rl as rl_mod
from raptor.agents.actor_critic.seeds import (SeedUniforms, StackedPolicy, clip_per_seed, seed_optimizer_state,
                                              stack_optimizer_states, train_epoch, train_seeds)
from raptor.agents.base import load_model
from raptor.agents.policy import Policy
from raptor.agents.rollout import rollout
from raptor.config import EvalConfig, ModelConfig, RLConfig
from raptor.mdp.device_env import on_device
from raptor.runs import checkpoints
from raptor.runs.loop import resumed_at
from raptor.runs.rundir import RunOptions

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = ModelConfig(entity_dim=16, relation_dim=16, time_dim=4, step_dim=4, mlp_hidden_dim=24)
SEEDS = (3, 5, 11)
#: float32 sums in another order: what "the same up to rounding" allows
TOL = dict(rtol=2e-4, atol=2e-5)
#: weights after several Adam steps: Adam's first steps move a weight by +-lr whatever its gradient's
#: size, so a gradient near 0 whose sign rounding flips moves it by 2 lr (lr = 1e-3) the other way
AFTER_ADAM = dict(rtol=1e-3, atol=2e-3)


@pytest.fixture(scope="module")
def synthetic():
    env, q, E, R, _ = synthetic_env(max_actions=20)
    return env, q, E, R


def policies(E, R, seeds=SEEDS, config=SMALL):
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(Policy(E, R, config, 3))
    return out


def grads(module):
    return [p.grad.clone() for p in module.parameters()]


def test_the_stack_scores_as_each_policy_alone(synthetic):
    env, q, E, R = synthetic
    pols = policies(E, R)
    stack = StackedPolicy(pols)
    for p in pols:  # perturb every parameter (zeros and ones would hide a wrong slice)
        with torch.no_grad():
            for t in p.parameters():
                t.add_(0.05 * torch.randn_like(t))
    stack = StackedPolicy(pols)
    B = 40
    gen = torch.Generator().manual_seed(0)
    qe = torch.randint(0, E, (len(SEEDS) * B,), generator=gen)
    qr = torch.randint(0, 2 * R, (len(SEEDS) * B,), generator=gen)
    ent = torch.randint(0, E + 1, (len(SEEDS) * B, 7), generator=gen)
    rel = torch.randint(0, 2 * R + 2, (len(SEEDS) * B, 7), generator=gen)
    dt = torch.randint(0, 30, (len(SEEDS) * B, 7), generator=gen)
    mask = torch.rand(len(SEEDS) * B, 7, generator=gen) > 0.3
    pre = stack.precompute_query(stack.query_embedding(qe, qr))
    hc = stack.initial_path_state(len(SEEDS) * B)
    hc = stack.advance_path(hc, ent[:, 0], rel[:, 0], dt[:, 0])
    s, v = stack.heads(pre, hc[0], 1)
    z = stack.candidate_logits(s, ent, rel, dt, mask)
    for i, p in enumerate(pols):
        rows = slice(i * B, (i + 1) * B)
        pre1 = p.precompute_query(p.query_embedding(qe[rows], qr[rows]))
        hc1 = p.initial_path_state(B)
        hc1 = p.advance_path(hc1, ent[rows, 0], rel[rows, 0], dt[rows, 0])
        s1, v1 = p.heads(pre1, hc1[0], 1)
        z1 = p.candidate_logits(s1, ent[rows], rel[rows], dt[rows], mask[rows])
        torch.testing.assert_close(hc[0][rows], hc1[0], **TOL)
        torch.testing.assert_close(s[rows], s1, **TOL)
        torch.testing.assert_close(v[rows], v1, **TOL)
        torch.testing.assert_close(z[rows], z1, **TOL)
    # and back: unstacking gives each policy its own weights
    fresh = policies(E, R, seeds=(0, 1, 2))
    stack.unstack_into(fresh)
    for a, b in zip(pols, fresh):
        for x, y in zip(a.parameters(), b.parameters()):
            assert torch.equal(x, y)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_a_stacked_rollout_has_each_seeds_episodes_and_gradients(synthetic, backend):
    """On the host environment and on the device one (torch tensors, here on the CPU)."""
    env, q, E, R = synthetic
    env = on_device(env, "cpu", backend)
    pols = policies(E, R)
    stack = StackedPolicy(pols)
    B = 64
    batches = [q["train"][i * B:(i + 1) * B] for i in range(len(SEEDS))]  # a different batch per seed
    gens = [torch.Generator().manual_seed(100 + s) for s in SEEDS]
    ro = rollout(stack, env, np.concatenate(batches), uniforms=SeedUniforms(gens, B, "cpu"))
    loss, parts = rl_mod.grouped_actor_critic_terms(ro, 0.95, 0.01, len(SEEDS))
    loss.backward()
    stacked_grads = grads(stack)
    for i, (p, seed) in enumerate(zip(pols, SEEDS)):
        alone = rollout(p, env, batches[i], torch.Generator().manual_seed(100 + seed))
        rows = slice(i * B, (i + 1) * B)
        assert np.array_equal(np.asarray(ro.final.path_entity[rows]), np.asarray(alone.final.path_entity))  # same episodes
        assert np.array_equal(np.asarray(ro.final.path_relation[rows]), np.asarray(alone.final.path_relation))
        assert torch.equal(ro.reward[rows], alone.reward)
        torch.testing.assert_close(ro.log_prob[rows], alone.log_prob, **TOL)
        torch.testing.assert_close(ro.value[rows], alone.value, **TOL)
        loss1, parts1 = rl_mod.actor_critic_terms(alone, 0.95, 0.01)
        torch.testing.assert_close(parts[i], parts1, **TOL)
        p.zero_grad()
        loss1.backward()
        for name, g_stack, g_alone in zip(stack.names, stacked_grads, grads(p)):
            torch.testing.assert_close(g_stack[i], g_alone, **TOL, msg=lambda m: f"{name}: {m}")


def test_grouped_loss_of_one_group_is_the_loss_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    for B in (1, 7, 333):
        lp, ent, val = (torch.randn(B, 3, generator=gen, requires_grad=True) for _ in range(3))
        ro = rl_mod.Rollout(lp, ent, val, None, (torch.rand(B, generator=gen) > 0.5).float())
        loss1, parts1 = rl_mod.grouped_actor_critic_terms(ro, 0.95, 0.01, 1)
        # the loss as written before the groups (Appendix C, one batch)
        disc = torch.tensor([0.95 ** 2, 0.95, 1.0])
        g = ro.reward[:, None] * disc
        adv = (g - val).detach()
        want = -(lp * adv).sum(1).mean() - 0.01 * ent.sum(1).mean() + ((val - g) ** 2).sum(1).mean()
        assert torch.equal(loss1, want)
        assert parts1.shape == (1, 4)


def test_clipping_is_per_seed(synthetic):
    env, q, E, R = synthetic
    pols = policies(E, R, seeds=(1, 2))
    stack = StackedPolicy(pols)
    for i, p in enumerate(stack.parameters()):
        p.grad = torch.randn_like(p) * torch.tensor([0.01, 10.0]).view(-1, *([1] * (p.dim() - 1)))
    before = grads(stack)
    norms = clip_per_seed(stack, 10.0)
    for s in range(2):
        want = torch.sqrt(sum((g[s].double() ** 2).sum() for g in before))
        assert float(norms[s]) == pytest.approx(float(want), rel=1e-5)
        # what torch's clip_grad_norm_ does to that seed's gradients alone
        alone = [torch.nn.Parameter(g[s].clone()) for g in before]
        for a, g in zip(alone, before):
            a.grad = g[s].clone()
        torch.nn.utils.clip_grad_norm_(alone, 10.0)
        for a, g in zip(alone, stack.parameters()):
            torch.testing.assert_close(g.grad[s], a.grad)
    assert float(norms[0]) < 10 < float(norms[1])  # one seed clipped, the other untouched


def test_optimizer_states_split_and_stack_back(synthetic):
    env, q, E, R = synthetic
    pols = policies(E, R, seeds=(1, 2))
    stack = StackedPolicy(pols)
    opt = rl_mod.make_optimizer(stack, RLConfig())
    for p in stack.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    state = opt.state_dict()
    per_seed = [seed_optimizer_state(state, s) for s in range(2)]
    # each is the state of an optimizer over one policy alone
    alone = rl_mod.make_optimizer(pols[0], RLConfig())
    alone.load_state_dict(per_seed[0])
    for i, p in enumerate(pols[0].parameters()):
        assert alone.state[p]["exp_avg"].shape == p.shape
    back = stack_optimizer_states(per_seed)
    for i in state["state"]:
        for k, v in state["state"][i].items():
            assert torch.equal(back["state"][i][k], v), (i, k)


@pytest.mark.parametrize("rl", [RLConfig(epochs=2, batch_size=128),
                                RLConfig(epochs=2, batch_size=128, clip_gradient=0.5, weight_decay=1e-3,
                                         entropy_decay_per="batch")], ids=["paper", "titer-defaults"])
def test_a_stacked_epoch_trains_each_seed_as_alone(synthetic, rl):
    env, q, E, R = synthetic
    queries = q["train"][:600]
    pols = policies(E, R)
    stack = StackedPolicy(pols)
    opt = rl_mod.make_optimizer(stack, rl)
    runs = [RunOptions(seed=s, progress=False) for s in SEEDS]
    rows = [train_epoch(stack, opt, env, queries, epoch, rl, runs) for epoch in range(2)]
    for i, seed in enumerate(SEEDS):
        p = policies(E, R, seeds=(seed,))[0]
        o = rl_mod.make_optimizer(p, rl)
        for epoch in range(2):
            alone = rl_mod.train_epoch(p, o, env, queries, epoch, rl, RunOptions(seed=seed, progress=False))
            assert set(alone) == set(rows[epoch][i])
            for key, value in alone.items():
                assert rows[epoch][i][key] == pytest.approx(value, rel=1e-4, abs=1e-5), (seed, epoch, key)
        for name, param in zip(stack.names, p.parameters()):
            torch.testing.assert_close(stack.p(name)[i], param, **AFTER_ADAM, msg=lambda m: f"{name}: {m}")


def _runs(tmp_path, rl, evaluate=None, **kw):
    return [RunOptions(seed=s, out_dir=tmp_path / f"seed{s}", progress=False, evaluate_fn=evaluate, **kw) for s in SEEDS]


def test_train_seeds_leaves_each_run_folder_as_alone_and_resumes(synthetic, tmp_path):
    env, q, E, R = synthetic
    queries = q["train"][:400]
    rl = RLConfig(epochs=3, batch_size=128)
    ev = EvalConfig(valid_every=2)
    evaluate = lambda p: {"mrr": float(p.entity_emb.weight[:5].detach().abs().mean())}  # any function of the weights
    stacked = train_seeds(policies(E, R), env, queries, rl, ev, _runs(tmp_path / "stacked", rl, evaluate))
    for i, seed in enumerate(SEEDS):
        alone = rl_mod.train(policies(E, R, seeds=(seed,))[0], env, queries, rl, ev,
                             RunOptions(seed=seed, out_dir=tmp_path / "alone" / f"seed{seed}", progress=False,
                                        evaluate_fn=evaluate, resume=False))
        assert stacked[i].best_epoch == alone.best_epoch
        assert [h["epoch"] for h in stacked[i].history] == [0, 1, 2]
        for a, b in zip(stacked[i].history, alone.history):
            assert a["reward"] == pytest.approx(b["reward"], rel=1e-4)
            assert (a["val_mrr"] is None) == (b["val_mrr"] is None)
        folder = tmp_path / "stacked" / f"seed{seed}"
        for name in ("checkpoint.pt", "best.pt", "final.pt", "history.json", "history.csv", "validation.csv"):
            assert (folder / name).exists(), name
        p_stack, meta = load_model(folder / "final.pt")
        p_alone, _ = load_model(tmp_path / "alone" / f"seed{seed}" / "final.pt")
        assert meta["seed"] == seed
        for (name, x), y in zip(p_stack.state_dict().items(), p_alone.state_dict().values()):
            torch.testing.assert_close(x, y, **AFTER_ADAM, msg=lambda m: f"{name}: {m}")

    # interrupted after epoch 1 (one seed's hook raises), then resumed stacked: the same run, bit for bit
    class Interrupt(Exception):
        pass

    def stop(epoch, row):
        if epoch == 1 and not row.get("replayed"):
            raise Interrupt

    runs = _runs(tmp_path / "resumed", rl, evaluate, resume=False)
    runs[-1] = RunOptions(seed=SEEDS[-1], out_dir=runs[-1].out_dir, progress=False, evaluate_fn=evaluate,
                          resume=False, on_epoch_end=stop)
    with pytest.raises(Interrupt):
        train_seeds(policies(E, R), env, queries, rl, ev, runs)
    replayed = []
    runs = _runs(tmp_path / "resumed", rl, evaluate, on_epoch_end=lambda e, row: replayed.append((e, "replayed" in row)))
    resumed = train_seeds(policies(E, R, seeds=(0, 0 + 1, 2)), env, queries, rl, ev, runs)
    assert replayed.count((0, True)) == len(SEEDS) and replayed.count((2, False)) == len(SEEDS)
    for i, seed in enumerate(SEEDS):
        assert all({k: v for k, v in a.items() if "seconds" not in k and k != "resumed"} ==
                   {k: v for k, v in b.items() if "seconds" not in k} for a, b in zip(resumed[i].history, stacked[i].history))
        assert resumed_at(resumed[i].history) == [2]  # the first epoch trained after the interruption
        a, _ = load_model(tmp_path / "resumed" / f"seed{seed}" / "final.pt")
        b, _ = load_model(tmp_path / "stacked" / f"seed{seed}" / "final.pt")
        for x, y in zip(a.state_dict().values(), b.state_dict().values()):
            assert torch.equal(x, y)

    # killed between two seeds' checkpoint writes of the last epoch (seed 0's written, the others' not): the seed
    # ahead is set back to its previous checkpoint and the three go on stacked, to the same bits
    import os
    import shutil

    shutil.copytree(tmp_path / "stacked", tmp_path / "apart")
    for seed in SEEDS[1:]:
        ckpt = tmp_path / "apart" / f"seed{seed}" / "checkpoint.pt"
        os.replace(checkpoints.previous(ckpt), ckpt)
        (tmp_path / "apart" / f"seed{seed}" / "final.pt").unlink()
    apart = train_seeds(policies(E, R), env, queries, rl, ev, _runs(tmp_path / "apart", rl, evaluate))
    for i, seed in enumerate(SEEDS):
        assert [h["stacked_seeds"] for h in apart[i].history] == [3, 3, 3] and apart[i].stacked_seeds == 3
        assert [{k: v for k, v in row.items() if "seconds" not in k and k != "resumed"} for row in apart[i].history] == [
            {k: v for k, v in row.items() if "seconds" not in k} for row in stacked[i].history]
        for name in ("final.pt", "best.pt"):
            a, _ = load_model(tmp_path / "apart" / f"seed{seed}" / name)
            b, _ = load_model(tmp_path / "stacked" / f"seed{seed}" / name)
            assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values())), name

    # a stacked run's checkpoint continues alone: its format is a run alone's
    ck = checkpoints.load_latest(tmp_path / "stacked" / f"seed{SEEDS[0]}" / "checkpoint.pt",
                                 rl_mod.CHECKPOINT_FORMAT, "RAPTOR RL checkpoint")
    assert ck["epoch"] == 2 and ck["n_epochs"] == 3
    longer = rl_mod.train(policies(E, R, seeds=(99,))[0], env, queries, RLConfig(epochs=4, batch_size=128), ev,
                          RunOptions(seed=SEEDS[0], out_dir=tmp_path / "stacked" / f"seed{SEEDS[0]}", progress=False,
                                     evaluate_fn=evaluate))
    assert [h["epoch"] for h in longer.history] == [0, 1, 2, 3]


def test_seeds_at_different_epochs_train_alone_and_early_stopping_shrinks_the_stack(synthetic, tmp_path):
    env, q, E, R = synthetic
    queries = q["train"][:300]
    ev = EvalConfig(valid_every=1, patience=1)
    scores = {SEEDS[0]: [0.5, 0.4, 0.3, 0.2], SEEDS[1]: [0.1, 0.2, 0.3, 0.4], SEEDS[2]: [0.1, 0.2, 0.3, 0.4]}

    def evaluate_for(seed):
        calls = iter(scores[seed])
        return lambda p: {"mrr": next(calls)}

    rl = RLConfig(epochs=4, batch_size=128)
    runs = [RunOptions(seed=s, out_dir=tmp_path / f"seed{s}", progress=False, evaluate_fn=evaluate_for(s),
                       resume=False) for s in SEEDS]
    res = train_seeds(policies(E, R), env, queries, rl, ev, runs)
    assert [len(r.history) for r in res] == [2, 4, 4]  # seed 3 stopped after its second round
    assert res[0].stopped_early and not res[1].stopped_early
    assert [h["stacked_seeds"] for h in res[1].history] == [3, 3, 2, 2] and res[1].stacked_seeds == 3
    # the seeds that went on trained as alone
    p = policies(E, R, seeds=(SEEDS[1],))[0]
    alone = rl_mod.train(p, env, queries, rl, EvalConfig(valid_every=1),
                         RunOptions(seed=SEEDS[1], progress=False, resume=False))
    for a, b in zip(res[1].history, alone.history):
        assert a["reward"] == pytest.approx(b["reward"], rel=1e-4)

    # seeds resumed at different epochs: each trains alone, from its own checkpoint
    rl6 = RLConfig(epochs=6, batch_size=128)
    ev0 = EvalConfig(valid_every=100)
    first = [RunOptions(seed=s, out_dir=tmp_path / f"b{s}", progress=False, resume=False, epochs=e)
             for s, e in zip(SEEDS[:2], (1, 2))]
    for pol, run in zip(policies(E, R, seeds=SEEDS[:2]), first):
        rl_mod.train(pol, env, queries, rl6, ev0, run)
    runs = [RunOptions(seed=s, out_dir=tmp_path / f"b{s}", progress=False, epochs=3) for s in SEEDS[:2]]
    res = train_seeds(policies(E, R, seeds=SEEDS[:2]), env, queries, rl6, ev0, runs)
    assert [[h["epoch"] for h in r.history] for r in res] == [[0, 1, 2], [0, 1, 2]]
    assert [r.stacked_seeds for r in res] == [1, 1]  # never set back: the seed ahead trained alone

    # seeds apart after stacked epochs (not the last epoch of a stacked run): alone, and the summary still
    # says how many seeds trained the epochs that were stacked
    stacked = [RunOptions(seed=s, out_dir=tmp_path / f"c{s}", progress=False, resume=False, epochs=2) for s in SEEDS[:2]]
    train_seeds(policies(E, R, seeds=SEEDS[:2]), env, queries, rl6, ev0, stacked)
    rl_mod.train(policies(E, R, seeds=SEEDS[:1])[0], env, queries, rl6, ev0,
                 RunOptions(seed=SEEDS[0], out_dir=tmp_path / f"c{SEEDS[0]}", progress=False, epochs=3))
    runs = [RunOptions(seed=s, out_dir=tmp_path / f"c{s}", progress=False, epochs=4) for s in SEEDS[:2]]
    res = train_seeds(policies(E, R, seeds=SEEDS[:2]), env, queries, rl6, ev0, runs)
    assert [[h.get("stacked_seeds", 1) for h in r.history] for r in res] == [[2, 2, 1, 1], [2, 2, 1, 1]]
    assert [r.stacked_seeds for r in res] == [2, 2]


def test_train_seeds_refuses_runs_that_cannot_share_a_step(synthetic):
    env, q, E, R = synthetic
    pols = policies(E, R, seeds=(1, 2))
    with pytest.raises(ValueError, match="differ in epochs, device, precision"):
        train_seeds(pols, env, q["train"][:10], RLConfig(), EvalConfig(),
                    [RunOptions(seed=1, epochs=1), RunOptions(seed=2, epochs=2)])
    with pytest.raises(ValueError, match="repeated seeds"):
        train_seeds(pols, env, q["train"][:10], RLConfig(), EvalConfig(), [RunOptions(seed=1), RunOptions(seed=1)])
    with pytest.raises(ValueError, match="differ in shape"):
        StackedPolicy([pols[0], Policy(E, R, ModelConfig(entity_dim=8, relation_dim=16, time_dim=4, step_dim=4,
                                                               mlp_hidden_dim=24), 3)])
