import math
from dataclasses import replace

import numpy as np
import pytest

from raptor.runs.rundir import RunOptions
import torch

from raptor.config import EnvConfig, LabelingConfig, ModelConfig, PretrainConfig
from raptor.data.dataset import with_inverse_queries
from raptor.mdp.device_env import DeviceEnv, on_device
from raptor.mdp.env import TemporalEnv
from raptor.data.graph import TemporalGraph
from raptor.labeling.compute import compute_labels, label_pairs
from raptor.labeling.store import PartitionedLabels, merge_label_parts, write_label_part
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.pretrain import epoch_blocks, pretrain, pretrain_batch, reachability_bce
from raptor.agents.base import load_model
from raptor.agents.rollout import rollout
from raptor.data.synthetic import SyntheticSpec, generate

SMALL = ModelConfig(entity_dim=32, relation_dim=32, time_dim=8, step_dim=8, mlp_hidden_dim=64)


def test_bce_hand_computed():
    logits = torch.tensor([[0.0, 2.0, -1.0, float("-inf")], [1.0, float("-inf"), float("-inf"), float("-inf")]])
    labels = torch.tensor([[1, 0, 0, 1], [1, 0, 0, 0]])
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    got = reachability_bce(logits, labels, mask)

    def bce(z, y):
        p = 1 / (1 + math.exp(-z))
        return -(y * math.log(p) + (1 - y) * math.log(1 - p))

    row0 = (bce(0.0, 1) + bce(2.0, 0) + bce(-1.0, 0)) / 3  # padding slot ignored, mean over |A_s| = 3
    row1 = bce(1.0, 1)
    assert got.tolist() == pytest.approx([row0, row1], rel=1e-6)


@pytest.fixture(scope="module")
def synthetic():
    spec = SyntheticSpec(seed=1)
    splits = generate(spec)
    graph = TemporalGraph.from_quadruples(np.concatenate(list(splits.values())), spec.num_entities, spec.num_relations)
    env = TemporalEnv(graph, EnvConfig())
    train = with_inverse_queries(splits["train"], spec.num_relations)
    targets, times = label_pairs(splits["train"])
    table = compute_labels(graph, targets, times, max_path_length=3, config=LabelingConfig(max_in_edges=200))
    return spec, env, train, table


def test_batch_loss_is_sum_over_steps_of_mean_bce(synthetic, monkeypatch):
    from raptor.agents.actor_critic import pretrain as pretrain_mod

    spec, env, train, table = synthetic
    torch.manual_seed(0)
    policy = Policy(spec.num_entities, spec.num_relations, SMALL)
    per_step = []  # each step's per-row BCE ([B]; the BCE itself: test_bce_hand_computed)

    def recorded(logits, labels, mask):
        out = reachability_bce(logits, labels, mask)
        per_step.append(out.detach())
        return out

    monkeypatch.setattr(pretrain_mod, "reachability_bce", recorded)
    pb = pretrain_batch(policy, env, table, train[:64], torch.Generator().manual_seed(0))
    assert len(per_step) == env.K == 3 and all(b.shape == (64,) for b in per_step)
    torch.testing.assert_close(pb.loss.detach().double(), sum(b.double().mean() for b in per_step))
    assert pb.stats["bce"] == pytest.approx(float(pb.loss.detach()))
    # each a mean BCE of order log(2) at initialisation
    assert all(0.3 < float(b.mean()) < 3.0 for b in per_step)
    assert 0.0 < pb.stats["label_positive_rate"] < 1.0
    pb.loss.backward()
    assert policy.entity_emb.weight.grad is not None
    assert all(p.grad is None or torch.all(p.grad == 0) for p in policy.critic_mlp.parameters())


def _mean_reward(policy, env, queries, seed=0, repeats=4):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        return float(np.mean([rollout(policy, env, queries, gen).reward.mean().item() for _ in range(repeats)]))


