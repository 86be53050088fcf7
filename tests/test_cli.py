import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_raw_dataset

from raptor.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_stage(capsys):
    parser = build_parser()
    text = parser.format_help()
    for stage in ("ingest", "graph"):
        assert stage in text


def test_help_loads_no_agent_nor_torch():
    """`raptor --help` builds every subcommand's parser from facts: no agent's code, torch or scipy is
    imported (they took seconds before each help text)."""
    code = ("import sys\nfrom raptor.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('torch', 'scipy', 'raptor.agents.base', 'raptor.agents.policy') if m in sys.modules]\n"
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ablation-pretrain" in out.stdout


def test_ingest_and_graph_cli(params_file, tiny_raw, tmp_path, capsys):
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", str(params_file)]) == 0
    assert main(["graph", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "g.npz")]) == 0
    out = capsys.readouterr().out
    assert "train 4" in out and "16 edges" in out


def test_ingest_of_a_raw_folder_needs_no_params_file(tiny_raw, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml here
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "train.parquet").is_file()
    # naming a dataset reads its entry from the params file, and says which file is missing
    assert main(["ingest", "--dataset", "ICEWS14", "--out", str(tmp_path / "e")]) == 1
    err = capsys.readouterr().err
    assert "params.yaml" in err and "Traceback" not in err


def test_cli_error_is_one_clear_line(params_file, tiny_raw, tmp_path, capsys):
    (tiny_raw / "train.txt").unlink()
    rc = main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", str(params_file)])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("raptor ingest: error:") and "train.txt" in err
    assert "Traceback" not in err


def test_an_output_over_an_input_or_a_users_folder_is_refused_and_nothing_is_lost(params_file, tiny_raw, tmp_path,
                                                                                  capsys):
    """The audit's cases: `--out` naming the raw folder, the ingested data or a user's folder deleted
    them without a word (exit 0); a file where a folder was asked for became a folder."""
    raw_files = sorted(p.name for p in tiny_raw.iterdir())
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tiny_raw), "--params", str(params_file)]) == 1
    assert "raw holds files and is not an ingested dataset" in capsys.readouterr().err
    assert sorted(p.name for p in tiny_raw.iterdir()) == raw_files
    data = tmp_path / "d"
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(data), "--params", str(params_file)]) == 0
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(data), "--params", str(params_file)]) == 0  # again: replaced
    assert main(["graph", "--data", str(data), "--out", str(tmp_path / "g.npz")]) == 0
    ingested = sorted(p.name for p in data.iterdir())
    capsys.readouterr()
    rc = main(["label", "--data", str(data), "--graph", str(tmp_path / "g.npz"), "--out", str(data),
               "--params", str(params_file)])
    err = capsys.readouterr().err
    assert rc == 1 and "d holds files and is not a label table" in err and "Traceback" not in err
    assert sorted(p.name for p in data.iterdir()) == ingested
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep")
    assert main(["synthetic", "--out", str(user)]) == 1
    assert "mine holds files and is not a synthetic dataset" in capsys.readouterr().err
    assert (user / "notes.txt").read_text() == "keep"
    assert main(["synthetic", "--out", str(tmp_path / "syn")]) == 0
    assert main(["synthetic", "--out", str(tmp_path / "syn")]) == 0  # its own output: replaced
    rc = main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "g.npz"), "--params", str(params_file)])
    err = capsys.readouterr().err
    assert rc == 1 and "g.npz exists and is not a folder" in err and (tmp_path / "g.npz").is_file()


def test_console_script_runs():
    exe = Path(sys.executable).with_name("raptor")
    out = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=True).stdout
    assert "ingest" in out


