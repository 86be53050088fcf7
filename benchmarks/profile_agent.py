"""Profile: where one RL training batch spends its time, by phase and by kind of kernel.

Samples ``benchmarks/bench_agent.py`` (training only, one precision) with py-spy, native frames
included, and sorts every sample taken inside a timed training batch into

* a phase, from the Python frames: ``environment`` (``raptor/mdp/env.py`` and the candidate tensors),
  ``policy forward`` (``raptor/agents/policy.py`` outside backward), ``sampling`` (``raptor/agents/sampling.py``),
  ``loss``, ``backward`` (autograd, custom backward functions included), ``optimizer``
  (``zero_grad`` and Adam);
* a kind of work, from the innermost native frame: ``GEMM`` (MKL/oneDNN matrix products),
  ``numba kernels`` (the fused scorer, sampler and look-ups: JIT code without symbols),
  ``elementwise`` (torch's vectorised TensorIterator kernels, exp/tanh), ``copies and gathers``
  (copy, cat, index, gather, scatter), ``numpy`` (the environment's array code),
  ``fused Adam``, ``allocator`` (malloc/free/memset), and ``interpreter and dispatch`` (CPython,
  torch's Python bindings and op dispatch, autograd bookkeeping).

Samples from numba's one-time JIT compilation (warm-up) are counted apart and left out of the
shares. Writes ``benchmarks/results/profile_agent.json`` and prints the table that docs/agent.md shows.

Run: ``.venv/bin/python benchmarks/profile_agent.py [--threads 1] [--batches 150] [--precision float32]``
(needs ``py-spy``: `pip install -e .[bench]`; ``--raw FILE`` re-reads a saved py-spy ``--format raw`` file;
``--print`` prints the table of the saved results).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("environment", "policy forward", "sampling", "loss", "backward", "optimizer", "other")
KINDS = ("GEMM", "numba kernels", "elementwise", "copies and gathers", "numpy", "fused Adam",
         "allocator", "interpreter and dispatch")


def phase_of(frames: list[str]) -> str:
    """The phase of one stack (outermost first), from its Python frames."""
    text = ";".join(frames)
    if "zero_grad" in text or "adam.py" in text or "Optimizer.step" in text or "optimizer.py" in text:
        return "optimizer"
    if "_engine_run_backward" in text or ".backward (" in text:
        return "backward"
    if "actor_critic_loss" in text:
        return "loss"
    if "raptor/agents/sampling.py" in text:
        return "sampling"
    if "raptor/mdp/env.py" in text or "candidate_tensors" in text:
        return "environment"
    if "raptor/agents/policy.py" in text or "torch/nn/" in text:
        return "policy forward"
    return "other"


_ELEMENTWISE = ("add_kernel", "mul_kernel", "fill_kernel", "threshold_kernel", "sigmoid", "tanh",
                "div_", "sub_", "exp", "log", "where", "clamp", "neg", "abs", "pow", "max_", "min_",
                "sum", "reduce", "softmax", "outer_sum")
_COPIES = ("copy", "cat_", "index", "gather", "scatter", "embedding", "take", "masked", "as_strided",
           "stack")


def kind_of(frames: list[str]) -> str:
    """The kind of work of one stack, from its innermost native frame (and the torch op above it)."""
    leaf = frames[-1]
    if "gemm" in leaf or "gemv" in leaf or "mkl_blas" in leaf or "dnnl" in leaf:
        return "GEMM"
    if "fused_adam" in leaf:
        return "fused Adam"
    if leaf.startswith("0x") and "(?)" in leaf:
        return "numba kernels"
    if any(s in leaf for s in ("malloc", "free (", "operator new", "operator delete", "memset", "memcpy",
                               "memmove", "(libc.so")):
        return "allocator"
    if "_multiarray_umath" in leaf or "binsearch" in leaf or "numpy/" in leaf and ".so" in leaf:
        return "numpy"
    op = next((f for f in reversed(frames) if "at::native::" in f and "function_ref" not in f
               and "cpu_kernel" not in f and "TensorIteratorBase::" not in f), "")
    vectorised = any(s in leaf for s in ("callback_fn<at::native", "TensorIterator", "mkl_vml", "Sleef",
                                         "vectorized", "exp (libm", "(libm.so"))
    if vectorised or op:
        low = op.lower()
        if any(s in low for s in _COPIES):
            return "copies and gathers"
        if vectorised or any(s in low for s in _ELEMENTWISE):
            return "elementwise"
    if any(s in leaf for s in _COPIES) and "at::native" in leaf:
        return "copies and gathers"
    return "interpreter and dispatch"


def categorise(raw_lines: list[str]) -> dict:
    """Samples per (phase, kind) of the timed training batches in a py-spy ``raw`` profile."""
    table = collections.Counter()
    compile_samples = 0
    for line in raw_lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or "step (bench_agent.py" not in stack:
            continue
        n = int(count)
        frames = stack.split(";")
        if any("numba/core" in f or "llvmlite" in f for f in frames):
            compile_samples += n
            continue
        table[(phase_of(frames), kind_of(frames))] += n
    total = sum(table.values())
    if total == 0:
        raise SystemExit("no samples inside the timed training batches: is py-spy allowed to read the process?")
    share = {f"{p}|{k}": round(100 * v / total, 2) for (p, k), v in sorted(table.items())}
    by_phase = {p: round(100 * sum(v for (q, _), v in table.items() if q == p) / total, 2) for p in PHASES}
    by_kind = {k: round(100 * sum(v for (_, q), v in table.items() if q == k) / total, 2) for k in KINDS}
    return {"samples": total, "jit_compile_samples": compile_samples, "percent": share,
            "percent_by_phase": by_phase, "percent_by_kind": by_kind}


def markdown(result: dict) -> str:
    """Phase rows x kind columns, percent of the batch's samples."""
    kinds = [k for k in KINDS if result["percent_by_kind"][k] > 0]
    head = "| phase | " + " | ".join(kinds) + " | all |\n|---|" + "---:|" * (len(kinds) + 1) + "\n"
    rows = []
    for p in PHASES:
        if result["percent_by_phase"][p] == 0:
            continue
        cells = [result["percent"].get(f"{p}|{k}", 0.0) for k in kinds]
        rows.append(f"| {p} | " + " | ".join(f"{c:.1f}" if c else "" for c in cells)
                    + f" | **{result['percent_by_phase'][p]:.1f}** |")
    total = "| **all** | " + " | ".join(f"**{result['percent_by_kind'][k]:.1f}**" for k in kinds) + " | 100 |"
    return head + "\n".join(rows + [total]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the profiled run (default 1)")
    ap.add_argument("--batches", type=int, default=150, help="timed training batches (default 150)")
    ap.add_argument("--precision", default="float32", help="float32 or bfloat16 (default float32)")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second (default 200)")
    ap.add_argument("--raw", type=Path, help="categorise this saved py-spy raw file instead of profiling")
    ap.add_argument("--print", action="store_true", help="print the table of the saved --out file, and exit")
    ap.add_argument("--data", type=Path, help="ICEWS14 folder (default: bench_agent.py's, ../shared/data/ICEWS14)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "profile_agent.json")
    args = ap.parse_args()

    if args.print:
        print(markdown(json.loads(args.out.read_text())), end="")
        return
    bench = None
    if args.raw is None:
        tmp = Path(tempfile.mkdtemp(prefix="profile_agent-"))
        args.raw = tmp / "profile.txt"
        cmd = [str(Path(sys.executable).with_name("py-spy")), "record", "--native", "--rate", str(args.rate),
               "--format", "raw", "-o", str(args.raw), "--", sys.executable, str(HERE / "bench_agent.py"),
               "--threads", str(args.threads), "--batches", str(args.batches), "--warmup", "10",
               "--precision", args.precision, "--skip-beam", "--out", str(tmp / "bench.json")]
        if args.data:
            cmd += ["--raw", str(args.data)]
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads or os.cpu_count()))
        subprocess.run(cmd, check=True, env=env)
        bench = json.loads((tmp / "bench.json").read_text())["runs"][args.precision]["train"]
    result = categorise(args.raw.read_text().splitlines())
    result.update({"threads": args.threads, "precision": args.precision, "batches": args.batches,
                   "bench": bench, "load_average": [round(x, 2) for x in os.getloadavg()]})
    table = markdown(result)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.out.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(result, indent=1) + "\n")
    tmp_out.replace(args.out)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