def test_pretraining_raises_the_reward_at_the_start_of_rl(synthetic, tmp_path):
    spec, env, train, table = synthetic
    torch.manual_seed(0)
    fresh = Policy(spec.num_entities, spec.num_relations, SMALL)
    torch.manual_seed(0)
    pre = Policy(spec.num_entities, spec.num_relations, SMALL)
    history = pretrain(pre, env, table, train, PretrainConfig(epochs=12, batch_size=128, learning_rate=1e-2), RunOptions(seed=0, out_dir=tmp_path, progress=False, resume=False))
    assert history[-1]["bce"] < history[0]["bce"]
    assert history[-1]["label_accuracy"] > history[0]["label_accuracy"] + 0.1
    r_fresh = _mean_reward(fresh, env, train)
    r_pre = _mean_reward(pre, env, train)
    print(f"reward fresh {r_fresh:.4f} pretrained {r_pre:.4f}")
    assert r_pre > 1.3 * r_fresh, (r_fresh, r_pre)
    # The saved weights are what fine-tuning loads.
    loaded, meta = load_model(tmp_path / "pretrained.pt")
    assert meta["phase"] == "pretrain"
    for a, b in zip(loaded.parameters(), pre.parameters()):
        torch.testing.assert_close(a, b)


def test_resume_repeats_the_uninterrupted_run(synthetic, tmp_path):
    spec, env, train, table = synthetic
    cfg = PretrainConfig(epochs=2, batch_size=256)
    sub = train[:512]
    torch.manual_seed(0)
    a = Policy(spec.num_entities, spec.num_relations, SMALL)
    pretrain(a, env, table, sub, cfg, RunOptions(seed=3, out_dir=tmp_path / "a", progress=False, resume=False))
    torch.manual_seed(0)
    b = Policy(spec.num_entities, spec.num_relations, SMALL)
    pretrain(b, env, table, sub, cfg, RunOptions(seed=3, out_dir=tmp_path / "b", epochs=1, progress=False, resume=False))
    torch.manual_seed(1)  # a fresh process would build different initial weights: the checkpoint wins
    c = Policy(spec.num_entities, spec.num_relations, SMALL)
    reported = []
    hist = pretrain(c, env, table, sub, cfg, RunOptions(seed=3, out_dir=tmp_path / "b", resume=True, progress=False, on_epoch_end=lambda e, m: reported.append(e)))
    assert [h["epoch"] for h in hist] == [0, 1]
    assert reported == [0, 1]  # the restored epoch is reported again, then the new one
    for pa, pc in zip(a.parameters(), c.parameters()):
        torch.testing.assert_close(pa, pc)


def test_epoch_blocks_in_memory_keep_the_global_shuffle(synthetic):
    _, _, train, table = synthetic
    blocks = epoch_blocks(train, table, np.random.default_rng(5))
    assert len(blocks) == 1 and blocks[0][0] is None
    np.testing.assert_array_equal(blocks[0][1], np.random.default_rng(5).permutation(len(train)))


