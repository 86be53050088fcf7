"""The FLOP count of raptor/agents/flops.py against torch's own FLOP counter on real batches."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers import synthetic_env

from raptor.agents.beam import search_beams
from raptor.config import EnvConfig, ModelConfig, RLConfig
from raptor.mdp.env import TemporalEnv
from raptor.agents.flops import beam_gemms, beam_rows, path_table_gemms, training_epoch_flops, training_gemms
from raptor.agents.policy import Policy
from raptor.agents.actor_critic.rl import actor_critic_loss
from raptor.agents.rollout import rollout

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = ModelConfig(entity_dim=24, relation_dim=20, time_dim=6, step_dim=5, mlp_hidden_dim=40)
BOTH = pytest.mark.parametrize("cfg", [SMALL, replace(SMALL, lstm_hidden_dim=12), replace(SMALL, critic_detach=False)],
                               ids=["d_h=d_a", "d_h<d_a", "critic-not-detached"])


@pytest.fixture(scope="module")
def setup():
    env, q, E, R, _ = synthetic_env(max_actions=30)
    return env, q["train"], E, R


def _scored_rows(policy):
    """Record the rows (states) of every scoring call."""
    rows = []
    orig = policy.candidate_logits

    def wrapped(s, entity, relation, dt, mask=None, time_rows=None):
        rows.append(entity.shape[0])
        return orig(s, entity, relation, dt, mask, time_rows)

    policy.candidate_logits = wrapped
    return rows


@pytest.mark.parametrize("K", [2, 3])
@BOTH
def test_training_gemm_count_equals_torchs_flop_counter(setup, K, cfg):
    env, q, E, R = setup
    env = TemporalEnv(env.graph, EnvConfig(max_path_length=K, max_actions=30))
    torch.manual_seed(0)
    policy = Policy(E, R, cfg, K)
    seen = _scored_rows(policy)
    B = 64
    with FlopCounterMode(display=False) as counter:
        ro = rollout(policy, env, q[:B], torch.Generator().manual_seed(0))
        loss, _ = actor_critic_loss(ro, RLConfig().gamma, 0.01)
        loss.backward()
    gemms = training_gemms(cfg, B, K, R)
    assert len(seen) == K
    assert counter.get_total_flops() == sum(g.forward + g.backward for g in gemms)


@pytest.mark.parametrize("first", [0, 1000])
@BOTH
def test_beam_gemm_count_equals_torchs_flop_counter(setup, first, cfg):
    """Early queries (few candidates: beams narrower than the beam size) and later ones."""
    env, q, E, R = setup
    torch.manual_seed(0)
    policy = Policy(E, R, cfg, 3)
    rows = _scored_rows(policy)
    Q, beam = 16, 7
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        search_beams(policy, env, q[first:first + Q], beam)
    assert rows[0] == Q and all(r <= b for r, b in zip(rows, beam_rows(Q, beam, 3, 31)))
    tables = path_table_gemms(cfg, E, R, int(q[first:first + Q, -1].max()) + 1)
    assert counter.get_total_flops() == sum(g.forward for g in beam_gemms(cfg, Q, rows, R) + tables)


def test_paper_configuration_epoch_is_about_two_tflop():
    """The issue's estimate (about 1.7 TFLOP per ICEWS14 epoch at the paper's configuration) within 25%."""
    w = training_epoch_flops(ModelConfig(), 149_690, 512, 3, 150, 230)
    assert 1.7e12 * 0.75 < w.total < 1.7e12 * 1.25
    assert w.kernel < 0.1 * w.gemm
