"""Sweeps: declaration, expansion into arms, the plan's sharing of labels and pretraining, results."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from raptor.config import ConfigError, load_params, params_from_dict
from raptor.pipeline.sweep import DEFAULT_ARM, arm_params, load_sweep, parse_sweep, plan_sweep
from raptor.reporting.sweep_page import collect_results, results_markdown, write_results

RAW = {
    "profile": "paper",
    "datasets": {"T": {"raw_dir": "/nowhere"}},
    "rl": {"gamma": 0.95},
    "train": {"seeds": [0, 1], "variants": ["pure_rl", "raptor"]},
    "profiles": {"small": {"rl.epochs": 2, "pretrain.epochs": 3}},
    "sweeps": {
        "s": {
            "base": {"profile": "small", "rl.epochs": 4},
            "arms": {"wide": {"model.mlp_hidden_dim": 512}},
            "grid": {"rl.gamma": [0.9, 0.95], "labeling.max_in_edges": [50]},
        },
        "prod": {"grid": {"rl.gamma": [0.9, 0.99], "eval.beam_size": [10, 20]}, "mode": "product"},
    },
}


def test_grid_one_at_a_time_adds_the_base_and_skips_its_values():
    sweep = parse_sweep(RAW, "s")
    names = [a.name for a in sweep.arms]
    # the default first; rl.gamma=0.95 is the base's own value: no arm of its own
    assert names == [DEFAULT_ARM, "wide", "rl.gamma=0.9", "labeling.max_in_edges=50"]
    assert sweep.arms[0].overrides == {} and sweep.arms[2].overrides == {"rl.gamma": 0.9}


def test_grid_product_names_every_combination():
    sweep = parse_sweep(RAW, "prod")
    assert [a.name for a in sweep.arms] == ["rl.gamma=0.9,eval.beam_size=10", "rl.gamma=0.9,eval.beam_size=20",
                                            "rl.gamma=0.99,eval.beam_size=10", "rl.gamma=0.99,eval.beam_size=20"]
    assert sweep.arms[3].overrides == {"rl.gamma": 0.99, "eval.beam_size": 20}


def test_precedence_file_profile_local_base_arm():
    sweep = parse_sweep(RAW, "s")
    params = arm_params(RAW, sweep, local={"rl.epochs": 9, "pretrain.batch_size": 64})
    wide = params["wide"]
    assert wide.profile == "small"
    assert wide.pretrain.epochs == 3            # from the profile the base selects
    assert wide.rl.epochs == 4                  # the base wins over the local file
    assert wide.pretrain.batch_size == 64       # the local file wins over params.yaml
    assert wide.model.mlp_hidden_dim == 512     # the arm's own
    assert params[DEFAULT_ARM].model.mlp_hidden_dim == params_from_dict(RAW).model.mlp_hidden_dim


@pytest.mark.parametrize("spec, message", [
    ({"grid": {"rl.nope": [1]}}, "grid.rl.nope: not a params key"),
    ({"grid": {"rl.gamma": 0.9}}, "non-empty list"),
    ({"arms": {"a/b": {"rl.gamma": 0.9}}}, "arm name 'a/b'"),
    ({"arms": {"x": {"datasets.T.raw_dir": "/x"}}}, "shapes DVC's stage list"),
    ({"arms": {"x": {"train.variants": ["raptor"]}}}, "shapes DVC's stage list"),
    ({"grid": {"rl.gamma": [0.9]}, "mode": "random"}, "mode: 'random'"),
    ({"variants": ["titer9"], "arms": {"a": {}}}, "unknown variant 'titer9'"),
    ({"arms": {"a": {}}, "seeds": [0]}, "unknown key(s) seeds"),
    ({}, "no arms"),
    ({"arms": {"a": {"rl.gamma": 0.9}}, "notes": {"rl.lr": "typo"}}, "notes.rl.lr: neither an arm nor a key"),
    ({"arms": {"a": {"rl.gamma": 0.9}}, "notes": {"a": 3}}, "notes: expected a mapping"),
    ({"arms": {"a": {"profiles": {"x": {"rl.gamma": 1}}}}}, "cannot set profiles"),
])
def test_bad_declarations_name_the_key(spec, message):
    raw = {**RAW, "sweeps": {"bad": spec}}
    with pytest.raises(ConfigError, match="sweeps.bad") as err:
        parse_sweep(raw, "bad")
    assert message in str(err.value)


def test_a_bad_value_names_the_arm():
    raw = {**RAW, "sweeps": {"bad": {"arms": {"neg": {"rl.epochs": "many"}}}}}
    with pytest.raises(ConfigError, match=r"sweeps.bad, arm 'neg'.*rl.epochs"):
        arm_params(raw, parse_sweep(raw, "bad"))


def test_unknown_sweep_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"no sweep 'x' \(known: prod, s\)"):
        parse_sweep(RAW, "x")


def test_sweeps_are_not_params_of_a_run(tmp_path):
    """A params file with sweeps loads as before; a local file may not declare them."""
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(RAW))
    assert load_params(f).rl.gamma == 0.95
    local = tmp_path / "local.yaml"
    local.write_text(yaml.safe_dump({"sweeps": {"x": {"arms": {"a": {}}}}}))
    with pytest.raises(ConfigError, match="sweeps and overrides are defined in params.yaml"):
        load_params(f, local=local)


def _plan(tmp_path, raw=RAW, name="s"):
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(raw))
    sweep, params = load_sweep(f, name)
    return plan_sweep(sweep, params, "T", tmp_path / "sweep"), params


def test_plan_shares_labels_and_pretraining_by_content(tmp_path):
    plan, params = _plan(tmp_path)
    # labels: the base's and max_in_edges=50's; pretraining: default/rl.gamma share, wide and N=50 do not
    assert len(plan.labels) == 2
    assert len(plan.pretrain) == 3 * 2  # three settings x two seeds
    by_arm = {(j.arm, j.variant, j.seed): j for j in plan.train}
    assert len(by_arm) == 4 * 2 * 2
    assert by_arm[(DEFAULT_ARM, "raptor", 0)].init_model == by_arm[("rl.gamma=0.9", "raptor", 0)].init_model
    assert by_arm[(DEFAULT_ARM, "raptor", 0)].init_model != by_arm[("wide", "raptor", 0)].init_model
    assert by_arm[(DEFAULT_ARM, "raptor", 0)].init_model != by_arm[(DEFAULT_ARM, "raptor", 1)].init_model
    assert by_arm[("wide", "pure_rl", 1)].init_model is None and by_arm[("wide", "pure_rl", 1)].pretrain_epochs == 0
    assert by_arm[("wide", "raptor", 1)].pretrain_epochs == 3
    shared = [j for j in plan.pretrain if DEFAULT_ARM in j.arms]
    assert {tuple(j.arms) for j in shared} == {(DEFAULT_ARM, "rl.gamma=0.9")}
    # each arm's jobs load its own resolved params
    for arm, path in plan.params_files.items():
        assert json.loads(Path(path).read_text())["rl"]["epochs"] == params[arm].rl.epochs
    assert json.loads((tmp_path / "sweep" / "sweep.json").read_text())["dataset"] == "T"


def test_pretraining_shared_by_arms_of_different_lengths_snapshots_each(tmp_path):
    raw = {**RAW, "sweeps": {"len": {"grid": {"pretrain.epochs": [1, 3, 5]}, "variants": ["raptor"]}}}
    plan, _ = _plan(tmp_path, raw, "len")
    # the default arm runs the paper's 40 epochs: one run per seed, a snapshot for every arm
    assert len(plan.pretrain) == 2 and all(j.epochs == (1, 3, 5, 40) for j in plan.pretrain)
    assert sorted(Path(j.init_model).name for j in plan.train if j.seed == 0) == [
        "pretrained-e1.pt", "pretrained-e3.pt", "pretrained-e40.pt", "pretrained-e5.pt"]


def test_a_sweep_of_pure_rl_needs_no_labels(tmp_path):
    raw = {**RAW, "sweeps": {"rl": {"grid": {"rl.gamma": [0.9]}, "variants": ["pure_rl"]}}}
    plan, _ = _plan(tmp_path, raw, "rl")
    assert plan.labels == () and plan.pretrain == () and len(plan.train) == 4


def _fake_run(job, val, test):
    Path(job.out_dir).mkdir(parents=True, exist_ok=True)
    Path(job.out_dir, "summary.json").write_text(json.dumps({"best_val_mrr": val, "best_epoch": 2, "rl_epochs": 4,
                                                              "seconds": 1.0, "device": "cpu",
                                                              "precision": "bfloat16"}))
    Path(job.eval_dir).mkdir(parents=True, exist_ok=True)
    Path(job.eval_dir, "metrics.json").write_text(json.dumps({"mrr": test, "hits@1": test / 2, "hits@3": test,
                                                               "hits@10": 2 * test}))


def test_results_mean_std_and_delta_against_the_default(tmp_path):
    raw = {**RAW, "sweeps": {"g": {"grid": {"rl.gamma": [0.9]}, "variants": ["raptor"],
                                   "notes": {"rl.gamma": "paper: 0.95"}}}}
    plan, _ = _plan(tmp_path, raw, "g")
    scores = {(DEFAULT_ARM, 0): 0.30, (DEFAULT_ARM, 1): 0.34, ("rl.gamma=0.9", 0): 0.40}
    for job in plan.train:
        if (job.arm, job.seed) in scores:
            _fake_run(job, scores[(job.arm, job.seed)] + 0.01, scores[(job.arm, job.seed)])
    res = write_results(plan)
    assert res["missing"] == ["rl.gamma=0.9-raptor-seed1"]
    default, gamma = res["arms"]
    assert default["arm"] == DEFAULT_ARM and default["seeds"] == [0, 1]
    assert default["test_mrr_mean"] == pytest.approx(0.32)
    assert default["test_mrr_std"] == pytest.approx(0.0282842712, rel=1e-6)  # sample std of 0.30, 0.34
    assert default["best_val_mrr_mean"] == pytest.approx(0.33)
    assert gamma["delta_test_mrr"] == pytest.approx(0.08)
    md = (Path(plan.out_dir) / "results.md").read_text()
    # the note of the key the arm overrides; the epochs trained (pretrain + RL) from the run's summary
    assert gamma["note"] == "paper: 0.95" and default["note"] == ""
    assert "| rl.gamma=0.9 | `rl.gamma: 0.9` | paper: 0.95 | raptor | 1 | 40 + 4 | 41.00 ± 0.00 | 40.00 ± 0.00 |" in md
    assert "+8.00" in md and "Missing (not yet trained or evaluated): rl.gamma=0.9-raptor-seed1" in md
    # Hits@10, the Hits@1 gap to the paper (none for this dataset), the validation peak (best_epoch 2: RL epoch 3)
    assert "| 80.00 ± 0.00 |  | 3 | +8.00 |" in md, md
    assert (Path(plan.out_dir) / "results.png").stat().st_size > 1000
    rows = (Path(plan.out_dir) / "results.csv").read_text().splitlines()
    assert rows[0].startswith("arm,variant,seed") and len(rows) == 4
    assert results_markdown(collect_results(plan)) == md


def test_the_table_says_the_hits1_gap_to_the_paper_and_where_validation_peaked():
    from raptor.reporting.sweep_page import paper_gap, peak_epochs

    arm = {"arm": "a", "variant": "raptor", "test_hits@1_mean": 0.30}
    assert paper_gap(arm, "ICEWS14") == "-4.37"  # RL-RAPTOR's Table 1 Hits@1 on ICEWS14: 34.37
    assert paper_gap({**arm, "variant": "titer"}, "ICEWS18", "hits@1") == "+8.38"  # TITer-150: 21.62
    assert paper_gap(arm, "SYNTH") == ""  # no paper number
    runs = [{"arm": "a", "variant": "raptor", "seed": 1, "best_epoch": 9},
            {"arm": "a", "variant": "raptor", "seed": 0, "best_epoch": 2},
            {"arm": "b", "variant": "raptor", "seed": 0, "best_epoch": 5},
            {"arm": "b", "variant": "raptor", "seed": 1, "best_epoch": 5},
            {"arm": "c", "variant": "raptor", "seed": 0}]
    results = {"runs": runs}
    assert peak_epochs(results, arm) == "3/10"  # RL epochs from 1, in seed order
    assert peak_epochs(results, {"arm": "b", "variant": "raptor"}) == "6"
    assert peak_epochs(results, {"arm": "c", "variant": "raptor"}) == "?"


def test_results_test_each_arm_against_the_default_per_query_and_over_seeds(tmp_path):
    from scipy import stats as sps

    from raptor.evaluation.ranking import write_predictions

    raw = {**RAW, "sweeps": {"g": {"grid": {"rl.gamma": [0.9]}, "variants": ["raptor"]}}}
    plan, _ = _plan(tmp_path, raw, "g")
    ranks = {(DEFAULT_ARM, 0): [1, 2, 4, 1, 3, 5], (DEFAULT_ARM, 1): [2, 2, 4, 1, 3, 1],
             ("rl.gamma=0.9", 0): [1, 1, 2, 1, 1, 5], ("rl.gamma=0.9", 1): [1, 2, 2, 1, 2, 1]}
    q = np.arange(6)
    for job in plan.train:
        r = np.asarray(ranks[(job.arm, job.seed)], dtype=np.float64)
        _fake_run(job, 0.5, float(np.mean(1 / r)))
        write_predictions(Path(job.eval_dir) / "predictions.parquet", np.stack([q, q, q + 1, q], 1),
                          np.zeros((6, 1), dtype=np.int64), np.zeros((6, 1)), r)
    res = write_results(plan)
    default, gamma = res["arms"]
    assert default["vs_default"] is None
    vs = gamma["vs_default"]
    rr = {k: 1 / np.asarray(v, dtype=np.float64) for k, v in ranks.items()}
    per_query = (rr[("rl.gamma=0.9", 0)] + rr[("rl.gamma=0.9", 1)] - rr[(DEFAULT_ARM, 0)] - rr[(DEFAULT_ARM, 1)]) / 2
    assert vs["seeds"] == [0, 1] and vs["queries"] == 6
    assert vs["mrr_diff"] == pytest.approx(per_query.mean()) == pytest.approx(gamma["delta_test_mrr"])
    by_seed = [rr[("rl.gamma=0.9", s)].mean() for s in (0, 1)], [rr[(DEFAULT_ARM, s)].mean() for s in (0, 1)]
    assert vs["seed_ttest_p"] == pytest.approx(sps.ttest_rel(*by_seed).pvalue)
    assert vs["wilcoxon_p"] == pytest.approx(sps.wilcoxon(per_query[per_query != 0]).pvalue)
    lo, hi = vs["bootstrap_ci"]
    assert 0 <= lo < per_query.mean() < hi <= per_query.max()  # no query got worse
    md = (Path(plan.out_dir) / "results.md").read_text()
    # equal validation MRR (0.5 both): the rule does not call it better, whatever the test says
    assert f"| [{100 * lo:+.2f}, {100 * hi:+.2f}] | {vs['wilcoxon_p']:.2g} | no clear difference |" in md


@pytest.mark.parametrize("d_val, ci, expected", [
    (+0.004, (+0.001, +0.006), "better"),            # validation higher, test CI above 0
    (+0.004, (-0.001, +0.006), "no clear difference"),  # the test CI covers 0
    (-0.001, (+0.001, +0.006), "no clear difference"),  # test up, validation down: they disagree
    (0.0, (+0.001, +0.006), "no clear difference"),     # a tie on validation decides nothing
    (-0.004, (-0.006, -0.001), "worse"),
    (+0.004, (-0.006, -0.001), "no clear difference"),
])
def test_verdict_needs_validation_and_the_test_ci_to_agree(d_val, ci, expected):
    from raptor.reporting.sweep_page import verdict

    default = {"arm": DEFAULT_ARM, "variant": "raptor", "best_val_mrr_mean": 0.42, "vs_default": None}
    arm = {"arm": "x=1", "variant": "raptor", "best_val_mrr_mean": 0.42 + d_val,
           "vs_default": {"bootstrap_ci": list(ci)}}
    assert verdict(arm, default) == expected
    assert verdict(default, default) == "" and verdict(arm, None) == ""
    assert verdict({**arm, "vs_default": None}, default) == ""  # an incomplete arm gets no verdict


def test_choice_tables_group_the_arms_that_override_the_same_keys():
    from raptor.reporting.sweep_page import choice_tables

    def arm(name, overrides, val, test):
        return {"arm": name, "variant": "raptor", "overrides": overrides, "note": "", "seeds": [0, 1],
                "epochs": "5 + 60", "best_val_mrr_mean": val, "best_val_mrr_std": 0.0, "test_mrr_mean": test,
                "test_mrr_std": 0.0, "delta_test_mrr": test - 0.40, "vs_default": None}

    results = {"arms": [arm(DEFAULT_ARM, {}, 0.41, 0.40), arm("k=1", {"a.k": 1}, 0.42, 0.41),
                        arm("k=2", {"a.k": 2}, 0.40, 0.39), arm("both", {"a.k": 1, "a.j": "x"}, 0.43, 0.42)]}
    md = choice_tables(results, {"a": {"k": 3, "j": "y"}})
    sections = md.split("#### ")[1:]
    assert [s.splitlines()[0] for s in sections] == ["`a.k`", "`a.j`, `a.k`"]
    k_rows = [line for line in sections[0].splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [r.split(" | ")[0] for r in k_rows] == ["| 3 (default)", "| 1", "| 2"]
    assert "| -1.00 |" in k_rows[2]
    assert "| y, 3 (default) |" in sections[1] and "| x, 1 |" in sections[1]
    # without the default's params (a folder lacking params/default.json) its values are not guessed
    unknown = choice_tables(results, None)
    assert "| default |  | raptor |" in unknown and "null" not in unknown and "(default)" not in unknown
    # a figure per choice and variant, of the default and the choice's arms, under its table
    asked = []
    md = choice_tables(results, None, lambda keys, variant, arms: asked.append((keys, variant, arms)) or f"FIG {keys}")
    assert asked == [(("a.k",), "raptor", [DEFAULT_ARM, "k=1", "k=2"]), (("a.j", "a.k"), "raptor", [DEFAULT_ARM, "both"])]
    sections = md.split("#### ")[1:]
    assert sections[0].rstrip().endswith("FIG ('a.k',)") and sections[1].rstrip().endswith("FIG ('a.j', 'a.k')")


def test_sweeps_page_is_generated_from_the_folder_with_curves_of_every_arm(tmp_path, capsys):
    from raptor.cli import main

    raw = {**RAW, "sweeps": {"g": {"grid": {"rl.gamma": [0.9]}, "variants": ["raptor"], "description": "gamma",
                                   "notes": {"rl.gamma": "paper: 0.95"}}}}
    plan, _ = _plan(tmp_path, raw, "g")
    for job in plan.train:
        if job.seed == 0:
            _fake_run(job, 0.41 if job.arm == DEFAULT_ARM else 0.43, 0.40)
            hist = [{"epoch": e, "reward": 0.1 * e, **({"val_mrr": 0.3 + 0.01 * e} if e % 2 else {})} for e in range(5)]
            Path(job.out_dir, "history.json").write_text(json.dumps(hist))
    write_results(plan)
    (Path(plan.out_dir) / "COMMIT").write_text("0123456789abcdef\n")
    out = tmp_path / "docs" / "sweeps.md"
    assert main(["sweeps", f"choices={plan.out_dir}", "--out", str(out)]) == 0
    md = out.read_text()
    assert "## choices: sweep `g` on T" in md and "gamma" in md and "Code: commit 0123456789ab." in md
    assert "Trained on: cpu, bfloat16 (2 runs)." in md  # from the runs' summaries
    assert "| rl.gamma=0.9 | `rl.gamma: 0.9` | paper: 0.95 | raptor | 1 | 40 + 4 | 43.00 ± 0.00 |" in md
    # a table per choice: the default's value read from its resolved params, then the arm's
    default_gamma = json.loads((Path(plan.out_dir) / "params" / "default.json").read_text())["rl"]["gamma"]
    assert default_gamma != 0.9
    choice = md.split("### By choice", 1)[1]
    assert "#### `rl.gamma`" in choice
    assert f"| {default_gamma} (default) |  | raptor | 1 | 40 + 4 | 41.00 ± 0.00 | 40.00 ± 0.00 |  |  |" in choice
    assert "| 0.9 | paper: 0.95 | raptor | 1 | 40 + 4 | 43.00 ± 0.00 | 40.00 ± 0.00 | +0.00 |  |" in choice
    figs = sorted(p.name for p in (tmp_path / "docs" / "figures" / "sweeps").iterdir())
    assert figs == ["choices-t-raptor-rl-gamma.png", "choices-t-raptor-val-mrr.png", "choices-t-test-mrr.png"]
    assert "](figures/sweeps/choices-t-raptor-val-mrr.png)" in md
    # under the choice's table, its arms' validation and reward curves beside the default's
    table = choice.split("#### `rl.gamma`", 1)[1]
    assert "![rl.gamma: validation MRR and training reward](figures/sweeps/choices-t-raptor-rl-gamma.png)" in table
    # a folder that is not a finished sweep: one clear line, no page
    assert main(["sweeps", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.md")]) == 1
    assert "not a finished sweep folder" in capsys.readouterr().err and not (tmp_path / "x.md").exists()


def test_overrides_key_wins_over_the_profile_and_loses_to_the_local_file(tmp_path):
    raw = {**RAW, "profile": "small", "overrides": {"rl": {"epochs": 7}, "pretrain.batch_size": 32}}
    assert params_from_dict(raw).rl.epochs == 7 and params_from_dict(raw).pretrain.batch_size == 32
    assert params_from_dict(raw, {"rl.epochs": 9}).rl.epochs == 9
    with pytest.raises(ConfigError, match="overrides.train.variants"):
        params_from_dict({**raw, "overrides": {"train.variants": ["raptor"]}})
    with pytest.raises(ConfigError, match="overrides.profile: cannot be overridden"):
        params_from_dict({**raw, "overrides": {"profile": "small"}})


@pytest.mark.parametrize("name", ["s", "prod"])
def test_dvc_experiments_of_a_sweep_resolve_to_the_arms_params(tmp_path, name):
    """Each arm's `dvc exp run -S ...`, applied to params.yaml by DVC's own override code, gives
    exactly the params the Prefect sweep trains that arm with."""
    from dvc.utils.hydra import apply_overrides

    from raptor.config import params_to_dict
    from raptor.pipeline.sweep import dvc_commands

    source = tmp_path / "params.yaml"
    source.write_text(yaml.safe_dump(RAW))
    sweep, params = load_sweep(source, name)
    commands = dvc_commands(sweep)
    assert [c[:5] for c in commands] == [["dvc", "exp", "run", "--queue", "-n"]] * len(sweep.arms)
    for cmd, arm in zip(commands, sweep.arms):
        assert cmd[5] == f"{name}-{arm.name}"
        exp = tmp_path / f"exp-{arm.name}.yaml"
        exp.write_text(source.read_text())
        apply_overrides(exp, [cmd[i + 1] for i, c in enumerate(cmd) if c == "-S"])
        assert params_to_dict(load_params(exp)) == params_to_dict(params[arm.name]), arm.name


def test_dvc_script_marks_the_evaluation_only_arms(tmp_path):
    """`flows sweep --dvc`'s lines: every arm's command as :func:`dvc_commands` gives it, an evaluation-only
    arm's (test-time eval params alone) after one shell comment naming its overrides; no other comment."""
    import shlex

    from raptor.pipeline.sweep import dvc_commands, dvc_script

    raw = {**RAW, "sweeps": {"e": {"arms": {"both": {"eval.beam_size": 20, "rl.gamma": 0.9}},
                                   "grid": {"eval.rank_last_expansions": [True], "rl.gamma": [0.9]}}}}
    source = tmp_path / "params.yaml"
    source.write_text(yaml.safe_dump(raw))
    sweep, params = load_sweep(source, "e")
    lines = dvc_script(sweep, params)
    comments = [i for i, line in enumerate(lines) if line.startswith("#")]
    commands = [shlex.split(line) for line in lines if not line.startswith("#")]
    assert commands == dvc_commands(sweep)
    assert len(comments) == 1 and lines[comments[0] + 1].split()[5] == "e-eval.rank_last_expansions=true"
    assert "arm eval.rank_last_expansions=true: evaluation-only (eval.rank_last_expansions=True)" in lines[comments[0]]
    # why it trains again: every fine-tuning stage of dvc.yaml depends on the test-time eval params
    from raptor.config import TEST_TIME_EVAL_KEYS
    from raptor.pipeline.stages import expand_params, main_stages

    finetune = [st for st in main_stages(["pure_rl", "raptor", "titer"]) if st.kind == "finetune"]
    assert len(finetune) == 3
    for st in finetune:
        assert set(TEST_TIME_EVAL_KEYS) <= set(expand_params(st.params, params[DEFAULT_ARM])), st.name


