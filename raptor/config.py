"""Typed, validated hyperparameters loaded from ``params.yaml``.

Every hyperparameter of the method lives in ``params.yaml``; this module only gives it types and
checks it. Defaults below are the paper's values (Appendix B and C) so that a missing section means
"as in the paper"; an unknown key, a wrong type or an out-of-range value is a :class:`ConfigError`
that names the key by its dotted path (``rl.gamma``).

Sections are owned by the stage that reads them; a stage receives its section object explicitly
(never the raw dict), so ``dvc.yaml`` can list the exact keys each stage depends on.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml


class ConfigError(ValueError):
    """A params file that does not match the schema; the message names the offending key."""


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetConfig:
    """Where one dataset's raw splits are and how to read them (an entry of ``datasets``)."""

    #: Folder with train.txt, valid.txt, test.txt, entity2id.txt, relation2id.txt (a DVC dependency);
    #: required unless the dataset's name is registered (:mod:`raptor.data.registry`).
    raw_dir: Optional[str] = None
    #: Where the published files come from (printed when they are missing).
    source: Optional[str] = None
    #: Raw file name -> ``sha256:<hex>`` or ``git-sha1:<hex>`` (git blob id); ingest refuses a file
    #: that differs. Registered datasets bring the published release's checksums.
    checksums: dict[str, str] = field(default_factory=dict)
    #: Optional archive URL for online machines (used only when set), and its SHA-256.
    url: Optional[str] = None
    sha256: Optional[str] = None
    #: How the raw folder is written: auto (detect), ids (RE-NET/RE-GCN/TITer/xERTE: integer splits and
    #: entity2id/relation2id dictionaries) or names (names in the splits, no dictionaries): docs/data.md.
    layout: Literal["auto", "ids", "names"] = "auto"
    #: Calendar date (YYYY-MM-DD, or YYYY-MM-DDTHH:MM) of time step 0 after ingest, for explanations in
    #: dates; null: the calendar ingest read from dated raw files (meta.json), else step numbers.
    start_date: Optional[str] = None
    #: Calendar length of one time step after ingest: year, day, hour or 15min (null: day).
    granularity: Optional[Literal["year", "day", "hour", "15min"]] = None
    #: Units of one time step in the raw files; null = the gcd of all timestamp differences
    #: (ICEWS14: 1 day; ICEWS18: 24 hours). Times are divided by it and shifted to start at 0.
    time_step: Optional[int] = None


def _variant_names() -> list[str]:
    """Every registered variant (:data:`raptor.agents.variants.VARIANTS`), in its order."""
    from raptor.agents.variants import VARIANTS

    return list(VARIANTS)


def _default_datasets() -> dict[str, DatasetConfig]:
    from raptor.data.registry import RELEASES

    return {"ICEWS14": DatasetConfig(**RELEASES["ICEWS14"].defaults("ICEWS14"))}


def _with_registry(raw: dict) -> dict:
    """``raw`` with each registered dataset's release defaults under its own keys (params win)."""
    from raptor.data.registry import RELEASES

    datasets = raw.get("datasets")
    if not isinstance(datasets, dict):
        return raw
    merged = {}
    for name, entry in datasets.items():
        if entry is None:
            entry = {}
        if isinstance(entry, dict) and name in RELEASES:
            entry = {**RELEASES[name].defaults(name), **entry}
        merged[name] = entry
    return {**raw, "datasets": merged}


#: Metadata of a field whose value never changes a run's results (orchestration, speed, which
#: seeds/variants a stage runs): run fingerprints leave these out (:func:`result_params`).
NO_EFFECT = {"affects_results": False}


@dataclass(frozen=True)
class EnvConfig:
    """The MDP (paper, Preliminaries)."""

    #: K, the maximum path length (number of actions per episode).
    max_path_length: int = 3
    #: Candidate actions kept per state: the most recent ones by timestamp (paper: 150).
    max_actions: int = 150
    #: Action window is t_k <= t' < t_q (true, the paper's history H) or t' <= t_q (false).
    strict_history: bool = True
    #: true: the cap keeps the ``max_actions`` most recent edges among those whose target is not
    #: visited (the cap applies to A_s); false: the most recent edges first, then the visited mask.
    mask_before_cap: bool = True
    #: false: STOP comes on top of the cap (``max_actions`` edges + STOP); true: STOP is one of the
    #: ``max_actions`` actions (``max_actions - 1`` edges + STOP, TITer's layout with its NO_OP).
    cap_includes_stop: bool = False

    @property
    def edge_cap(self) -> int:
        """Edges kept per state (STOP not counted)."""
        return self.max_actions - int(self.cap_includes_stop)


@dataclass(frozen=True)
class LabelingConfig:
    """Reachable-entity labeling (paper, Algorithm 1)."""

    #: N, in-edges kept per expansion (the most recent ones); null = exact reachability.
    max_in_edges: Optional[int] = 200
    #: Only edges with time < t_q (true, consistent with the action space) or <= t_q (false).
    strict_history: bool = True
    #: "fast" (default, compiled and parallel) or "reference" (Algorithm 1 as printed; slow); both
    #: give the same table (tests).
    implementation: Literal["fast", "reference"] = field(default="fast", metadata=NO_EFFECT)
    #: Worker threads for the fast implementation; 0 = all cores.
    workers: int = field(default=0, metadata=NO_EFFECT)
    #: Independent parts (disjoint target ranges) the table is labeled in: the label flow maps them
    #: over the task runner (threads, or a Dask cluster with RAPTOR_DASK_ADDRESS); the same table.
    partitions: int = field(default=1, metadata=NO_EFFECT)
    #: Algorithm 1's initial visited set: "target" = {o_q} as printed (a path may run back through the
    #: query subject e_q, which the agent can never revisit); "target_and_subject" = {o_q, e_q} per
    #: training query (such paths dropped; needs env.max_path_length <= 3). docs/labeling.md.
    visited: Literal["target", "target_and_subject"] = "target"


