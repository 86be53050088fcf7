"""Actor-critic training: loss definition, reproducibility, resume, and learning a planted pattern."""

from __future__ import annotations

import json

import numpy as np
import pytest

from raptor.runs.rundir import RunOptions
import torch

from helpers import synthetic_env

from raptor.agents.beam import beam_search
from raptor.config import EvalConfig, ModelConfig, RLConfig
from raptor.agents.policy import Policy
from raptor.agents.base import load_model
from raptor.agents.actor_critic.rl import actor_critic_loss, train
from raptor.agents.rollout import Rollout, rollout
from raptor.data.synthetic import SyntheticSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")


SMALL = ModelConfig(entity_dim=32, relation_dim=32, time_dim=8, step_dim=8, mlp_hidden_dim=64)


def simple_mrr(res, queries, num_entities):
    """Raw MRR from beam candidates (unreached gold: mean rank among the unreached)."""
    gold = queries[:, 2]
    hit = res.cand_entity == gold[:, None]
    gs = np.where(hit.any(1), res.cand_score[np.arange(len(queries)), hit.argmax(1)], -np.inf)
    n_reached = (res.cand_entity >= 0).sum(1)
    greater = (res.cand_score > gs[:, None]).sum(1)
    rank = np.where(np.isfinite(gs), 1 + greater, n_reached + 1 + (num_entities - n_reached - 1) / 2)
    return float(np.mean(1.0 / rank))


@pytest.fixture(scope="module")
def synthetic():
    return synthetic_env(max_actions=50)[:4]


def test_actor_critic_loss_matches_appendix_c():
    B, K = 2, 3
    logp = torch.tensor([[-1.0, -0.5, -0.2], [-2.0, -0.1, -0.3]], requires_grad=True)
    ent = torch.tensor([[1.0, 0.5, 0.2], [0.3, 0.2, 0.1]], requires_grad=True)
    val = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], requires_grad=True)
    reward = torch.tensor([1.0, 0.0])
    ro = Rollout(logp, ent, val, None, reward)
    gamma, beta = 0.9, 0.05
    loss, parts = actor_critic_loss(ro, gamma, beta)
    g = torch.stack([reward * gamma ** (K - 1 - k) for k in range(K)], 1)  # g_k = gamma^(K-1-k) R
    adv = g - val.detach()
    want = (-(logp * adv).sum(1) - beta * ent.sum(1) + ((val - g) ** 2).sum(1)).mean()
    assert float(loss.detach()) == pytest.approx(float(want.detach()))
    assert parts["reward"] == 0.5
    loss.backward()
    # actor gradient uses the detached advantage; critic gradient is 2 (V - g) / B
    torch.testing.assert_close(logp.grad, -adv / B)
    torch.testing.assert_close(val.grad, 2 * (val.detach() - g) / B)
    torch.testing.assert_close(ent.grad, torch.full_like(ent, -beta / B))


def test_rollout_is_reproducible_and_rewards_are_terminal(synthetic):
    env, q, E, R = synthetic
    torch.manual_seed(0)
    pol = Policy(E, R, SMALL, 3)
    a = rollout(pol, env, q["train"][:64], torch.Generator().manual_seed(7))
    b = rollout(pol, env, q["train"][:64], torch.Generator().manual_seed(7))
    assert np.array_equal(a.final.path_entity, b.final.path_entity)
    torch.testing.assert_close(a.log_prob, b.log_prob)
    assert a.log_prob.shape == (64, 3) and torch.all(a.log_prob <= 0)
    assert torch.equal(a.reward, torch.from_numpy((a.final.entity == q["train"][:64, 2]).astype(np.float32)))