def test_a_record_stands_for_the_run_it_was_saved_from_only(tmp_path):
    """:func:`recorded_runs`: a job whose record in the results folder has the job's own fingerprint
    and epoch budget needs no training; another input, params or budget, or no record: it trains."""
    from raptor.pipeline.experiment import effective_epochs
    RUN_CONFIG_FILE = "run_config.json"
    from raptor.evaluation.ranking import write_predictions
    from raptor.pipeline.sweep import expected_fingerprint, job_dirs, recorded_runs, save_job_record

    raw = {**RAW, "sweeps": {"g": {"grid": {"rl.gamma": [0.9]}, "variants": ["pure_rl"]}}}
    plan, params = _plan(tmp_path, raw, "g")
    hashes = {"data": "d" * 64, "graph": "g" * 64}
    job = plan.train[0]
    _fake_run(job, 0.41, 0.40)
    fp = expected_fingerprint(params[job.arm], job, hashes)
    Path(job.out_dir, RUN_CONFIG_FILE).write_text(json.dumps(fp))
    Path(job.out_dir, "history.json").write_text("[]")
    n = effective_epochs(params[job.arm], job.variant, 0)
    Path(job.out_dir, "summary.json").write_text(json.dumps({"rl_epochs": n, "best_val_mrr": 0.41}))
    q = np.arange(4)
    write_predictions(Path(job.eval_dir) / "predictions.parquet", np.stack([q, q, q, q], 1),
                      np.zeros((4, 1), dtype=np.int64), np.zeros((4, 1)), np.ones(4))
    results = tmp_path / "results"
    save_job_record(plan, job, results)
    assert job_dirs(plan, job, results)[0] == results / "train" / job.arm / "pure_rl" / "seed0"
    assert recorded_runs(plan, params, hashes, results) == {job.run_name: {"rl_epochs": n, "best_val_mrr": 0.41}}
    assert recorded_runs(plan, params, {**hashes, "data": "e" * 64}, results) == {}  # other data
    other = {**params, job.arm: params["rl.gamma=0.9"]}
    assert recorded_runs(plan, other, hashes, results) == {}                       # other params
    # the tables are made from the records alone, and the folder is one the sweeps page reads
    res = write_results(plan, results)
    assert [r["test_mrr"] for r in res["runs"]] == [0.40] and len(res["missing"]) == 3
    assert (results / "sweep.json").is_file() and (results / "params" / f"{DEFAULT_ARM}.json").is_file()
    assert not (Path(plan.out_dir) / "results.json").exists()


