"""Tables the docs paste from a benchmark's printer (``--table``) are that printer's output on the committed
results, verbatim: a re-measured JSON (or an edited table) without the other shows up here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU_ENV = "benchmarks/results/gpu_env"

PRINTED = [
    ("docs/data.md", ["benchmarks/bench_scale.py", "--work", "unused", "--table"]),
    ("docs/deployment.md", ["benchmarks/bench_gpu_env.py", "--table", f"{GPU_ENV}/h200_run1_pair_search.json",
                            f"{GPU_ENV}/h200_run2.json", f"{GPU_ENV}/h200_run3_seeds.json"]),
]


@pytest.mark.parametrize("doc, argv", PRINTED, ids=[argv[0] for _, argv in PRINTED])
def test_a_pasted_table_is_its_printers_output_on_the_committed_results(doc, argv):
    out = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.count("\n|") >= 2, out  # a table, not a message
    assert out in (REPO / doc).read_text(), f"{doc} does not hold the table `{' '.join(argv)}` prints:\n{out}"