def test_pretraining_one_label_part_at_a_time(synthetic, tmp_path):
    """labels_in_memory: part reads a partitioned table part by part: every query once per epoch,
    in the block of the part holding its target, with the same labels as the whole table."""
    spec, env, train, table = synthetic
    graph = env.graph
    targets, times = label_pairs(generate(spec)["train"])
    cfg = LabelingConfig(max_in_edges=200, workers=1, partitions=3)
    staging = tmp_path / "labels.parts"
    for i in range(3):
        write_label_part(staging, i, graph, (targets, times), max_path_length=3, config=cfg)
    merge_label_parts(staging, tmp_path / "labels", 3)
    parts = PartitionedLabels(tmp_path / "labels")
    assert parts.num_parts == 3 and parts.max_path_length == 3
    blocks = epoch_blocks(train, parts, np.random.default_rng(0))
    assert sorted(np.concatenate([o for _, o in blocks]).tolist()) == list(range(len(train)))
    assert sorted(p for p, _ in blocks) == [0, 1, 2]
    for part, order in blocks:
        lo, hi = parts.target_ranges[part]
        assert np.all((train[order, 2] >= lo) & (train[order, 2] < hi))
        sub = train[order[:64]]
        torch.manual_seed(0)
        policy = Policy(spec.num_entities, spec.num_relations, SMALL)
        a = pretrain_batch(policy, env, parts.load(part), sub, torch.Generator().manual_seed(0))
        b = pretrain_batch(policy, env, table, sub, torch.Generator().manual_seed(0))
        assert float(a.loss.detach()) == float(b.loss.detach()) and a.stats == b.stats
        c = pretrain_batch(policy, on_device(env, "cpu", "torch"), parts.load(part), sub,
                           torch.Generator().manual_seed(0))
        assert float(c.loss.detach()) == float(b.loss.detach()) and c.stats == b.stats  # the part's device copy
    pcfg = PretrainConfig(epochs=1, batch_size=128, labels_in_memory="part")
    hist = pretrain(Policy(spec.num_entities, spec.num_relations, SMALL), env, parts, train[:600], pcfg,
                    RunOptions(progress=False, resume=False))
    assert len(hist) == 1 and math.isfinite(hist[0]["bce"])

    # seeds asked to pretrain at once on a partitioned table train one after another, each as alone
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_seeds

    def fresh(seed):
        torch.manual_seed(seed)
        return Policy(spec.num_entities, spec.num_relations, SMALL)

    runs = [RunOptions(seed=s, progress=False, resume=False) for s in (0, 1)]
    together = pretrain_seeds([fresh(0), fresh(1)], env, parts, train[:600], pcfg, runs)
    alone = [pretrain(fresh(s), env, parts, train[:600], pcfg, r) for s, r in zip((0, 1), runs)]
    drop = lambda h: [{k: v for k, v in row.items() if k != "seconds"} for row in h]  # noqa: E731
    assert [drop(h) for h in together] == [drop(h) for h in alone]
    assert drop(together[0]) != drop(together[1])  # two seeds, two walks
    with pytest.raises(ValueError, match="not partitioned.*labeling.partitions > 1"):
        PartitionedLabels(tmp_path / "labels" / "part-00000")


@pytest.mark.parametrize("cfg", [PretrainConfig(), PretrainConfig(no_reachable="stop"),
                                 PretrainConfig(stop_label="as_candidate", on_answer="stop_only")],
                         ids=["default", "no_reachable=stop", "stop_label=as_candidate,on_answer=stop_only"])
def test_a_batch_on_the_device_env_is_the_host_batch(synthetic, cfg):
    """The device environment with labels looked up on the device walks the same episodes (same
    candidates, labels and draws) as the host environment: on the CPU the same loss, statistics and
    gradients bit for bit (the same float ops on the same values in the same order)."""
    spec, env, train, table = synthetic
    results = []
    for backend in ("numpy", "torch"):
        torch.manual_seed(0)
        policy = Policy(spec.num_entities, spec.num_relations, SMALL)
        walk_env = on_device(env, "cpu", backend)
        assert isinstance(walk_env, DeviceEnv) == (backend == "torch")
        pb = pretrain_batch(policy, walk_env, table, train[:128], torch.Generator().manual_seed(0), cfg=cfg)
        pb.loss.backward()
        results.append((float(pb.loss.detach()), pb.stats, [p.grad.clone() for p in policy.parameters()
                                                             if p.grad is not None]))
    (la, sa, ga), (lb, sb, gb) = results
    assert la == lb and sa == sb
    assert 0 < sa["label_positive_rate"] < 1 and 0 < sa["walk_reaches_answer"] < 1
    assert len(ga) == len(gb)
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_a_pair_not_in_the_table_is_refused_on_both_backends(synthetic):
    spec, env, train, table = synthetic
    bad = train[:8].copy()
    bad[3, 3] = int(env.graph.max_time) + 1  # a (target, time) no training query has
    for backend in ("numpy", "torch"):
        policy = Policy(spec.num_entities, spec.num_relations, SMALL)
        pair = f"pair \\(target={bad[3, 2]}, query_time={bad[3, 3]}\\) is not in the label table"
        with pytest.raises(ValueError, match=pair):
            pretrain_batch(policy, on_device(env, "cpu", backend), table, bad, torch.Generator().manual_seed(0))