def test_records_are_shown_against_the_declaration_beside_them_not_this_checkout(tmp_path):
    """:func:`declared_records` (what ``--from-records`` logs): a complete record whose fingerprint agrees
    with its arm's declaration in the results folder is used, whatever code or data made it; a record of
    other params, of another seed, or without its arm's declaration is refused and says why; a partial
    record is neither."""
    RUN_CONFIG_FILE = "run_config.json"
    from raptor.evaluation.ranking import write_predictions
    from raptor.pipeline.sweep import declared_records, expected_fingerprint, job_dirs, save_job_record

    raw = {**RAW, "sweeps": {"g": {"grid": {"rl.gamma": [0.9]}, "variants": ["pure_rl"]}}}
    plan, params = _plan(tmp_path, raw, "g")
    results = tmp_path / "results"
    q = np.arange(4)
    for i, job in enumerate(plan.train):
        _fake_run(job, 0.41, 0.40 + i / 100)
        fp = expected_fingerprint(params[job.arm], job, {"data": "d" * 64, "graph": "g" * 64})
        Path(job.out_dir, RUN_CONFIG_FILE).write_text(json.dumps({**fp, "code": f"code of run {i}"}))
        Path(job.out_dir, "history.json").write_text("[]")
        write_predictions(Path(job.eval_dir) / "predictions.parquet", np.stack([q, q, q, q], 1),
                          np.zeros((4, 1), dtype=np.int64), np.zeros((4, 1)), np.ones(4))
        save_job_record(plan, job, results)
    write_results(plan, results)  # the declaration beside the records
    names = [j.run_name for j in plan.train]
    used, refused = declared_records(plan, results)
    assert sorted(used) == sorted(names) and refused == {}
    assert used[names[0]]["best_val_mrr"] == 0.41

    by_name = {j.run_name: j for j in plan.train}
    gamma = next(n for n in names if n.startswith("rl.gamma=0.9") and n.endswith("seed0"))
    (results / "params" / "rl.gamma=0.9.json").write_text(
        (results / "params" / f"{DEFAULT_ARM}.json").read_text())          # declared as the default's params
    seed1 = f"{DEFAULT_ARM}-pure_rl-seed1"
    rt = job_dirs(plan, by_name[seed1], results)[0] / RUN_CONFIG_FILE
    rt.write_text(json.dumps({**json.loads(rt.read_text()), "seed": 7}))
    partial = f"{DEFAULT_ARM}-pure_rl-seed0"
    (job_dirs(plan, by_name[partial], results)[1] / "ranks.parquet").unlink()
    used, refused = declared_records(plan, results)
    assert partial not in used and partial not in refused
    assert "rl.gamma: 0.9, declared 0.95" in refused[gamma] and "seed: 7, job 1" in refused[seed1]
    assert sorted(used) == []
    (results / "params" / "rl.gamma=0.9.json").unlink()
    assert "rl.gamma=0.9.json missing" in declared_records(plan, results)[1][gamma]