@dataclass(frozen=True)
class ModelConfig:
    """Policy network (paper, Methodology and Appendix B)."""

    entity_dim: int = 128
    #: Relation embedding size including the time encoding (static part = relation_dim - time_dim).
    relation_dim: int = 128
    time_dim: int = 48
    step_dim: int = 32
    #: Hidden width of the two-layer state MLP and of the critic MLP (not given in the paper).
    mlp_hidden_dim: int = 256
    #: Hidden size of the LSTM path encoder, ``h_k`` (not given in the paper); null = ``d_a``
    #: (entity_dim + relation_dim), the size of its input and of the state vector.
    lstm_hidden_dim: Optional[int] = None
    #: The critic reads ``u`` detached, so its loss trains the critic MLP only (true), or reads ``u``
    #: itself, so its loss also trains the embeddings, the LSTM and the step embeddings it shares with
    #: the actor (false). The paper says only that the critic takes ``u``; docs/agent.md.
    critic_detach: bool = True
    #: Initialisation of the entity and relation embedding tables (pretraining and RL build the
    #: policy the same way): "xavier" (Xavier-uniform, this project's choice) or "normal" (N(0, 1),
    #: ``nn.Embedding``'s default, which TITer's code keeps: model/agent.py). Not stated by the paper;
    #: the step embedding stays Xavier-uniform (TITer has none).
    embedding_init: Literal["xavier", "normal"] = "xavier"


@dataclass(frozen=True)
class PretrainConfig:
    """Self-supervised reachability pretraining."""

    epochs: int = 40
    batch_size: int = 512
    learning_rate: float = 1.0e-3
    #: When no candidate is reachable: sample from the policy over all valid candidates ("policy")
    #: or take STOP ("stop"). The paper does not say; see docs/pretraining.md.
    no_reachable: Literal["policy", "stop"] = "policy"
    #: How STOP is labelled: reachable only on the answer o_q ("on_answer"), or as the paper's candidate
    #: (r_stop, e_k, t_k) under the paper's rule ("as_candidate": also off o_q when e_k still reaches it; STOP
    #: does not end an episode). See docs/pretraining.md.
    stop_label: Literal["on_answer", "as_candidate"] = "on_answer"
    #: The moves of an agent standing on o_q: labelled by the table as printed ("table": nearly all reachable,
    #: by the inverse edges back to o_q) or 0 ("stop_only": o_q is visited, so no simple path enters it again).
    on_answer: Literal["table", "stop_only"] = "table"
    #: Label table held in memory: "all" (one global shuffle per epoch) or "part" (a partitioned
    #: table, labeling.partitions > 1, one part at a time: the parts in a shuffled order, each part's
    #: queries shuffled; for tables larger than memory, e.g. GDELT: docs/labeling.md).
    labels_in_memory: Literal["all", "part"] = "all"


@dataclass(frozen=True)
class RLConfig:
    """Actor-critic fine-tuning (paper, Appendix C)."""

    epochs: int = 400
    batch_size: int = 512
    learning_rate: float = 1.0e-3
    gamma: float = 0.95
    entropy_beta0: float = 0.01
    entropy_decay: float = 0.9
    #: What ``n`` in ``beta_n = beta0 * decay^n`` counts: the epoch ("epoch", constant within an epoch)
    #: or the batches trained before this one ("batch": TITer's trainer increments ``now_epoch``
    #: after every batch). Not stated by the paper.
    entropy_decay_per: Literal["epoch", "batch"] = "epoch"
    #: Adam's weight decay (torch's: L2 added to the gradient, not decoupled); 0 = none. TITer's
    #: main.py: 1e-5. Not stated by the paper.
    weight_decay: float = 0.0
    #: Clip the gradient's global 2-norm to this value before each Adam step; 0 = no clipping.
    #: TITer's trainer: ``clip_grad_norm_(..., 10)``. Not stated by the paper.
    clip_gradient: float = 0.0


@dataclass(frozen=True)
class EvalConfig:
    """Beam-search evaluation and checkpoint selection."""

    beam_size: int = 100
    #: Validate (beam search on the valid split) every this many epochs.
    valid_every: int = 20
    #: A denser schedule at the start, where an early validation peak would otherwise go unseen:
    #: every ``valid_every_early`` epochs during the first ``valid_early_epochs`` RL epochs, then
    #: every ``valid_every`` (0 = ``valid_every`` throughout, the paper's schedule).
    valid_every_early: int = 0
    valid_early_epochs: int = 0
    #: How an entity's score is formed from the log-probabilities of the beam paths ending on it.
    score_rule: Literal["max", "logsumexp"] = "max"
    #: Early stopping: end training after this many validation rounds in a row without a new best
    #: validation MRR (counted in rounds of ``valid_every`` epochs); 0 = off, the paper's full budget.
    patience: int = 0
    #: Rank every expansion of the beam's last step (all surviving beams x all their actions, scored
    #: before the top-k cut), as TITer's episode.beam_search returns them, instead of only the entities
    #: of the ``beam_size`` surviving paths (false). Scores of one entity merge by ``score_rule``.
    rank_last_expansions: bool = False


#: The evaluation params of the beam search itself (the other ``eval.*`` params schedule validation):
#: what the evaluate stage depends on, and what a finished run's best model can be evaluated again with
#: (:mod:`raptor.pipeline.rescore`; they act in validation too, so a reading is measured at the checkpoint
#: the run's own evaluation picked).
TEST_TIME_EVAL_KEYS = ("eval.beam_size", "eval.score_rule", "eval.rank_last_expansions")