def test_resume_gives_the_same_run(synthetic, tmp_path):
    env, q, E, R = synthetic
    rl = RLConfig(epochs=3, batch_size=256)
    ev = EvalConfig(valid_every=2, beam_size=5)
    evaluate = lambda p: {"mrr": simple_mrr(beam_search(p, env, q["valid"][:50], ev), q["valid"][:50], E)}

    torch.manual_seed(0)
    full = train(Policy(E, R, SMALL, 3), env, q["train"], rl, ev, RunOptions(seed=3, out_dir=tmp_path / "a", evaluate_fn=evaluate, progress=False, resume=False))

    class Interrupt(Exception):
        pass

    def stop_after_first(epoch, metrics):
        if epoch == 0:
            raise Interrupt

    torch.manual_seed(0)
    with pytest.raises(Interrupt):
        train(Policy(E, R, SMALL, 3), env, q["train"], rl, ev, RunOptions(seed=3, out_dir=tmp_path / "b", evaluate_fn=evaluate, on_epoch_end=stop_after_first, progress=False, resume=False))
    torch.manual_seed(123)  # a different init: everything must come from the checkpoint
    seen = []
    resumed = train(Policy(E, R, SMALL, 3), env, q["train"], rl, ev, RunOptions(seed=3, out_dir=tmp_path / "b", evaluate_fn=evaluate, resume=True, on_epoch_end=lambda e, m: seen.append(e), progress=False))
    assert seen == [0, 1, 2]  # the restored epoch 0 is reported again (a new MLflow run gets the whole curve)
    for x, y in zip(full.history, resumed.history):
        for key in ("reward", "actor_loss", "critic_loss", "entropy", "val_mrr"):
            assert x[key] == y[key], key
    pa, _ = load_model(tmp_path / "a" / "final.pt")
    pb, meta = load_model(tmp_path / "b" / "final.pt")
    for (n, ta), tb in zip(pa.state_dict().items(), pb.state_dict().values()):
        assert torch.equal(ta, tb), n
    assert meta["seed"] == 3
    for name in ("checkpoint.pt", "best.pt", "final.pt", "history.json", "history.csv"):
        assert (tmp_path / "b" / name).exists()
    hist = json.loads((tmp_path / "b" / "history.json").read_text())
    assert [h["epoch"] for h in hist] == [0, 1, 2]
    assert hist[1]["val_mrr"] is not None and hist[0]["val_mrr"] is None  # validated after epoch 2 and last
    assert full.best_epoch in (1, 2)
    # entropy coefficient decays per epoch, not per batch
    assert [h["entropy_beta"] for h in hist] == pytest.approx([0.01, 0.009, 0.0081])


def test_training_learns_planted_pattern(synthetic):
    env, q, E, R = synthetic
    torch.manual_seed(0)
    pol = Policy(E, R, SMALL, 3)
    ev = EvalConfig(beam_size=20)
    random_mrr = simple_mrr(beam_search(pol, env, q["test"], ev), q["test"], E)
    res = train(pol, env, q["train"], RLConfig(epochs=30, batch_size=128), ev, RunOptions(seed=0, progress=False, resume=False))
    rewards = [h["reward"] for h in res.history]
    assert np.mean(rewards[-5:]) > 2.5 * np.mean(rewards[:3])
    trained_mrr = simple_mrr(beam_search(pol, env, q["test"], ev), q["test"], E)
    assert trained_mrr > random_mrr + 0.08, (random_mrr, trained_mrr)