def test_the_combination_takes_better_arms_whole_and_lets_validation_pick_within_a_key():
    from raptor.reporting.sweep_page import combination, combination_markdown

    def arm(name, overrides, val, ci):
        return {"arm": name, "variant": "raptor", "overrides": overrides, "best_val_mrr_mean": val,
                "vs_default": None if ci is None else {"bootstrap_ci": list(ci)}}

    up, down, flat = (0.001, 0.004), (-0.004, -0.001), (-0.001, 0.003)
    arms = [arm(DEFAULT_ARM, {}, 0.420, None),
            arm("mlp=128", {"model.mlp_hidden_dim": 128}, 0.424, up),      # better
            arm("mlp=512", {"model.mlp_hidden_dim": 512}, 0.426, up),      # better, higher validation: taken
            arm("lr", {"rl.learning_rate": 3e-4}, 0.423, up),              # better
            arm("static", {"model.relation_dim": 176}, 0.425, flat),       # unclear: not taken
            arm("entropy", {"rl.entropy_decay": 1.0}, 0.410, down)]        # worse
    res = {"arms": arms, "missing": []}
    assert combination(res, "raptor") == {"model.mlp_hidden_dim": 512, "rl.learning_rate": 3e-4}
    assert "not trained together yet" in combination_markdown(res)
    res["arms"].append(arm("combined", {"model.mlp_hidden_dim": 512, "rl.learning_rate": 3e-4}, 0.421, flat))
    assert "arm `combined`: no clear difference" in combination_markdown(res)
    none = {"arms": [arms[0], arms[4], arms[5]], "missing": []}
    assert combination(none, "raptor") is None and "no reading is `better`" in combination_markdown(none)