def test_report_where_lists_every_output(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text("datasets:\n  A: {raw_dir: raw}\n  B: {raw_dir: raw}\n")
    (tmp_path / "data" / "A" / "ingested").mkdir(parents=True)
    assert main(["report", "--where", "--params", str(params), "--root", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    ingest_a = next(line for line in lines if line.startswith("ingest@A "))
    assert "data/A/ingested" in ingest_a and "not yet produced" not in ingest_a  # exists: no marker
    assert any(line.startswith("finetune-raptor@B ") and "runs/B/raptor/train" in line
               and line.endswith("(not yet produced)") for line in lines)
    assert any("reports/A/report" in line for line in lines) and any("mlflow.db" in line for line in lines)


def _commands(parser) -> dict:
    return parser._subparsers._group_actions[0].choices


def test_help_of_every_command(capsys):
    parser = build_parser()
    for name, sub in _commands(parser).items():
        assert "usage: raptor " + name in sub.format_help()
    for name in ("synthetic", "ingest", "graph", "label", "train", "evaluate", "report", "explain"):
        assert name in _commands(parser)


def _declared_kinds() -> list[str]:
    from raptor.agents import variants
    from raptor.pipeline.stages import ablation_stages, main_stages

    kinds: list[str] = []
    for s in main_stages(list(variants.VARIANTS)) + ablation_stages():
        if s.flow not in kinds:
            kinds.append(s.flow)
    return kinds


def test_stage_subcommands_are_the_declarations_stages_and_the_flows():
    """`raptor`'s stages are the declaration's (dvc.yaml's names; per-variant stages as one with
    --variant), those of `python -m flows` (which runs no params stage, and has pipeline, sweep and results)."""
    from flows.__main__ import build_parser as flows_parser

    from raptor.cli import LIBRARY_MODULES

    kinds = _declared_kinds()
    commands = _commands(build_parser())
    stages = [n for n, p in commands.items() if p.get_default("_kind")]
    assert stages == kinds  # in pipeline order
    assert {"pretrain", "finetune", "significance", "params", "ablation"} <= set(stages)
    assert set(commands) - set(stages) == {m.rsplit(".", 1)[1] for m in LIBRARY_MODULES}
    assert set(_commands(flows_parser())) == (set(kinds) - {"params"}) | {"pipeline", "sweep", "results"}
    # `raptor --help`: the stages in pipeline order, then the library commands
    text = build_parser().format_help()
    lines = [line.split()[0] for line in text.split("stages, in pipeline order")[1].splitlines()
             if line.startswith("  ") and line.split()]
    assert lines[:len(kinds)] == kinds and set(lines[len(kinds):]) == set(commands) - set(stages)


def test_every_stage_takes_the_options_of_its_flow(capsys):
    """Each stage's --help works in both front doors, with the same options."""
    from flows.__main__ import build_parser as flows_parser

    ours, theirs = _commands(build_parser()), _commands(flows_parser())
    for kind in _declared_kinds():
        text = ours[kind].format_help()
        assert f"usage: raptor {kind}" in text
        if kind == "params":
            assert "--local" in text
            continue
        options = {o for a in theirs[kind]._actions for o in a.option_strings}
        assert {"--dataset", "--params", "--in", "--out"} <= options
        assert options <= {o for a in ours[kind]._actions for o in a.option_strings}
        assert ("--variant" in options) == (kind in ("finetune", "evaluate"))


def _project(root: Path, variants=("pure_rl", "raptor")) -> Path:
    """A project folder: params.yaml with one dataset (TINY, raw/), its resolved params."""
    from raptor.pipeline.stages import PARAMS_FILE, resolve_params

    write_raw_dataset(root / "raw")
    (root / "params.yaml").write_text("datasets:\n  TINY: {raw_dir: raw, start_date: '2014-01-01'}\n"
                                      f"train: {{variants: [{', '.join(variants)}]}}\n")
    resolve_params(root / "params.yaml", root / "params.local.yaml", root / PARAMS_FILE)
    return root


def test_a_stage_defaults_to_the_paths_dvc_yaml_gives_it(tmp_path, monkeypatch):
    """`raptor finetune --dataset TINY --variant raptor` runs the flow with dvc.yaml's command's
    arguments (every path, the resolved params)."""
    import shlex

    from raptor.commands.stage import stage_call
    from raptor.pipeline.stages import PARAMS_FILE, command, main_stages

    monkeypatch.chdir(_project(tmp_path))
    for path in ("data/TINY/ingested", "data/TINY/graph.npz", "runs/TINY/pretrain"):
        (tmp_path / path).mkdir(parents=True)
    args = build_parser().parse_args(["finetune", "--dataset", "TINY", "--variant", "raptor", "--params", PARAMS_FILE])
    call = stage_call("finetune", args)
    stage = next(s for s in main_stages(["pure_rl", "raptor"]) if s.name == "finetune-raptor")
    argv = shlex.split(command(stage, "TINY"))
    given = {argv[i + 1] for i, a in enumerate(argv) if a in ("--in", "--out")}
    assert given == {f"{k}={v}" for k, v in call.inputs.items()} | {f"{k}={v}" for k, v in call.outputs.items()}
    assert (call.dataset, call.params, call.variant) == ("TINY", PARAMS_FILE, "raptor")
    # one option given: the others keep their defaults; the only dataset needs no --dataset
    args = build_parser().parse_args(["significance", "--params", PARAMS_FILE, "--out", "out=x.json"])
    for path in ("runs/TINY/pure_rl/eval", "runs/TINY/raptor/eval"):
        (tmp_path / path).mkdir(parents=True)
    call = stage_call("significance", args)
    assert call.outputs == {"out": "x.json"} and set(call.inputs) == {"eval_pure_rl", "eval_raptor"}


@pytest.mark.parametrize("argv, says", [
    (["graph", "--in", "bogus=x"], "raptor graph: error: --in bogus: graph has no such input (its inputs: data)"),
    (["graph", "--in", "data"], "raptor graph: error: --in 'data': expected NAME=PATH"),
    (["graph"], "raptor graph: error: --in data=data/TINY/ingested: not found (run `raptor ingest --dataset TINY` first)"),
    (["finetune"], "raptor finetune: error: --variant: finetune runs one variant: give one of pure_rl, raptor, titer"),
    (["label", "--dataset", "NOPE"], "raptor label: error: datasets: no dataset 'NOPE' (listed: TINY; registered: "),
    (["graph", "--data", "d", "--in", "data=d"], "raptor graph: error: --data selects the direct form, --in the stage "
                                                 "form: use one"),
    (["graph", "--out", "g.npz"], "raptor graph: error: the direct form needs --data (a bare --out PATH selects the "
                                  "direct form; the stage form takes --out NAME=PATH)"),
    (["graph", "--data", "d", "--out", "g.npz", "--dataset", "TINY"], "raptor graph: error: --dataset: the direct "
                                                                      "form of graph reads the dataset given with its paths"),
    (["report", "--out", "x"], "raptor report: error: the direct form of report is --where (where every output is); "
                               "the report stage takes --dataset D and --out NAME=PATH"),
    (["evaluate", "--variant", "nope"], "raptor evaluate: error: argument --variant: invalid choice: 'nope'"),
])
def test_a_bad_stage_argument_is_one_clear_line(tmp_path, monkeypatch, capsys, argv, says):
    from raptor.pipeline.stages import PARAMS_FILE

    monkeypatch.chdir(_project(tmp_path))
    try:
        rc = main(argv + ["--params", PARAMS_FILE])
    except SystemExit as exc:  # argparse's own errors: one line too
        rc = exc.code
    err = capsys.readouterr().err
    assert rc in (1, 2) and err.startswith(says) and err.count("\n") == 1, err
    assert not (tmp_path / "data" / "TINY" / "graph.npz").exists()


@pytest.mark.parametrize("argv", [
    ["train", "--data", "d", "--graph", "g.npz", "--out", "o", "--seed", "-1"],
    ["explain", "Obama", "Consult", "2014-01-02", "--seed", "-1"],
])
def test_a_negative_seed_is_an_argument_error(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"raptor {argv[0]}: error: argument --seed: must be >= 0, got -1"), err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit):
        main(argv[:-1] + ["x"])
    assert "error: argument --seed: expected an integer, got 'x'" in capsys.readouterr().err


def test_a_stage_without_params_runs_the_params_stage_first(tmp_path, monkeypatch, capsys):
    """No --params: params.yaml (+ params.local.yaml) resolved into build/params.json, as `dvc repro`
    runs the params stage first; here dvc.yaml is missing, and the params stage says so."""
    from raptor.pipeline import stages

    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "build" / "params.json").unlink()
    assert main(["graph"]) == 1
    err = capsys.readouterr().err
    assert f"no dvc.yaml in {tmp_path.resolve()}: run the stages from the project's root folder" in err
    assert "out of date" not in err and "@@" not in err  # no diff against a file that is not there
    (tmp_path / "dvc.yaml").write_text(stages.dvc_yaml(stages.load_params("params.yaml")))
    assert main(["graph"]) == 1
    err = capsys.readouterr().err
    assert "-> build/params.json" in err and "--in data=data/TINY/ingested: not found" in err
    assert (tmp_path / "build" / "params.json").is_file()


def test_sweep_front_door_runs_the_flows_options(tmp_path, capsys):
    """`raptor sweep --dvc` prints what `python -m flows sweep --dvc` prints; the local options are
    refused with the flow's."""
    from flows.__main__ import main as flows_main

    params = tmp_path / "params.yaml"
    params.write_text("datasets:\n  T: {raw_dir: raw}\nsweeps:\n  t: {grid: {rl.gamma: [0.9, 0.8]}}\n")
    # --local of the test's own: the default, params.local.yaml of the working folder, is a user's file
    common = ["t", "--dataset", "T", "--params", str(params), "--local", str(tmp_path / "none.yaml"), "--dvc"]
    assert main(["sweep", *common]) == 0
    ours = capsys.readouterr().out
    assert flows_main(["sweep", *common]) == 0
    assert capsys.readouterr().out == ours and ours.count("dvc exp run --queue") == 3
    assert main(["sweep", *common, "--jobs", "2"]) == 1
    assert capsys.readouterr().err.startswith("raptor sweep: error: --jobs: not with --prefect")
    # an error inside the flow's path is the front door's own: its name and exit status, as without --prefect
    unknown = ["nosuch", *common[1:-1], "--list"]
    assert main(["sweep", *unknown]) == 1
    err = capsys.readouterr().err
    assert err.startswith("raptor sweep: error:") and "no sweep 'nosuch' (known: t)" in err
    assert flows_main(["sweep", *unknown]) == 1
    assert capsys.readouterr().err.startswith("python -m flows sweep: error:")


@pytest.mark.slow
def test_a_stage_through_raptor_writes_what_the_flow_writes(tmp_path):
    """`raptor ingest` and `raptor graph` (dvc.yaml's paths by default) write what `python -m flows
    ingest|graph` writes (other paths given), each its stage's flow function (no Prefect API configured:
    without Prefect, flows/invocation.py)."""
    import json

    import numpy as np
    import pandas as pd

    from raptor.pipeline.stages import PARAMS_FILE

    proj = _project(tmp_path / "proj")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env.update(PYTHONPATH=str(ROOT), PREFECT_HOME=str(tmp_path / "prefect"),
               MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    raptor = [str(Path(sys.executable).with_name("raptor"))]
    flows = [sys.executable, "-m", "flows"]
    for cmd in (raptor + ["ingest", "--params", PARAMS_FILE], raptor + ["graph", "--params", PARAMS_FILE],
                flows + ["ingest", "--params", PARAMS_FILE, "--out", "out=other/ingested"],
                flows + ["graph", "--params", PARAMS_FILE, "--in", "data=other/ingested", "--out", "out=other/g.npz"]):
        proc = subprocess.run(cmd, cwd=proj, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # it says where it wrote, and its last line on stdout is still the result's JSON
        out = next(a.split("=", 1)[1] for a in cmd if a.startswith("out=")) if "--out" in cmd else \
            ("data/TINY/ingested" if "ingest" in cmd else "data/TINY/graph.npz")
        assert f"TINY: done -> out={out}" in proc.stderr, proc.stderr[-2000:]
        json.loads(proc.stdout.strip().splitlines()[-1])
    ours, theirs = proj / "data" / "TINY" / "ingested", proj / "other" / "ingested"
    names = sorted(p.name for p in ours.iterdir())
    assert names == sorted(p.name for p in theirs.iterdir()) and "train.parquet" in names
    for name in names:
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(ours / name), pd.read_parquet(theirs / name))
    with np.load(proj / "data" / "TINY" / "graph.npz") as a, np.load(proj / "other" / "g.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])


def _tiny_raw_and_params(tmp_path: Path, budget: str) -> tuple[Path, Path]:
    """A synthetic raw dataset and a params file of a tiny model with ``budget`` (YAML lines)."""
    from raptor.data.synthetic import SyntheticSpec, write_raw

    raw = write_raw(tmp_path / "raw", SyntheticSpec())
    params = tmp_path / "p.yaml"
    params.write_text("env: {max_actions: 30}\n"
                      "model: {entity_dim: 16, relation_dim: 16, time_dim: 4, step_dim: 4, mlp_hidden_dim: 32}\n"
                      f"{budget}eval: {{valid_every: 1, beam_size: 10}}\ntrain: {{num_threads: 1}}\n")
    return raw, params


def test_direct_forms_apply_the_local_overrides_beside_their_params_and_say_what_they_read(tmp_path, capsys):
    """params.local.yaml beside --params is applied by train, label, evaluate and explain as by the stages
    (a profile chosen there used to be ignored, and the paper's budget started unannounced); --local
    names another file; the start line names what was read and the budget."""
    import json

    raw, params = _tiny_raw_and_params(tmp_path, "rl: {epochs: 3, batch_size: 256}\n")
    (tmp_path / "params.local.yaml").write_text("rl.epochs: 1\n")
    assert main(["ingest", "--raw", str(raw), "--out", str(tmp_path / "ing"), "--params", str(params)]) == 0
    assert main(["graph", "--data", str(tmp_path / "ing"), "--out", str(tmp_path / "g.npz")]) == 0
    capsys.readouterr()
    common = ["--data", str(tmp_path / "ing"), "--graph", str(tmp_path / "g.npz"), "--params", str(params)]
    assert main(["train", *common, "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (f"train pure_rl seed 0: params {params} + {tmp_path / 'params.local.yaml'} (profile paper); "
                     f"1 RL epoch; cpu, float32 -> {tmp_path / 'run'}")
    assert len(json.loads((tmp_path / "run/rl/history.json").read_text())) == 1
    other = tmp_path / "other.yaml"
    other.write_text("rl: {epochs: 2}\n")
    assert main(["train", *common, "--local", str(other), "--out", str(tmp_path / "run2"), "--no-progress"]) == 0
    assert len(json.loads((tmp_path / "run2/rl/history.json").read_text())) == 2
    assert main(["train", *common, "--local", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "run3")]) == 1
    assert capsys.readouterr().err.strip().endswith(f"--local {tmp_path / 'none.yaml'}: no such file "
                                                    "(`--local none`: no local overrides)")
    # --local none: the file beside --params is not read (params.yaml's 3 epochs)
    assert main(["train", *common, "--local", "none", "--out", str(tmp_path / "run4"), "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(f"train pure_rl seed 0: params {params} (profile paper); "
                                                              "3 RL epochs;")
    assert len(json.loads((tmp_path / "run4/rl/history.json").read_text())) == 3
    # the start line says the epochs the run trains: under train.equal_total_epochs a variant without
    # pretraining trains pretrain.epochs more
    other.write_text("train.equal_total_epochs: true\npretrain.epochs: 2\nrl.epochs: 1\n")
    assert main(["train", *common, "--local", str(other), "--out", str(tmp_path / "run5"), "--no-progress"]) == 0
    assert "; 3 RL epochs;" in capsys.readouterr().out.splitlines()[0]
    assert len(json.loads((tmp_path / "run5/rl/history.json").read_text())) == 3
    (tmp_path / "params.local.yaml").write_text("eval.beam_size: 3\n")  # evaluate reads it too
    assert main(["evaluate", "--model", str(tmp_path / "run/rl/best.pt"), *common, "--out", str(tmp_path / "ev")]) == 0
    assert "beam 3, score rule max" in capsys.readouterr().out
    # explain: the data's own calendar (synthetic: time steps), not that of the one dataset params list
    # (ICEWS14 by default: dates in 2014 before); a baseline that walks no paths is refused in one line.
    assert main(["explain", "Entity 1", "0", "30", "--model", str(tmp_path / "run/rl/best.pt"), *common]) == 0
    out = capsys.readouterr().out
    assert "t=30)" in out.splitlines()[0] and "2014" not in out
    assert main(["train", *common, "--variant", "recurrency", "--out", str(tmp_path / "rec"), "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("train recurrency seed 0: fitted in ")
    assert main(["explain", "Entity 1", "0", "30", "--model", str(tmp_path / "rec/rl/best.pt"), *common]) == 1
    assert "ranks without paths: explain needs a model that walks paths (pure_rl, raptor, titer)" in \
        capsys.readouterr().err


def test_a_stage_prints_its_whole_result_as_the_last_line(tmp_path, monkeypatch, capsys):
    """Five seeds' summaries are over 2,000 characters: the line was cut there and could not be parsed."""
    import json

    from raptor.commands import stage

    result = [{"variant": "pure_rl", "seed": s, "summary": "x" * 600} for s in range(5)]
    monkeypatch.setattr(stage, "execute", lambda kind, args: result)
    assert main(["graph", "--dataset", "ICEWS14", "--params", str(tmp_path / "p.json")]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == result


def test_version_and_a_mistyped_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("raptor-tkg 0.1.0")
    with pytest.raises(SystemExit) as exc:
        main(["trian"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "invalid choice: 'trian'" in err and "; did you mean 'train'?" in err
    with pytest.raises(SystemExit):
        main(["zzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_a_stage_missing_its_variant_is_refused_before_the_params_stage_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(_project(tmp_path))
    (tmp_path / "build" / "params.json").unlink()
    assert main(["finetune"]) == 1
    assert "--variant: finetune runs one variant" in capsys.readouterr().err
    assert not (tmp_path / "build" / "params.json").exists()


def test_synthetic_says_what_each_option_means_and_refuses_a_spec_it_cannot_make(tmp_path, capsys):
    import dataclasses

    from raptor.commands import synthetic
    from raptor.data.synthetic import SyntheticSpec

    assert set(synthetic.FIELD_HELP) == {f.name for f in dataclasses.fields(SyntheticSpec)}
    assert main(["synthetic", "--out", str(tmp_path / "s"), "--num-relations", "5"]) == 1
    assert capsys.readouterr().err.strip() == ("raptor synthetic: error: num_relations: at least 6 (5 planted "
                                               "relations and noise), got 5")
    assert not (tmp_path / "s").exists()


def test_params_show_prints_what_a_run_would_read_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text("rl: {epochs: 7}\nprofiles:\n  small: {rl.batch_size: 64}\n")
    (tmp_path / "params.local.yaml").write_text("profile: small\neval.beam_size: 5\n")
    assert main(["params", "--show", "rl.epochs"]) == 0 and capsys.readouterr().out == "7\n"
    assert main(["params", "--show", "rl"]) == 0
    rl = yaml.safe_load(capsys.readouterr().out)
    assert rl["epochs"] == 7 and rl["batch_size"] == 64 and rl["gamma"] == 0.95  # file, profile, paper default
    assert main(["params", "--show"]) == 0
    whole = yaml.safe_load(capsys.readouterr().out)
    assert whole["eval"]["beam_size"] == 5 and whole["profile"] == "small"
    assert main(["params", "--show", "rl.nope"]) == 1
    assert "--show rl.nope: no key 'nope' there (keys: epochs, batch_size" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["params.local.yaml", "params.yaml"]


def test_explain_shows_paths_that_differ_only_in_where_they_stayed_once(tmp_path, monkeypatch, capsys):
    """A STOP step is not printed, so two such paths read the same: one line, with how many it stands for;
    fewer answers than --top are said to be all the beam reached."""
    from raptor.agents import beam
    from raptor.constants import stop_relation
    from raptor.data.synthetic import SyntheticSpec, write_raw

    raw = write_raw(tmp_path / "raw", SyntheticSpec())
    params = tmp_path / "p.yaml"
    params.write_text("model: {entity_dim: 8, relation_dim: 8, time_dim: 2, step_dim: 2, mlp_hidden_dim: 8}\n"
                      "rl: {epochs: 1, batch_size: 256}\neval: {valid_every: 1, beam_size: 5}\ntrain: {num_threads: 1}\n")
    assert main(["ingest", "--raw", str(raw), "--out", str(tmp_path / "ing"), "--params", str(params)]) == 0
    assert main(["graph", "--data", str(tmp_path / "ing"), "--out", str(tmp_path / "g.npz")]) == 0
    common = ["--data", str(tmp_path / "ing"), "--graph", str(tmp_path / "g.npz"), "--params", str(params)]
    assert main(["train", *common, "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    stop = stop_relation(SyntheticSpec().num_relations)
    move, wait = {"relation": 0, "time": 3, "to": 7}, {"relation": stop, "time": 3, "to": 7}
    answers = [{"entity": 7, "score": -1.0, "paths": [{"log_prob": -1.0, "hops": [move, wait, wait]},
                                                      {"log_prob": -1.5, "hops": [wait, move, wait]},
                                                      {"log_prob": -2.0, "hops": [wait, wait, wait]}]}]
    monkeypatch.setattr(beam, "explain", lambda *a, **k: answers)
    capsys.readouterr()
    assert main(["explain", "Entity 1", "0", "30", "--model", str(tmp_path / "run/rl/best.pt"), *common]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "(the beam reached 1 entity)" in out
    paths = [line for line in out if line.startswith("      p=")]
    assert len(paths) == 2 and paths[0].endswith("(and 1 more the same but for where the walk stayed)")
    assert paths[1].endswith("(stays at the subject)")


def test_a_stage_help_shows_the_paths_dvc_yaml_gives(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(data=data/<dataset>/ingested, graph=data/<dataset>/graph.npz, pretrain=runs/<dataset>/pretrain)" in text
    assert "(out=runs/<dataset>/<variant>/train)" in text


def test_a_closed_stdout_ends_a_command_quietly_and_another_broken_pipe_is_not_hidden(monkeypatch, capsys):
    import sys

    from raptor import cli

    def closed_reader(args):
        raise BrokenPipeError(32, "Broken pipe")

    class Stdout:  # the reader of stdout left: flushing it fails too
        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return sys.__stdout__.fileno()

    monkeypatch.setattr("os.dup2", lambda a, b: None)  # stdout is not redirected for real in a test
    parser = cli.build_parser()
    args = parser.parse_args(["results", "x", "--out", "y"])
    args._run = closed_reader
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(sys, "stdout", Stdout())
    assert cli.main([]) == 1
    monkeypatch.undo()
    # stdout still open: the broken pipe is another one's, raised as it is
    parser = cli.build_parser()
    args = parser.parse_args(["results", "x", "--out", "y"])
    args._run = closed_reader
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    with pytest.raises(BrokenPipeError):
        cli.main([])


def test_train_dry_run_says_per_phase_what_a_run_would_do_and_writes_nothing(tmp_path, capsys):
    """`raptor train --dry-run` prints the start line and, per phase, start / continue after epoch k /
    nothing to do / start afresh (why) / refuse (--resume-only), as the run then does; it writes nothing."""
    import json

    raw, params = _tiny_raw_and_params(tmp_path, "rl: {epochs: 2, batch_size: 256}\npretrain: {epochs: 1}\n")
    ing, graph, labels, out = (str(tmp_path / n) for n in ("ing", "g.npz", "lab", "run"))
    assert main(["ingest", "--raw", str(raw), "--out", ing, "--params", str(params)]) == 0
    assert main(["graph", "--data", ing, "--out", graph]) == 0
    assert main(["label", "--data", ing, "--graph", graph, "--out", labels, "--params", str(params),
                 "--local", "none"]) == 0
    common = ["train", "--data", ing, "--graph", graph, "--params", str(params), "--local", "none", "--out", out,
              "--variant", "raptor", "--labels", labels, "--no-progress"]

    def dry(*extra) -> list[str]:
        capsys.readouterr()
        assert main([*common, "--dry-run", *extra]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].startswith("train raptor seed 0: params ") and len(lines) == 3
        return [line.split(": ", 1)[1] for line in lines[1:]]

    assert dry() == ["would start (1 epochs)", "decided once pretraining has written pretrained-e1.pt (its weights "
                     "are the RL run's input)"]
    assert not (tmp_path / "run").exists()
    assert main(common) == 0
    tree = sorted((str(f), f.stat().st_mtime_ns) for f in (tmp_path / "run").rglob("*"))
    assert dry() == ["already trained (1 of 1 epochs): nothing to do", "already trained (2 of 2 epochs): nothing to do"]
    assert dry("--epochs", "3")[1] == "would continue after epoch 2 of 3"
    assert dry("--pretrain-epochs", "2")[0] == "would continue after epoch 1 of 2"
    assert dry("--epochs", "1")[1] == ("would start afresh, deleting what is there (2 epochs): it trained 2 epochs, more "
                                       "than the 1 now asked (its weights after 1 epochs are not kept)")
    assert dry("--fresh")[0] == "would start afresh, deleting what is there (1 epochs): asked to start afresh"
    assert dry("--fresh", "--resume-only") == ["would refuse to start afresh (--resume-only; 1 epochs there): asked to "
                                               "start afresh", "not reached (pretraining would refuse)"]
    params.write_text(params.read_text().replace("rl: {", "rl: {gamma: 0.9, "))
    said = dry()[1]
    assert said == ("would start afresh, deleting what is there (2 epochs): changed since its checkpoints were "
                    "written: params.rl.gamma: 0.95 -> 0.9")
    assert dry("--resume-only")[1].startswith("would refuse to start afresh (--resume-only; 2 epochs there): changed")
    assert sorted((str(f), f.stat().st_mtime_ns) for f in (tmp_path / "run").rglob("*")) == tree  # nothing written
    capsys.readouterr()
    assert main(common) == 0  # and the run does what the dry run said
    assert "(continued after" not in capsys.readouterr().out
    assert len(json.loads((tmp_path / "run/rl/history.json").read_text())) == 2
    assert json.loads((tmp_path / "run/rl/run_config.json").read_text())["params"]["rl.gamma"] == 0.9


def test_train_says_continued_or_nothing_to_do_from_the_checkpoint_not_the_history_files(tmp_path, capsys):
    """A kill between the last epoch's checkpoint and its history files leaves them an epoch short: the run
    then has nothing to train, and says so (it said "continued after RL epoch 1"); a real continuation is
    said and recorded (``resumed_at``)."""
    import json

    from raptor.runs.loop import write_history

    raw, params = _tiny_raw_and_params(tmp_path, "rl: {epochs: 2, batch_size: 256}\n")
    ing, graph, out = (str(tmp_path / n) for n in ("ing", "g.npz", "run"))
    assert main(["ingest", "--raw", str(raw), "--out", ing, "--params", str(params)]) == 0
    assert main(["graph", "--data", ing, "--out", graph]) == 0
    common = ["train", "--data", ing, "--graph", graph, "--params", str(params), "--local", "none", "--out", out,
              "--no-progress"]
    assert main([*common, "--epochs", "1"]) == 0
    capsys.readouterr()
    assert main(common) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(continued after RL epoch 1)" in lines[-2]
    assert json.loads(lines[-1])["resumed_at"] == [1]
    history = json.loads((tmp_path / "run/rl/history.json").read_text())
    write_history(tmp_path / "run/rl", history[:1], ("epoch", "reward"))  # what such a kill leaves
    assert main([*common, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].endswith("already trained (2 of 2 epochs): nothing to do")
    assert main(common) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "(already trained: nothing to do)" in lines[-2]
    assert len(json.loads((tmp_path / "run/rl/history.json").read_text())) == 2
    # another agent's checkpoint in the folder: started afresh, as its fingerprint differs (not an error)
    assert main([*common, "--variant", "titer", "--dry-run"]) == 0
    assert "would start afresh, deleting what is there (files): changed since" in capsys.readouterr().out
    assert main([*common, "--variant", "titer"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["restarted"]
    assert main([*common, "--variant", "recurrency", "--dry-run"]) == 0
    assert "would delete what is there and fit again: changed since" in capsys.readouterr().out