@dataclass(frozen=True)
class TITerConfig:
    """TITer's published defaults (``main.py`` argparse defaults unless said otherwise).

    The action cap and the path length are not here: they are our environment's
    (``env.max_actions = 150``, ``env.max_path_length = 3``, TITer's ``--path_length 3``); beam size
    and validation frequency are our ``eval`` section's (TITer: ``--beam_size 100``,
    ``--valid_epoch 30``).
    """

    # --- agent (model/agent.py) ---
    #: ``--ent_dim 100``: entity embedding incl. the time encoding (DynamicEmbedding: 80 static + 20).
    entity_dim: int = 100
    #: ``--rel_dim 100``.
    relation_dim: int = 100
    #: ``--time_dim 20``: the cos time encoding inside the entity embedding.
    time_dim: int = 20
    #: ``--state_dim 100``: LSTM hidden size.
    state_dim: int = 100
    #: ``--hidden_dim 100``: PolicyMLP hidden width.
    mlp_hidden_dim: int = 100
    #: Our ``dt`` (time steps) times this = TITer's ``dt``: its ICEWS files are stamped in hours
    #: (one snapshot = 24, ``--time_span 24``); 1 for its YAGO/WIKI (``--time_span 1``).
    time_scale: float = 24.0

    # --- training (utils/trainer.py, model/policyGradient.py, main.py); the epoch budget is the
    # variants' common ``rl.epochs`` (TITer's ``--max_epochs 400`` too) ---
    #: ``--batch_size 512``.
    batch_size: int = 512
    #: ``--lr 0.001``.
    learning_rate: float = 1.0e-3
    #: main.py: ``torch.optim.Adam(..., weight_decay=0.00001)``.
    weight_decay: float = 1.0e-5
    #: ``--clip_gradient 10.0`` (trainer: ``clip_grad_norm_``); 0 = no clipping.
    clip_gradient: float = 10.0
    #: ``--Gamma 0.95``: discount of the terminal reward.
    gamma: float = 0.95
    #: ``--Ita 0.01``: entropy regularisation weight.
    entropy_beta: float = 0.01
    #: ``--Zita 0.9``: its decay factor.
    entropy_decay: float = 0.9
    #: What the decay counts: TITer's trainer increments ``pg.now_epoch`` after every *batch*.
    entropy_decay_per: Literal["batch", "epoch"] = "batch"
    #: ``--Lambda 0.0``: ReactiveBaseline update rate (0 keeps the baseline at 0).
    baseline_lambda: float = 0.0
    #: policyGradient.calc_reinforce_loss: ``(x - mean) / (std + 1e-6)``.
    reward_std_eps: float = 1.0e-6

    #: Autocast precision of TITer's runs (training and evaluation): float32 | bfloat16 | auto, as
    #: ``train.precision`` for the actor-critic variants. TITer's code trains in float32, and bfloat16
    #: was measured for the actor-critic agent only (docs/agent.md), so TITer-150 keeps float32.
    precision: Literal["float32", "bfloat16", "auto"] = "float32"

    # --- the MDP it walks (raptor/mdp/env.py; TITer's model/environment.py, model/episode.py) ---
    #: ``raptor``: this project's environment, shared with Pure-RL and RL-RAPTOR (t_0 = 0, t_k <= t' <
    #: t_q, simple paths, STOP allowed at step 0); ``titer``: TITer's (t_0 = t_q, t' < t_k walking
    #: back in time, revisits allowed, NO_OP forbidden at step 0 where an edge exists).
    environment: Literal["raptor", "titer"] = "raptor"
    #: With ``environment: titer``: after the first hop, edges at the current timestamp too
    #: (``t' <= t_k``), TITer's CPU code path. Its CUDA path (the README trains with ``--cuda``)
    #: sets ``query_times = times`` in ``Env.next_actions``, so every step is strict: false.
    environment_same_time: bool = False

    # --- time-shaped reward (model/dirichlet.py, mle_dirichlet.py) ---
    #: ``--reward_shaping`` (on in the README's training command).
    reward_shaping: bool = True
    #: ``--k 300``: time bins ("recent K historical snapshots") of the Dirichlet distributions.
    dirichlet_k: int = 300
    #: dirichlet._meanprecision: ``D = D + 1e-9`` before the fit.
    dirichlet_eps: float = 1.0e-9
    #: mle_dirichlet.py ``--tol 1e-7``: convergence of the log-likelihood (and of the inner loops).
    dirichlet_tol: float = 1.0e-7
    #: mle_dirichlet.py ``--maxiter 100``: mean-precision rounds.
    dirichlet_maxiter: int = 100
    #: dirichlet._fit_s / _fit_m ``maxiter=1000``.
    dirichlet_inner_maxiter: int = 1000
    #: dirichlet._ipsi ``tol=1.48e-9``, ``maxiter=10`` (inverse digamma, Newton).
    ipsi_tol: float = 1.48e-9
    ipsi_maxiter: int = 10

    # --- test time (utils/tester.py) ---
    #: ``--IM`` (used in the README's test command): inductive mean for unseen query entities.
    inductive_mean: bool = True
    #: ``--mu 0.1``: weight of the entity's own embedding in the inductive mean shift.
    im_mu: float = 0.1


#: The actor-critic agents' settings that the paper does not state and TITer's code (JHL-HUST/TITer) sets, the
#: code whose defaults the paper's stated settings are: dotted param -> (TITer's value, where in its code).
#: Each is a param whose default keeps this project's behaviour until issue 39's sweep decides (docs/agent.md,
#: "Inherited from TITer's code"); the results page shows them beside the values each result set used.
INHERITED_FROM_TITER: dict[str, tuple[Any, str]] = {
    "rl.weight_decay": (TITerConfig.weight_decay, "main.py: Adam's weight_decay"),
    "rl.clip_gradient": (TITerConfig.clip_gradient, "main.py --clip_gradient, utils/trainer.py"),
    "rl.entropy_decay_per": (TITerConfig.entropy_decay_per, "utils/trainer.py: now_epoch counts batches"),
    "model.embedding_init": ("normal", "model/agent.py: nn.Embedding's N(0, 1)"),
    "eval.rank_last_expansions": (True, "model/episode.py beam_search, ranked by utils/tester.py"),
}