def test_pretraining_on_both_backends_gives_the_same_history(synthetic):
    """``env_backend: torch`` (the device environment and device labels, here on the CPU) pretrains
    exactly as the host: the same history (but the time taken) and the same weights after 2 epochs."""
    spec, env, train, table = synthetic
    cfg = PretrainConfig(epochs=2, batch_size=128)
    runs = []
    for backend in ("numpy", "torch"):
        torch.manual_seed(0)
        policy = Policy(spec.num_entities, spec.num_relations, SMALL)
        hist = pretrain(policy, env, table, train[:384], cfg,
                        RunOptions(seed=4, progress=False, resume=False, env_backend=backend))
        runs.append(([{k: v for k, v in row.items() if k != "seconds"} for row in hist], list(policy.parameters())))
    (ha, pa), (hb, pb) = runs
    assert len(ha) == 2 and ha == hb
    for x, y in zip(pa, pb):
        torch.testing.assert_close(x, y, rtol=0, atol=0)


# ------------------------------------------------------------------------------------------------
# Several seeds at once (raptor/agents/actor_critic/pretrain_seeds.py)
# ------------------------------------------------------------------------------------------------

STACK_SEEDS = (3, 5)
#: float32 sums in another order: what "the same up to rounding" allows
TOL = dict(rtol=2e-4, atol=2e-5)
#: weights after several Adam steps (a gradient near 0 whose sign rounding flips moves by 2 lr)
AFTER_ADAM = dict(rtol=1e-3, atol=2e-3)


def _policies(spec, seeds=STACK_SEEDS):
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(Policy(spec.num_entities, spec.num_relations, SMALL))
    return out


def _choices(monkeypatch, module):
    """Record every step's sampled slots (``advance``'s ``choice``) of the batches run by ``module``."""
    taken = []
    real = module.advance

    def advance(policy, env, state, cands, choice, hc, need_path=True):
        taken.append(choice.clone())
        return real(policy, env, state, cands, choice, hc, need_path)

    monkeypatch.setattr(module, "advance", advance)
    return taken


@pytest.mark.parametrize("backend,no_reachable", [("numpy", "policy"), ("torch", "policy"), ("numpy", "stop")])
def test_a_stacked_batch_has_each_seeds_walks_and_gradients(synthetic, monkeypatch, backend, no_reachable):
    """One stacked batch of S seeds: each seed walks exactly its walk alone (same draws), with its
    statistics, and its slice of the gradient is its gradient alone, within rounding."""
    from raptor.agents.actor_critic import pretrain as pretrain_mod, pretrain_seeds as seeds_mod
    from raptor.agents.actor_critic.seeds import StackedPolicy

    spec, env, train, table = synthetic
    env = on_device(env, "cpu", backend)
    pols = _policies(spec)
    for p in pols:  # perturb every parameter (zeros and ones would hide a wrong slice)
        with torch.no_grad():
            for t in p.parameters():
                t.add_(0.05 * torch.randn_like(t))
    stack = StackedPolicy(pols)
    B, S = 96, len(STACK_SEEDS)
    batches = [train[i * B:(i + 1) * B] for i in range(S)]  # a different batch per seed
    taken = _choices(monkeypatch, pretrain_mod)  # both walk through pretrain.pretrain_terms
    pb = seeds_mod.pretrain_batch_seeds(stack, env, table, np.concatenate(batches),
                                        [torch.Generator().manual_seed(100 + s) for s in STACK_SEEDS],
                                        cfg=PretrainConfig(no_reachable=no_reachable))
    stacked_choices = list(taken)
    assert len(stacked_choices) == env.K
    pb.loss.backward()
    alone_choices = _choices(monkeypatch, pretrain_mod)
    for i, (p, seed) in enumerate(zip(pols, STACK_SEEDS)):
        alone_choices.clear()
        one = pretrain_batch(p, env, table, batches[i], torch.Generator().manual_seed(100 + seed),
                             cfg=PretrainConfig(no_reachable=no_reachable))
        assert len(alone_choices) == env.K
        for k in range(env.K):  # the same walk, step by step
            assert torch.equal(stacked_choices[k][i * B:(i + 1) * B], alone_choices[k]), (seed, k)
        torch.testing.assert_close(pb.seed_loss[i], one.loss.detach(), **TOL)
        for key, value in one.stats.items():  # counts of the same walks and labels: equal but accuracy's z > 0
            assert pb.stats[i][key] == pytest.approx(value, rel=1e-5, abs=1e-6), (seed, key)
        assert pb.stats[i]["walk_reaches_answer"] == one.stats["walk_reaches_answer"]
        assert pb.stats[i]["label_positive_rate"] == one.stats["label_positive_rate"]
        one.loss.backward()
        for name, param in zip(stack.names, p.parameters()):
            g = stack.p(name).grad
            assert (g is None) == (param.grad is None), name  # the critic gets none, as alone
            if g is not None:
                torch.testing.assert_close(g[i], param.grad, **TOL, msg=lambda m: f"{name}: {m}")


