import math

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


def test_batch_loss_is_sum_over_steps_of_mean_bce(synthetic):
    spec, env, train, table = synthetic
    torch.manual_seed(0)
    policy = Policy(spec.num_entities, spec.num_relations, SMALL)
    pb = pretrain_batch(policy, env, table, train[:64], torch.Generator().manual_seed(0))
    # K = 3 steps, each a mean BCE of order log(2) at initialisation.
    assert 3 * 0.3 < float(pb.loss.detach()) < 3 * 3.0
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
    hist = pretrain(Policy(spec.num_entities, spec.num_relations, SMALL), env, parts, train[:600], PretrainConfig(epochs=1, batch_size=128, labels_in_memory="part"), RunOptions(progress=False, resume=False))
    assert len(hist) == 1 and math.isfinite(hist[0]["bce"])
    with pytest.raises(ValueError, match="not partitioned.*labeling.partitions > 1"):
        PartitionedLabels(tmp_path / "labels" / "part-00000")


@pytest.mark.parametrize("no_reachable", ["policy", "stop"])
def test_a_batch_on_the_device_env_is_the_host_batch(synthetic, no_reachable):
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
        pb = pretrain_batch(policy, walk_env, table, train[:128], torch.Generator().manual_seed(0),
                            no_reachable=no_reachable)
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