@dataclass(frozen=True)
class RecurrencyConfig:
    """The recurrency baseline (Gastinger et al., IJCAI 2024; nec-research/recurrency_baseline_tkg at
    5f19639): training-free, its decay ``lambda`` and weight ``alpha`` chosen on the valid split."""

    #: Decay rates ``lambda`` tried for the strict recurrency psi (``src/parameter_selection.py:70``).
    lambda_grid: list[float] = field(default_factory=lambda: [
        0.0, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.5, 0.9, 1.0001])
    #: Weights ``alpha`` of psi against the relaxed recurrency xi (``src/parameter_selection.py:71``).
    alpha_grid: list[float] = field(default_factory=lambda: [
        0.0, 0.00001, 0.0001, 0.001, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999, 1.0])
    #: One ``(lambda, alpha)`` per relation (``src/parameter_selection.py``, the paper's setting) or one
    #: for the whole dataset (``src/parameter_selection_dataset.py``).
    per_relation: bool = True
    #: History window: 0 = every fact before the query time (single step, the published numbers);
    #: n > 0 = only the last n time steps (``src/utils/utils.py:78-82``).
    window: int = 0
    #: Parameters of a relation without validation queries (``src/parameter_selection.py:95-96``).
    default_lambda: float = 1.0001
    default_alpha: float = 0.99999
    #: A selected alpha of exactly 1 is used as this (``src/test.py:122-123``).
    alpha_one_as: float = 0.99999
    #: Floor of psi's normaliser ``D`` (``src/utils/apply_baselines.py:124``).
    min_denominator: float = 1.0e-15