def _stack_runs(root, **kw):
    return [RunOptions(seed=s, out_dir=root / f"seed{s}", progress=False, **kw) for s in STACK_SEEDS]


def _no_seconds(history):
    return [{k: v for k, v in row.items() if k not in ("seconds", "stacked_seeds", "resumed")} for row in history]


def test_pretrain_seeds_trains_each_seed_as_alone_and_resumes(synthetic, tmp_path):
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_seeds
    from raptor.runs import checkpoints
    from raptor.agents.actor_critic.pretrain import PRETRAIN_CHECKPOINT_FORMAT

    spec, env, train, table = synthetic
    sub = train[:384]
    cfg = PretrainConfig(epochs=2, batch_size=128)
    stacked = pretrain_seeds(_policies(spec), env, table, sub, cfg, _stack_runs(tmp_path / "stacked", resume=False),
                             snapshots=(1, 2))
    for i, seed in enumerate(STACK_SEEDS):
        p = _policies(spec, (seed,))[0]
        alone = pretrain(p, env, table, sub, cfg, RunOptions(seed=seed, progress=False, resume=False))
        assert [h["epoch"] for h in stacked[i]] == [0, 1]
        assert [h["stacked_seeds"] for h in stacked[i]] == [2, 2]
        for a, b in zip(_no_seconds(stacked[i]), _no_seconds(alone)):
            assert a.keys() == b.keys()
            for key in a:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), (seed, a["epoch"], key)
        folder = tmp_path / "stacked" / f"seed{seed}"
        for name in ("checkpoint.pt", "pretrained.pt", "pretrained-e1.pt", "pretrained-e2.pt", "history.json"):
            assert (folder / name).exists(), name
        loaded, meta = load_model(folder / "pretrained.pt")
        assert meta["seed"] == seed and meta["phase"] == "pretrain"
        for (name, x), y in zip(loaded.state_dict().items(), p.state_dict().values()):
            torch.testing.assert_close(x, y, **AFTER_ADAM, msg=lambda m: f"{name}: {m}")

    # interrupted after epoch 0 (one seed's hook raises), then resumed stacked: the same run, bit for bit
    class Interrupt(Exception):
        pass

    def stop(epoch, row):
        if epoch == 0 and not row.get("replayed"):
            raise Interrupt

    runs = _stack_runs(tmp_path / "resumed", resume=False)
    runs[-1] = replace(runs[-1], on_epoch_end=stop)
    with pytest.raises(Interrupt):
        pretrain_seeds(_policies(spec), env, table, sub, cfg, runs, snapshots=(1, 2))
    replayed = []
    resumed = pretrain_seeds(_policies(spec, (0, 1)), env, table, sub, cfg,
                             _stack_runs(tmp_path / "resumed", on_epoch_end=lambda e, r: replayed.append((e, "replayed" in r))),
                             snapshots=(1, 2))
    assert sorted(replayed) == [(0, True)] * 2 + [(1, False)] * 2
    for i, seed in enumerate(STACK_SEEDS):
        assert _no_seconds(resumed[i]) == _no_seconds(stacked[i])
        assert [h["epoch"] for h in resumed[i] if h.get("resumed")] == [1]
        for name in ("pretrained.pt", "pretrained-e1.pt"):
            a, _ = load_model(tmp_path / "resumed" / f"seed{seed}" / name)
            b, _ = load_model(tmp_path / "stacked" / f"seed{seed}" / name)
            for x, y in zip(a.state_dict().values(), b.state_dict().values()):
                assert torch.equal(x, y), name

    # killed between the two seeds' checkpoint writes of the last epoch (the first seed's snapshot and checkpoint
    # written, the second's not): the first is set back to its previous checkpoint and both go on stacked, to the
    # same bits
    import os
    import shutil

    shutil.copytree(tmp_path / "stacked", tmp_path / "apart")
    first, second = (tmp_path / "apart" / f"seed{seed}" for seed in STACK_SEEDS)
    os.replace(checkpoints.previous(second / "checkpoint.pt"), second / "checkpoint.pt")
    for name in ("pretrained-e2.pt", "pretrained.pt"):
        (second / name).unlink()
    (first / "pretrained.pt").unlink()
    apart = pretrain_seeds(_policies(spec), env, table, sub, cfg, _stack_runs(tmp_path / "apart"), snapshots=(1, 2))
    for i, seed in enumerate(STACK_SEEDS):
        assert _no_seconds(apart[i]) == _no_seconds(stacked[i]) and [h["stacked_seeds"] for h in apart[i]] == [2, 2]
        for name in ("pretrained.pt", "pretrained-e2.pt"):
            a, _ = load_model(tmp_path / "apart" / f"seed{seed}" / name)
            b, _ = load_model(tmp_path / "stacked" / f"seed{seed}" / name)
            assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values())), name

    # a stacked run's checkpoint is a run alone's: it continues alone toward more epochs
    folder = tmp_path / "stacked" / f"seed{STACK_SEEDS[0]}"
    ck = checkpoints.load_latest(folder / "checkpoint.pt", PRETRAIN_CHECKPOINT_FORMAT, "RAPTOR pretraining checkpoint")
    assert ck["epoch"] == 1 and ck["n_epochs"] == 2
    longer = pretrain(_policies(spec, (99,))[0], env, table, sub, PretrainConfig(epochs=3, batch_size=128),
                      RunOptions(seed=STACK_SEEDS[0], out_dir=folder, progress=False))
    assert [h["epoch"] for h in longer] == [0, 1, 2]

    # and the other way: runs pretrained alone for 1 epoch continue stacked from their checkpoints
    for seed, p in zip(STACK_SEEDS, _policies(spec)):
        pretrain(p, env, table, sub, cfg, RunOptions(seed=seed, out_dir=tmp_path / "mixed" / f"seed{seed}", epochs=1,
                                                     progress=False, resume=False))
    mixed = pretrain_seeds(_policies(spec, (7, 8)), env, table, sub, cfg, _stack_runs(tmp_path / "mixed"))
    for i in range(len(STACK_SEEDS)):
        assert "stacked_seeds" not in mixed[i][0] and mixed[i][1]["stacked_seeds"] == 2
        for key, value in _no_seconds(mixed[i])[1].items():
            assert value == pytest.approx(_no_seconds(stacked[i])[1][key], rel=1e-4, abs=1e-5), key