def test_train_command_end_to_end(tmp_path, capsys):
    from raptor.cli import main
    from raptor.data.synthetic import write_raw

    raw = write_raw(tmp_path / "raw", SyntheticSpec())
    params = tmp_path / "p.yaml"
    params.write_text(
        "env: {max_actions: 30}\n"
        "model: {entity_dim: 16, relation_dim: 16, time_dim: 4, step_dim: 4, mlp_hidden_dim: 32}\n"
        "rl: {epochs: 3, batch_size: 256}\n"
        "eval: {valid_every: 2, beam_size: 10}\n"
        "train: {num_threads: 1}\n"
    )
    assert main(["ingest", "--raw", str(raw), "--out", str(tmp_path / "ing"), "--params", str(params)]) == 0
    assert main(["graph", "--data", str(tmp_path / "ing"), "--out", str(tmp_path / "g.npz")]) == 0
    args = ["train", "--data", str(tmp_path / "ing"), "--graph", str(tmp_path / "g.npz"), "--out",
            str(tmp_path / "run"), "--seed", "2", "--params", str(params), "--no-progress"]
    assert main(args + ["--epochs", "2"]) == 0
    first = json.loads((tmp_path / "run" / "rl" / "history.json").read_text())
    capsys.readouterr()
    assert main(args) == 0  # resumes from the checkpoint of the 2-epoch run
    hist = json.loads((tmp_path / "run" / "rl" / "history.json").read_text())
    assert [h["epoch"] for h in hist] == [0, 1, 2]
    assert hist[:2] == first  # continued, not trained again: the first two rows' timings are kept
    assert "3 RL epochs (RL " in (line := capsys.readouterr().out.splitlines()[1])
    assert "(continued after RL epoch 2)" in line
    assert main(args) == 0
    assert "(already trained: nothing to do)" in capsys.readouterr().out.splitlines()[1]
    assert hist[1]["val_mrr"] is not None and 0 < hist[2]["val_mrr"] <= 1
    policy, meta = load_model(tmp_path / "run" / "rl" / "best.pt")
    assert meta["seed"] == 2 and meta["variant"] == "pure_rl"
    # RAPTOR needs the label tables: a clear one-line error, not a traceback.
    capsys.readouterr()
    assert main(args[:-1] + ["--variant", "raptor", "--fresh", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == "raptor train: error: variant 'raptor' pretrains on the reachability labels: give --labels"


def test_precision_auto_is_bfloat16_only_where_the_hardware_has_it():
    from raptor.common.runtime import native_bf16, resolve_precision

    avx2 = {"fpu", "sse4_2", "avx2", "fma"}
    spr = avx2 | {"avx512f", "avx512_bf16", "amx_bf16"}
    assert not native_bf16("cpu", avx2) and native_bf16("cpu", spr)
    assert resolve_precision("auto", "cpu", avx2) == "float32"
    assert resolve_precision("auto", "cpu", spr) == "bfloat16"
    assert resolve_precision("float32", "cpu", spr) == "float32"
    with pytest.warns(RuntimeWarning, match="emulated"):
        assert resolve_precision("bfloat16", "cpu", avx2) == "bfloat16"  # kept: the user asked for it


@pytest.mark.parametrize("patience, stop_epoch", [(1, 2), (2, 5), (0, 7)])
def test_early_stopping_counts_validation_rounds_and_survives_resume(synthetic, tmp_path, patience, stop_epoch):
    """Validation MRR 0.1, 0.2, 0.15, 0.25, 0.2, 0.2, 0.3, 0.1 (one round per epoch): patience 1 stops
    after the first round without a better MRR (epoch 2), patience 2 after two in a row (epoch 5),
    0 trains the whole budget. A stopped run, resumed, trains nothing more."""
    env, q, E, R = synthetic
    mrrs = iter([0.1, 0.2, 0.15, 0.25, 0.2, 0.2, 0.3, 0.1])
    rl = RLConfig(epochs=8, batch_size=512)
    ev = EvalConfig(valid_every=1, beam_size=5, patience=patience)
    torch.manual_seed(0)
    res = train(Policy(E, R, SMALL, 3), env, q["train"][:512], rl, ev, RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: {"mrr": next(mrrs)}, progress=False, resume=False))
    assert [h["epoch"] for h in res.history] == list(range(stop_epoch + 1))
    assert res.stopped_early == (patience > 0)
    assert res.best_mrr == max(h["val_mrr"] for h in res.history)
    _, meta = load_model(tmp_path / "final.pt")
    assert meta["epoch"] == stop_epoch
    assert [h.get("early_stop", False) for h in res.history][-1] == (patience > 0)
    seen = []
    again = train(Policy(E, R, SMALL, 3), env, q["train"][:512], rl, ev, RunOptions(seed=0, out_dir=tmp_path, evaluate_fn=lambda p: pytest.fail("a stopped run must not validate again"), resume=True, on_epoch_end=lambda e, m: seen.append(m.get("replayed", False)), progress=False))
    assert len(again.history) == stop_epoch + 1 and all(seen)  # only replayed epochs
    assert again.stopped_early == (patience > 0) and again.best_mrr == res.best_mrr


# ------------------------------------------------------------------------------------------------
# Issue 39: what TITer's code does and the paper does not state (rl.weight_decay, rl.clip_gradient,
# rl.entropy_decay_per); the defaults keep today's training bit for bit.
# ------------------------------------------------------------------------------------------------


def _todays_train_epoch(policy, optimizer, env, queries, epoch, seed, rl, precision="float32", device="cpu"):
    """``raptor.agents.actor_critic.rl.train_epoch`` before issue 39's keys (verbatim, without the progress bar)."""
    import math

    from raptor.agents.actor_critic.rl import actor_critic_loss as loss_of
    from raptor.common.runtime import autocast, epoch_seed

    policy.train()
    beta = rl.entropy_beta0 * rl.entropy_decay ** epoch
    order = np.random.default_rng(epoch_seed(seed, epoch, 0)).permutation(len(queries))
    gen = torch.Generator(device=device).manual_seed(epoch_seed(seed, epoch, 1))
    sums, n_total, bs = {}, 0, rl.batch_size
    for i in range(math.ceil(len(queries) / bs)):
        batch = queries[order[i * bs:(i + 1) * bs]]
        with autocast(precision, device):
            ro = rollout(policy, env, batch, gen, device)
        loss, parts = loss_of(ro, rl.gamma, beta)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        n = len(batch)
        n_total += n
        for key, val in parts.items():
            sums[key] = sums.get(key, 0.0) + val * n
    out = {key: val / max(n_total, 1) for key, val in sums.items()}
    out["entropy_beta"] = beta
    return out


def test_defaults_train_exactly_as_before_the_titer_keys(synthetic):
    """Two epochs with the RL section unset, with the new keys written out at today's values, and with
    the training epoch as it was before them (and Adam without weight decay): the same losses and the
    same weights, bit for bit."""
    from raptor.config import params_from_dict
    from raptor.agents.actor_critic.rl import make_optimizer, train_epoch
    from raptor.common.runtime import adam

    env, q, E, R = synthetic
    unset = params_from_dict({"rl": {"batch_size": 256}}).rl
    explicit = params_from_dict({"rl": {"batch_size": 256, "weight_decay": 0.0, "clip_gradient": 0,
                                        "entropy_decay_per": "epoch"}}).rl
    runs = []
    for rl, old in ((unset, False), (explicit, False), (unset, True)):
        torch.manual_seed(0)
        pol = Policy(E, R, SMALL, 3)
        opt = adam(pol.parameters(), rl.learning_rate) if old else make_optimizer(pol, rl)
        hist = [_todays_train_epoch(pol, opt, env, q["train"], e, 5, rl) if old
                else train_epoch(pol, opt, env, q["train"], e, rl, RunOptions(seed=5, progress=False)) for e in range(2)]
        runs.append((hist, [t.detach().clone() for t in pol.state_dict().values()]))
    for hist, weights in runs[1:]:
        assert hist == runs[0][0]  # every float of the epoch means, including entropy_beta
        assert all(torch.equal(a, b) for a, b in zip(weights, runs[0][1]))
    assert "grad_norm" not in runs[0][0][0]  # nothing new in the history without clipping


def test_entropy_coefficient_counts_epochs_or_batches():
    from raptor.agents.actor_critic.rl import entropy_coefficient

    per_epoch, per_batch = RLConfig(), RLConfig(entropy_decay_per="batch")
    assert entropy_coefficient(per_epoch, 2, 3, 10) == 0.01 * 0.9 ** 2  # constant within the epoch
    assert entropy_coefficient(per_epoch, 2, 0, 10) == entropy_coefficient(per_epoch, 2, 9, 10)
    assert entropy_coefficient(per_batch, 0, 0, 10) == 0.01
    assert entropy_coefficient(per_batch, 2, 3, 10) == pytest.approx(0.01 * 0.9 ** 23)  # 2 * 10 + 3 batches before


def test_entropy_decay_per_batch_in_training(synthetic, monkeypatch):
    """The beta each batch's loss gets: beta0 decay^(epoch x batches + batch) per batch; the history's
    entropy_beta is the epoch's first batch's."""
    import raptor.agents.actor_critic.rl as rl_module
    from raptor.agents.actor_critic.rl import make_optimizer, train_epoch

    env, q, E, R = synthetic
    seen = []
    real = rl_module.actor_critic_loss
    monkeypatch.setattr(rl_module, "actor_critic_loss", lambda ro, g, beta: (seen.append(beta), real(ro, g, beta))[1])
    queries = q["train"][:700]  # 3 batches of 256 (the last one partial)
    for per, want in (("epoch", [0.01] * 3 + [0.009] * 3),
                      ("batch", [0.01 * 0.9 ** n for n in range(6)])):
        seen.clear()
        rl = RLConfig(batch_size=256, entropy_decay_per=per)
        torch.manual_seed(0)
        pol = Policy(E, R, SMALL, 3)
        opt = make_optimizer(pol, rl)
        out = [train_epoch(pol, opt, env, queries, e, rl, RunOptions(seed=0, progress=False)) for e in range(2)]
        assert seen == pytest.approx(want, rel=1e-12)
        assert [o["entropy_beta"] for o in out] == pytest.approx([want[0], want[3]], rel=1e-12)


def _step_spy(optimizer, record):
    """Record the parameters' gradients at each ``optimizer.step`` (after any clipping)."""
    step = optimizer.step

    def spy(*args, **kwargs):
        record.append([p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]])
        return step(*args, **kwargs)

    optimizer.step = spy


