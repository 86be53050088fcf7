import subprocess
import sys
from pathlib import Path

from raptor.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


def test_help_lists_every_stage(capsys):
    parser = build_parser()
    text = parser.format_help()
    for stage in ("ingest", "graph"):
        assert stage in text


def test_ingest_and_graph_cli(params_file, tiny_raw, tmp_path, capsys):
    assert main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", str(params_file)]) == 0
    assert main(["graph", "--data", str(tmp_path / "d"), "--out", str(tmp_path / "g.npz")]) == 0
    out = capsys.readouterr().out
    assert "train 4" in out and "16 edges" in out


def test_cli_error_is_one_clear_line(params_file, tiny_raw, tmp_path, capsys):
    (tiny_raw / "train.txt").unlink()
    rc = main(["ingest", "--raw", str(tiny_raw), "--out", str(tmp_path / "d"), "--params", str(params_file)])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("raptor ingest: error:") and "train.txt" in err
    assert "Traceback" not in err


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


def test_help_of_every_stage(capsys):
    parser = build_parser()
    for stage in ("synthetic", "ingest", "graph", "label", "train", "evaluate", "report", "explain"):
        text = parser._subparsers._group_actions[0].choices[stage].format_help()
        assert "usage: raptor " + stage in text