def test_pretrain_seeds_refuses_runs_that_cannot_share_a_step(synthetic):
    from raptor.agents.actor_critic.pretrain_seeds import pretrain_seeds

    spec, env, train, table = synthetic
    pols = _policies(spec)
    sub = train[:10]
    with pytest.raises(ValueError, match="differ in epochs, device, precision"):
        pretrain_seeds(pols, env, table, sub, PretrainConfig(), [RunOptions(seed=1, epochs=1), RunOptions(seed=2, epochs=2)])
    with pytest.raises(ValueError, match="differ in epochs, device, precision"):
        pretrain_seeds(pols, env, table, sub, PretrainConfig(),
                       [RunOptions(seed=1, precision="bfloat16"), RunOptions(seed=2, precision="float32")])
    with pytest.raises(ValueError, match="repeated seeds"):
        pretrain_seeds(pols, env, table, sub, PretrainConfig(), [RunOptions(seed=1), RunOptions(seed=1)])
    other = Policy(spec.num_entities, spec.num_relations, ModelConfig(entity_dim=16, relation_dim=32, time_dim=8,
                                                                      step_dim=8, mlp_hidden_dim=64))
    with pytest.raises(ValueError, match="differ in shape"):
        pretrain_seeds([pols[0], other], env, table, sub, PretrainConfig(), [RunOptions(seed=1), RunOptions(seed=2)])
    with pytest.raises(ValueError, match="2 policies for 1 runs"):
        pretrain_seeds(pols, env, table, sub, PretrainConfig(), [RunOptions(seed=1)])