def test_clip_gradient_scales_the_gradient_to_the_norm_cap(synthetic):
    """One batch: without clipping Adam gets the raw gradient g; with ``clip_gradient: c`` below its
    norm it gets g c / (|g| + 1e-6) (torch's clip_grad_norm_), whose norm is c; the history keeps |g|.
    A cap above the norm leaves the gradient as it is."""
    from raptor.agents.actor_critic.rl import make_optimizer, train_epoch

    env, q, E, R = synthetic
    queries = q["train"][:256]
    grads, outs = {}, {}
    for clip in (0.0, 0.05, 1e6):
        rl = RLConfig(batch_size=256, clip_gradient=clip)
        torch.manual_seed(0)
        pol = Policy(E, R, SMALL, 3)
        opt = make_optimizer(pol, rl)
        grads[clip] = []
        _step_spy(opt, grads[clip])
        outs[clip] = train_epoch(pol, opt, env, queries, 0, rl, RunOptions(seed=0, progress=False))
    raw = grads[0.0][0]
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in raw])))
    assert norm > 0.05  # the cap binds
    assert outs[0.05]["grad_norm"] == pytest.approx(norm, rel=1e-5) and "grad_norm" not in outs[0.0]
    clipped = grads[0.05][0]
    clipped_norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in clipped])))
    assert clipped_norm == pytest.approx(0.05, rel=1e-4)
    for g, c in zip(raw, clipped):
        torch.testing.assert_close(c, g * (0.05 / (norm + 1e-6)), rtol=1e-4, atol=1e-9)
    for g, c in zip(raw, grads[1e6][0]):
        assert torch.equal(g, c)
    assert outs[1e6]["actor_loss"] == outs[0.0]["actor_loss"]