@pytest.mark.parametrize("arm", ["default", "wide", "rl.gamma=0.9", "labeling.max_in_edges=50"])
def test_an_arms_params_file_loads_as_the_sweep_resolves_the_arm(tmp_path, arm):
    """write_arm_params (a sweep's arm trained as a long run): the file's own ``overrides`` (a long-runs
    folder's --set), then the base's profile and keys, then the arm's, exactly as :func:`arm_params`."""
    from raptor.pipeline.sweep import write_arm_params

    src = tmp_path / "params.yaml"
    src.write_text(yaml.safe_dump(RAW) + "overrides:\n  rl.gamma: 0.8\n  train.precision: float32\n")
    out = tmp_path / "arm.yaml"
    p = write_arm_params(src, "s", arm, out)
    sweep, params = load_sweep(src, "s")
    assert load_params(out) == p == params[arm]
    assert p.train.precision == "float32" and p.rl.epochs == 4 and p.pretrain.epochs == 3  # file, base, profile
    assert p.rl.gamma == (0.9 if arm == "rl.gamma=0.9" else 0.8)  # the arm wins over the file's own overrides
    with pytest.raises(ConfigError, match=r"params.yaml: sweeps.s: no arm 'nope' \(arms: default, wide, "):
        write_arm_params(src, "s", "nope", tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="no sweep 'x'"):
        write_arm_params(src, "x", "default", tmp_path / "x.yaml")
    assert not (tmp_path / "nope.yaml").exists() and not (tmp_path / "x.yaml").exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["arm.yaml", "params.yaml"]  # no temporary file left