@dataclass(frozen=True)
class TrainConfig:
    """What the training stages run and how."""

    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4], metadata=NO_EFFECT)
    #: The systems the pipeline trains and compares (names of :data:`raptor.agents.variants.VARIANTS`).
    variants: list[str] = field(default_factory=lambda: _variant_names(), metadata=NO_EFFECT)
    #: float32; bfloat16 autocast; or auto: bfloat16 where the hardware has it natively (a CUDA GPU that
    #: supports it, a CPU with AVX512-BF16/AMX), float32 elsewhere (emulated bfloat16 is far slower).
    precision: Literal["float32", "bfloat16", "auto"] = "float32"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: Where RL rollouts and pretraining walks build their candidate actions (and pretraining looks up
    #: their labels): on the host (numpy, numba), on the training device (torch: :mod:`raptor.mdp.device_env`,
    #: :mod:`raptor.labeling.device`), or auto: on the device for CUDA, on the host otherwise. Both give
    #: the same candidates and labels (tests/test_device_env.py, tests/test_device_labels.py), so the same
    #: training on the CPU and the same up to floating-point rounding on a GPU.
    env_backend: Literal["auto", "numpy", "torch"] = field(default="auto", metadata=NO_EFFECT)
    #: auto: the actor-critic RL step replayed from a CUDA graph on a CUDA device with the device
    #: environment (:mod:`raptor.agents.actor_critic.graph_step`); off: eager. The same batches, uniforms
    #: and updates (tests/test_graph_step.py), so the same training up to floating-point order.
    cuda_graph: Literal["auto", "off"] = field(default="auto", metadata=NO_EFFECT)
    #: The captured step's fixed scan: edges to visited entities it may pass beyond the action cap; a
    #: batch with a row that needs more is redone exactly (uncaptured).
    graph_scan_pad: int = field(default=256, metadata=NO_EFFECT)
    #: On a CUDA device, deterministic kernels (:func:`raptor.common.runtime.deterministic_algorithms`):
    #: the same run twice gives the same weights; false trades that for speed (the CPU is deterministic).
    deterministic: bool = field(default=True, metadata=NO_EFFECT)
    #: Torch intra-op threads; 0 = all cores (divided among the runs that train at once). Outside the
    #: fingerprint, so a run resumes under another count; torch's GEMMs can round the last bit of a
    #: float differently with another count (measured on small shapes: tests/test_tasks.py), so
    #: bit-identical repeats need the same count (docs/agent.md, "Reproducibility").
    num_threads: int = field(default=0, metadata=NO_EFFECT)
    #: (variant, seed) runs trained at the same time by a stage (mapped Prefect tasks).
    parallel_runs: int = field(default=1, metadata=NO_EFFECT)
    #: Seeds of a stage stacked into one batched training step (agents that can:
    #: :attr:`raptor.agents.base.Agent.stacks_seeds`; :mod:`raptor.agents.actor_critic.seeds`); 1 = each
    #: alone. Each seed trains what it would alone, up to floating-point order (tests/test_seeds.py). The
    #: pretrain stage stacks its seeds the same way (:mod:`raptor.agents.actor_critic.pretrain_seeds`).
    stacked_seeds: int = field(default=1, metadata=NO_EFFECT)
    #: Give Pure-RL ``pretrain.epochs + rl.epochs`` RL epochs, the same total as RAPTOR's
    #: pretraining + RL (false: both get ``rl.epochs`` RL epochs, as the paper's 400 vs 40 + 400).
    equal_total_epochs: bool = False


@dataclass(frozen=True)
class AblationConfig:
    """The paper's pretraining-epochs ablation (ICEWS14; RL budget fixed at ``rl.epochs``)."""

    pretrain_epochs: list[int] = field(default_factory=lambda: [0, 10, 20, 30, 40, 50])
    seeds: list[int] = field(default_factory=lambda: [0])


@dataclass(frozen=True)
class Params:
    """The whole ``params.yaml`` (after the selected profile's overrides are applied)."""

    #: Name of the profile whose overrides were applied ("paper" = none, the paper's values).
    profile: str = field(default="paper", metadata=NO_EFFECT)
    #: The datasets the pipeline runs: name -> where its raw splits are (DVC's ``foreach``). A run
    #: fingerprint holds the content hash of the ingested data instead of these paths.
    datasets: dict[str, DatasetConfig] = field(default_factory=_default_datasets, metadata=NO_EFFECT)
    env: EnvConfig = field(default_factory=EnvConfig)
    labeling: LabelingConfig = field(default_factory=LabelingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    #: The TITer-150 variant's own agent and training (``raptor/agents/titer/training.py``).
    titer: TITerConfig = field(default_factory=TITerConfig)
    #: The recurrency baseline's selection grids (``raptor/agents/recurrency/method.py``).
    recurrency: RecurrencyConfig = field(default_factory=RecurrencyConfig)
    ablation: AblationConfig = field(default_factory=AblationConfig, metadata=NO_EFFECT)

    def dataset(self, name: Optional[str] = None) -> tuple[str, DatasetConfig]:
        """``(name, config)`` of dataset ``name``; without a name, the only dataset listed. A registered
        name (:mod:`raptor.data.registry`) that ``datasets`` does not list gets its release's defaults, as
        an entry ``NAME: {}`` would: a command such as ``raptor ingest --dataset ICEWS18`` needs no edit of
        params.yaml (the pipeline's stages still run the listed datasets only)."""
        from raptor.data.registry import RELEASES

        if name is None:
            if len(self.datasets) != 1:
                raise ConfigError(f"datasets: {len(self.datasets)} datasets are listed "
                                  f"({', '.join(self.datasets)}): say which one (--dataset)")
            name = next(iter(self.datasets))
        if name not in self.datasets:
            if name in RELEASES:
                return name, DatasetConfig(**RELEASES[name].defaults(name))
            raise ConfigError(f"datasets: no dataset {name!r} (listed: {', '.join(self.datasets) or 'none'}; "
                              f"registered: {', '.join(RELEASES)})")
        return name, self.datasets[name]


#: Keys that shape DVC's stage list (``foreach`` over datasets, one stage per variant): read by DVC
#: from params.yaml itself, so a profile or a local override file may not change them.
STAGE_GRAPH_KEYS = ("datasets", "train.variants")

#: Top-level key of params.yaml holding named sweeps (:mod:`raptor.pipeline.sweep`); not part of a run's params.
SWEEPS_KEY = "sweeps"
#: Top-level key of params.yaml: dotted-key overrides applied after its profile (what a DVC
#: experiment sets, ``dvc exp run -S '++overrides.rl.epochs=60'``, to win over the profile).
OVERRIDES_KEY = "overrides"

#: A dataset name becomes a folder name and a DVC stage key.
DATASET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


# Range checks: dotted key -> (predicate, description). Kept next to the schema, not in stages.
_CHECKS: dict[str, tuple[Any, str]] = {
    "datasets": (lambda v: len(v) >= 1 and all(DATASET_NAME.match(k) for k in v),
                 "a non-empty mapping of dataset names (letters, digits, _ -) to their raw data"),
    "env.max_path_length": (lambda v: v >= 1, ">= 1"),
    "env.max_actions": (lambda v: v >= 1, ">= 1"),
    "labeling.max_in_edges": (lambda v: v is None or v >= 1, "a positive integer or null"),
    "labeling.workers": (lambda v: v >= 0, ">= 0"),
    "labeling.partitions": (lambda v: v >= 1, ">= 1"),
    "model.entity_dim": (lambda v: v >= 1, ">= 1"),
    "model.relation_dim": (lambda v: v >= 2, ">= 2"),
    "model.time_dim": (lambda v: v >= 1, ">= 1"),
    "model.step_dim": (lambda v: v >= 1, ">= 1"),
    "model.mlp_hidden_dim": (lambda v: v >= 1, ">= 1"),
    "model.lstm_hidden_dim": (lambda v: v is None or v >= 1, "a positive integer or null (= entity_dim + relation_dim)"),
    "titer.entity_dim": (lambda v: v >= 2, ">= 2"),
    "titer.relation_dim": (lambda v: v >= 1, ">= 1"),
    "titer.time_dim": (lambda v: v >= 1, ">= 1"),
    "titer.state_dim": (lambda v: v >= 1, ">= 1"),
    "titer.mlp_hidden_dim": (lambda v: v >= 1, ">= 1"),
    "titer.time_scale": (lambda v: v > 0, "> 0"),
    "titer.batch_size": (lambda v: v >= 1, ">= 1"),
    "titer.learning_rate": (lambda v: v > 0, "> 0"),
    "titer.weight_decay": (lambda v: v >= 0, ">= 0"),
    "titer.clip_gradient": (lambda v: v >= 0, ">= 0 (0 = no clipping)"),
    "titer.gamma": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "titer.entropy_beta": (lambda v: v >= 0, ">= 0"),
    "titer.entropy_decay": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "titer.baseline_lambda": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "titer.dirichlet_k": (lambda v: v >= 1, ">= 1"),
    "titer.im_mu": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "pretrain.epochs": (lambda v: v >= 0, ">= 0"),
    "pretrain.batch_size": (lambda v: v >= 1, ">= 1"),
    "pretrain.learning_rate": (lambda v: v > 0, "> 0"),
    "rl.epochs": (lambda v: v >= 0, ">= 0"),
    "rl.batch_size": (lambda v: v >= 1, ">= 1"),
    "rl.learning_rate": (lambda v: v > 0, "> 0"),
    "rl.gamma": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "rl.entropy_beta0": (lambda v: v >= 0, ">= 0"),
    "rl.entropy_decay": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "rl.weight_decay": (lambda v: v >= 0, ">= 0 (0 = no weight decay)"),
    "rl.clip_gradient": (lambda v: v >= 0, ">= 0 (0 = no clipping)"),
    "eval.beam_size": (lambda v: v >= 1, ">= 1"),
    "eval.valid_every": (lambda v: v >= 1, ">= 1"),
    "eval.valid_every_early": (lambda v: v >= 0, ">= 0 (0 = valid_every throughout)"),
    "eval.valid_early_epochs": (lambda v: v >= 0, ">= 0"),
    "eval.patience": (lambda v: v >= 0, ">= 0 (0 = no early stopping)"),
    "train.seeds": (lambda v: len(v) >= 1 and len(set(v)) == len(v), "a non-empty list of distinct ints"),
    "train.variants": (lambda v: len(v) >= 1, "a non-empty list"),
    "train.num_threads": (lambda v: v >= 0, ">= 0"),
    "train.parallel_runs": (lambda v: v >= 1, ">= 1"),
    "train.stacked_seeds": (lambda v: v >= 1, ">= 1 (1 = each seed alone)"),
    "train.graph_scan_pad": (lambda v: v >= 0, ">= 0"),
    "recurrency.lambda_grid": (lambda v: len(v) >= 1 and min(v) >= 0, "a non-empty list of decays >= 0"),
    "recurrency.alpha_grid": (lambda v: len(v) >= 1 and 0 <= min(v) and max(v) <= 1,
                              "a non-empty list of weights in [0, 1]"),
    "recurrency.window": (lambda v: v >= 0, ">= 0 (0 = every fact before the query)"),
    "recurrency.default_lambda": (lambda v: v >= 0, ">= 0"),
    "recurrency.default_alpha": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "recurrency.alpha_one_as": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "recurrency.min_denominator": (lambda v: v > 0, "> 0"),
    "ablation.pretrain_epochs": (lambda v: len(v) >= 1 and min(v) >= 0, "a non-empty list of epochs >= 0"),
    "ablation.seeds": (lambda v: len(v) >= 1 and len(set(v)) == len(v), "a non-empty list of distinct ints"),
}


def _cross_checks(params: Params) -> None:
    from raptor.data.registry import CHECKSUM, RELEASES

    for name, ds in params.datasets.items():
        if not ds.raw_dir:
            raise ConfigError(f"datasets.{name}.raw_dir: required ({name} is not a registered dataset; registered: "
                              f"{', '.join(RELEASES)})")
        for fname, digest in ds.checksums.items():
            if not CHECKSUM.match(digest):
                raise ConfigError(f"datasets.{name}.checksums.{fname}: expected sha256:<64 hex> or "
                                  f"git-sha1:<40 hex>, got {digest!r}")
        if ds.time_step is not None and ds.time_step < 1:
            raise ConfigError(f"datasets.{name}.time_step: must be a positive integer or null, got {ds.time_step!r}")
        if ds.start_date is not None:
            import datetime as _dt

            try:
                _dt.datetime.fromisoformat(ds.start_date)
            except ValueError:
                raise ConfigError(f"datasets.{name}.start_date: expected YYYY-MM-DD or YYYY-MM-DDTHH:MM, "
                                  f"got {ds.start_date!r}") from None
    from raptor.agents.variants import VARIANTS

    unknown = [v for v in params.train.variants if v not in VARIANTS]
    if unknown or len(set(params.train.variants)) != len(params.train.variants):
        raise ConfigError(f"train.variants: expected distinct names among {', '.join(VARIANTS)}, "
                          f"got {params.train.variants!r}")
    if params.env.cap_includes_stop and params.env.max_actions < 2:
        raise ConfigError(f"env.max_actions: must be >= 2 with env.cap_includes_stop (STOP takes one of the "
                          f"slots), got {params.env.max_actions}")
    if params.labeling.visited == "target_and_subject" and params.env.max_path_length > 3:
        raise ConfigError(f"labeling.visited: 'target_and_subject' is implemented for env.max_path_length <= 3 "
                          f"only (got {params.env.max_path_length}); use 'target'")
    if params.titer.time_dim >= params.titer.entity_dim:
        raise ConfigError(f"titer.time_dim ({params.titer.time_dim}) must be smaller than titer.entity_dim "
                          f"({params.titer.entity_dim}): TITer's entity embedding holds a static part and the time encoding")
    if params.model.time_dim >= params.model.relation_dim:
        raise ConfigError(
            f"model.time_dim ({params.model.time_dim}) must be smaller than model.relation_dim "
            f"({params.model.relation_dim}): the relation embedding holds a static part and the time encoding"
        )


# --------------------------------------------------------------------------------------------
# Generic loader
# --------------------------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp``; return it (ints are accepted for floats)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(f"{key}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__} {value!r}")
        return {_coerce(k, args[0], key): _coerce(v, args[1], f"{key}.{k}") for k, v in value.items()}
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list, got {type(value).__name__} {value!r}")
        return [_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {type(value).__name__} {value!r}")
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf
        if not math.isfinite(number):  # YAML's .inf, -.inf, .nan, JSON's Infinity, NaN
            shown = value if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
            raise ConfigError(f"{key}: expected a finite number, got {shown}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {type(value).__name__} {value!r}")
        return value
    raise ConfigError(f"{key}: unsupported annotation {tp!r}")  # a schema bug, not a user error


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        where = prefix or "params"
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__} {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        key = f"{prefix}.{unknown[0]}" if prefix else unknown[0]
        raise ConfigError(f"{key}: unknown key (known keys here: {', '.join(sorted(fields))})")
    kwargs = {}
    for name, value in raw.items():
        key = f"{prefix}.{name}" if prefix else name
        value = _coerce(value, hints[name], key)
        check = _CHECKS.get(key)
        if check is not None and not check[0](value):
            raise ConfigError(f"{key}: must be {check[1]}, got {value!r}")
        kwargs[name] = value
    return cls(**kwargs)


def _set_dotted(raw: dict, dotted: str, value: Any, where: str) -> None:
    node = raw
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: cannot set {dotted!r} inside a non-mapping")
    node[parts[-1]] = value


def apply_profile(raw: dict) -> dict:
    """Resolve ``profile`` / ``profiles``: a copy of ``raw`` with the selected profile's overrides,
    then those of ``overrides`` (:data:`OVERRIDES_KEY`).

    ``profiles`` maps a name to ``{dotted.key: value}`` overrides; ``profile`` names the one to
    apply (``paper``, the default, applies none unless ``profiles.paper`` exists).
    """
    import copy

    raw = copy.deepcopy(raw)
    profiles = raw.pop("profiles", None) or {}
    raw.pop(SWEEPS_KEY, None)  # sweep declarations (raptor.pipeline.sweep), not params of a run
    name = raw.get("profile", "paper")
    if not isinstance(profiles, dict):
        raise ConfigError(f"profiles: expected a mapping of profile name -> overrides, got {profiles!r}")
    if not isinstance(name, str):
        raise ConfigError(f"profile: expected a profile name, got {name!r}")
    if name not in profiles and name != "paper":
        raise ConfigError(f"profile: unknown profile {name!r} (known: {', '.join(sorted(set(profiles) | {'paper'}))})")
    overrides = profiles.get(name) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"profiles.{name}: expected a mapping of dotted keys to values")
    for dotted, value in overrides.items():
        if dotted in ("profile", "profiles"):
            raise ConfigError(f"profiles.{name}.{dotted}: a profile cannot set {dotted}")
        check_not_stage_graph(dotted, f"profiles.{name}.{dotted}")
        _set_dotted(raw, dotted, value, f"profiles.{name}")
    own = raw.pop(OVERRIDES_KEY, None) or {}
    if not isinstance(own, dict):
        raise ConfigError(f"{OVERRIDES_KEY}: expected a mapping of dotted keys to values, got {own!r}")
    for dotted, value in flatten(own).items():
        if dotted.split(".")[0] in ("profile", "profiles", SWEEPS_KEY, OVERRIDES_KEY):
            raise ConfigError(f"{OVERRIDES_KEY}.{dotted}: cannot be overridden")
        check_not_stage_graph(dotted, f"{OVERRIDES_KEY}.{dotted}")
        _set_dotted(raw, dotted, value, OVERRIDES_KEY)
    return raw


def check_not_stage_graph(dotted: str, where: str) -> None:
    for key in STAGE_GRAPH_KEYS:
        if dotted == key or dotted.startswith(key + ".") or key.startswith(dotted + "."):
            raise ConfigError(f"{where}: {key} shapes DVC's stage list, which DVC reads from params.yaml "
                              f"itself; set it there")


def params_from_dict(raw: Any, overrides: Optional[dict[str, Any]] = None) -> Params:
    """Validate a parsed params mapping; raises :class:`ConfigError` naming the bad key.

    The selected profile's overrides are applied first, then ``overrides`` (``{"rl.epochs": 2}``),
    so a command line wins over the profile.
    """
    if raw is None:
        raw = {}
    if isinstance(raw, dict):
        overrides = dict(overrides or {})
        if "profile" in overrides:  # choosing the profile happens before its overrides apply
            raw = {**raw, "profile": overrides.pop("profile")}
        if raw.get("profile", "paper") != "paper":
            # The file's own values are checked too: one that a profile hides would break the day the
            # profile changes.
            _build(Params, _with_registry(apply_profile({**raw, "profile": "paper"})), "")
        raw = apply_profile(raw)
        for dotted, value in overrides.items():
            _set_dotted(raw, dotted, value, "override")
        raw = _with_registry(raw)
    params = _build(Params, raw, "")
    _cross_checks(params)
    return params


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one
    silently; DVC refuses such a file)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConfigError(f"line {line}: key {key!r} is given twice (first on line {seen[key]})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML file strictly (duplicate keys refused); errors name the file."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"params file not found: {path} (run from the project's root folder, or give --params "
                          "FILE; a file holding `{}` means the paper's defaults)")
    if path.is_dir():
        raise ConfigError(f"{path}: a directory, not a YAML params file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


#: Untracked overrides beside params.yaml (git-ignored): ``profile: NAME`` and dotted keys.
LOCAL_PARAMS = "params.local.yaml"


def local_overrides(path: str | Path) -> dict[str, Any]:
    """Overrides from a local params file (``profile`` and dotted keys, or nested mappings); ``{}``
    when the file does not exist. Keys that shape DVC's stage list are refused."""
    path = Path(path)
    if not path.exists():
        return {}
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values")
    if any(str(key).split(".")[0] in ("profiles", SWEEPS_KEY, OVERRIDES_KEY) for key in raw):
        raise ConfigError(f"{path}: profiles, sweeps and overrides are defined in params.yaml; select a "
                          "profile with `profile: NAME`, override a key with `KEY: VALUE`")
    flat = flatten(raw)
    empty = [k for k, v in flatten(raw, keep_empty=True).items() if v == {}]
    for dotted in empty + list(flat):
        try:
            check_not_stage_graph(dotted, dotted)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    if empty:  # flattening drops an empty mapping: it would be ignored without a word
        raise ConfigError(f"{path}: {empty[0]} is an empty mapping, which overrides nothing: give it a value or "
                          "remove it")
    return flat


def load_params(path: str | Path = "params.yaml", overrides: Optional[dict[str, Any]] = None,
                local: Optional[str | Path] = None) -> Params:
    """Load and validate ``params.yaml``.

    ``local`` names an optional overrides file (:data:`LOCAL_PARAMS`; missing = none) applied on
    top of the file, then ``overrides`` (dotted keys, ``{"rl.epochs": 2}``), so a command line wins.
    """
    path = Path(path)
    raw = read_yaml(path)
    if raw is None:  # 0 bytes or only comments (a file truncated by a crash): not "all defaults"
        raise ConfigError(f"{path}: empty params file (it sets no key; restore it, or write `{{}}` for "
                          "all the paper's defaults)")
    own = local_overrides(local) if local is not None else {}
    try:
        return params_from_dict(raw, {**own, **(overrides or {})})
    except ConfigError as exc:
        raise ConfigError(_where(str(exc), path, raw, local, own, overrides or {})) from None


#: Where a value given as an ``overrides`` argument of :func:`load_params` comes from (a command line).
OVERRIDE_ORIGIN = "command-line override"
#: The dotted key an error message starts with (``rl.gamma``, ``train.seeds[1]``).
_MESSAGE_KEY = re.compile(r"^[A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*")


def _where(message: str, path: Path, raw: Any, local: Optional[str | Path], own: dict[str, Any],
           overrides: dict[str, Any]) -> str:
    """``message`` prefixed with where the bad value was written: ``params.yaml`` (and its line),
    ``params.yaml, profiles.NAME`` (and line), the local file (and line) or the command line.

    The sources are applied one after another (params.yaml without a profile, then the selected
    profile, the local file, the command line); the first that gives the same error is blamed.
    """
    own_name = raw.get("profile", "paper") if isinstance(raw, dict) else "paper"
    name = overrides.get("profile", own.get("profile", own_name))
    named_by = OVERRIDE_ORIGIN if "profile" in overrides else (local if "profile" in own else path)
    local_label = str(local) if local is not None else OVERRIDE_ORIGIN
    layers = [({"profile": "paper"}, path, lambda t: [_node(t, "overrides"), t]),
              ({"profile": name}, path, lambda t: [_node(_node(t, "profiles"), name), t]),
              ({**own, "profile": name}, local_label, lambda t: [t]),
              ({**own, **overrides}, OVERRIDE_ORIGIN, lambda t: [])]
    for i, (layer, origin, roots) in enumerate(layers):
        try:
            params_from_dict(raw, layer)
            continue
        except ConfigError as exc:
            if str(exc) != message:
                continue
        if i == 1 and message.startswith("profile:"):  # the profile's name, not its section, is wrong
            origin, roots, section = named_by, (lambda t: [t]), ""
        else:
            section = f", profiles.{name}" if i == 1 else ""
        line = _line_of(origin, message, roots) if origin != OVERRIDE_ORIGIN else None
        return f"{origin}{section}{f', line {line}' if line else ''}: {message}"
    return f"{path}: {message}"


def _node(node: Any, key: str) -> Any:
    """The value node of ``key`` in a YAML mapping node (None if there is none)."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None


def _line_of(path: Any, message: str, roots) -> Optional[int]:
    """The line of file ``path`` where the key that ``message`` starts with is written (searched
    under each node of ``roots(document)`` in turn; keys may be nested or dotted), or None."""
    found = _MESSAGE_KEY.match(message)
    if not found:
        return None
    try:
        document = yaml.compose(Path(path).read_text(), Loader=yaml.SafeLoader)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    for root in roots(document):
        line = _find_key(root, found.group(0))
        if line:
            return line
    return None


def _find_key(node: Any, rest: str) -> Optional[int]:
    """Line of the dotted key ``rest`` (``rl.gamma``, ``train.seeds[1]``) under YAML node ``node``."""
    index = re.match(r"^\[(\d+)\]", rest)
    if index:
        if not isinstance(node, yaml.SequenceNode) or int(index.group(1)) >= len(node.value):
            return None
        item = node.value[int(index.group(1))]
        tail = rest[index.end():].lstrip(".")
        return _find_key(item, tail) if tail else item.start_mark.line + 1
    if not isinstance(node, yaml.MappingNode):
        return None
    for k, v in node.value:
        key = str(k.value) if isinstance(k, yaml.ScalarNode) else None
        if key is None or not (rest == key or rest.startswith((key + ".", key + "["))):
            continue
        tail = rest[len(key):]
        if not tail:
            return k.start_mark.line + 1
        line = _find_key(v, tail.lstrip("."))
        if line:
            return line
    return None


def load_resolved(path: str | Path, overrides: Optional[dict[str, Any]] = None) -> Params:
    """The :class:`Params` of a resolved params file (JSON of :func:`params_to_dict`, written by
    the ``params`` stage, :func:`raptor.pipeline.stages.resolve_params`): no profile is applied again;
    ``overrides`` (dotted keys, ``{"eval.beam_size": 50}``) on top."""
    import json

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"resolved params not found: {path} (the `params` stage writes it: dvc repro params)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigError(
            f"{path}: not a resolved params file, the JSON the params stage writes ({str(exc)[:80]}); for a "
            f"params.yaml, run `raptor params --params {path.name} --out build/params.json` and pass build/params.json"
        ) from None
    try:
        if overrides and isinstance(raw, dict):
            for dotted, value in overrides.items():
                _set_dotted(raw, dotted, value, "override")
        params = _build(Params, raw, "")
        _cross_checks(params)
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return params


def result_params(params: Params) -> dict[str, Any]:
    """Flat ``{dotted key: value}`` of every field that can change a run's results (fields marked
    :data:`NO_EFFECT` in the schema are left out): what a run fingerprint compares."""
    out: dict[str, Any] = {}

    def walk(obj: Any, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            if not f.metadata.get("affects_results", True):
                continue
            key = f"{prefix}.{f.name}" if prefix else f.name
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, key)
            elif isinstance(value, dict):
                for k, v in value.items():
                    out.update(flatten({k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v}, key))
            else:
                out[key] = value

    walk(params, "")
    return out


def params_to_dict(params: Params) -> dict[str, Any]:
    """Plain nested dict (for logging to MLflow and for run metadata)."""
    return dataclasses.asdict(params)


def flatten(d: dict[str, Any], prefix: str = "", keep_empty: bool = False) -> dict[str, Any]:
    """``{"rl": {"gamma": 0.95}}`` -> ``{"rl.gamma": 0.95}``; an empty mapping is dropped unless
    ``keep_empty`` (then it is a value, ``{}``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict) and (v or not keep_empty):
            out.update(flatten(v, key, keep_empty))
        else:
            out[key] = v
    return out