def test_weight_decay_is_torchs_adam_l2_one_step_by_hand():
    """``rl.weight_decay: wd`` is torch's Adam weight decay (TITer's): L2 added to the gradient,
    g' = g + wd p, so Adam's first step is p - lr g' / (|g'| + eps). A parameter without gradient
    (an embedding row no query touched) then moves by lr wd|p| / (wd|p| + eps) towards 0, about lr
    for |p| >> eps / wd; without weight decay it stays."""
    from raptor.agents.actor_critic.rl import make_optimizer

    lr, wd, eps = 1e-3, 1e-5, 1e-8
    for decay in (0.0, wd):
        torch.manual_seed(0)
        pol = Policy(9, 2, SMALL, 3)
        opt = make_optimizer(pol, RLConfig(learning_rate=lr, weight_decay=decay))
        assert opt.param_groups[0]["weight_decay"] == decay and opt.param_groups[0]["lr"] == lr
        before = [p.detach().clone().double() for p in pol.parameters()]
        gen = torch.Generator().manual_seed(1)
        for p in pol.parameters():
            g = torch.randn(p.shape, generator=gen) * 1e-3
            g[..., ::2] = 0.0  # half the entries without gradient
            p.grad = g
        grads = [p.grad.double() for p in pol.parameters()]
        opt.step()
        for p0, g, p in zip(before, grads, pol.parameters()):
            g1 = g + decay * p0
            want = p0 - lr * g1 / (g1.abs() + eps)
            torch.testing.assert_close(p.detach().double(), want, rtol=0, atol=2e-7)
        i = [name for name, _ in pol.named_parameters()].index("entity_emb.weight")
        emb = pol.entity_emb.weight.detach().double()
        moved = (emb - before[i])[:, ::2]
        if decay:  # xavier entries |p| ~ 0.1: wd|p| = 1e-6 >> eps, so each moves by ~0.99 lr towards 0
            p0 = before[i][:, ::2]
            torch.testing.assert_close(moved, -lr * wd * p0 / (wd * p0.abs() + eps), rtol=0, atol=2e-7)
            assert bool(torch.all(moved[p0 != 0] * p0[p0 != 0] < 0))
        else:
            assert bool(torch.all(moved == 0))
