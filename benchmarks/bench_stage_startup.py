"""Benchmark the orchestration overhead of the main job: the whole stage graph on a tiny synthetic
dataset (where the stages' own work is a second or two), run in fresh projects, these ways:

  repro             ``dvc repro`` with no Prefect API configured: since the thin orchestration, DVC
                    orchestrates and each stage runs without Prefect (before it, each stage process
                    started Prefect's temporary server: the ``repro-temporary`` way)
  repro-temporary   ``RAPTOR_PREFECT=1 dvc repro``: every stage a Prefect flow, each process starting
                    Prefect's temporary server
  repro-one-server  ``python -m flows.server -- dvc repro``: one server for the whole job
  pipeline          ``python -m flows.server -- python -m flows pipeline``: what scripts/run.sh runs
                    (one Prefect pipeline run, stages as subflows in one process)

For the ``repro*`` ways each stage's time is split, from the lines the job prints (read as they come):
``startup_s`` from DVC's ``Running stage`` to the stage's ``Beginning stage`` (without Prefect) or
``Beginning subflow run`` (Prefect: after its server is up and the flow run is created), ``body_s``
to its ``Finished``, ``exit_s`` to the next ``Running stage`` (the process's exit, a temporary
server's shutdown, DVC's own bookkeeping). ``--breakdown`` times the steps of one stage's start-up
in one process (the graph stage, whose own work is a few milliseconds), with Prefect's temporary
server (the command line and the stage declaration, the imports, the /proc lookup of the DVC process,
MLflow's store, the server, one flow run) and without Prefect (where the code has that way).

Prints and writes wall seconds per way (min and median over ``--repeats``), the per-stage split
(median over repeats), the number of stages, the load average before and after each run and the
CPU count. Usage: python benchmarks/bench_stage_startup.py [--repeats 1] [--ways repro ...]
[--breakdown] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from raptor.pipeline import stages  # noqa: E402
from raptor.config import params_from_dict  # noqa: E402
from raptor.pipeline.runenv import defaults  # noqa: E402
from raptor.data.synthetic import SyntheticSpec, write_raw  # noqa: E402

TINY = {
    "profile": "paper",
    "datasets": {"SYNTH": {"raw_dir": None, "start_date": "2020-01-01"}},
    "train": {"variants": ["pure_rl", "raptor"], "seeds": [0, 1], "num_threads": 1},
    "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
    "env": {"max_actions": 10}, "pretrain": {"epochs": 1, "batch_size": 512}, "rl": {"epochs": 1, "batch_size": 512},
    "eval": {"beam_size": 5, "valid_every": 1},
}

WAYS = {
    "repro": ({}, ["dvc", "repro"]),
    "repro-temporary": ({"RAPTOR_PREFECT": "1"}, ["dvc", "repro"]),
    "repro-one-server": ({}, [sys.executable, "-m", "flows.server", "--", "dvc", "repro"]),
    "pipeline": ({}, [sys.executable, "-m", "flows.server", "--", sys.executable, "-m", "flows", "pipeline"]),
}

RUNNING = re.compile(r"^Running stage '([^']+)'")
BEGIN = re.compile(r"Beginning (?:subflow run|flow run|stage) '([^']+)'")
END = re.compile(r"(?:Flow run '[^']+' - Finished in state|Finished stage '[^']+' in |Stage '[^']+' failed)")


def make_project(base: Path, raw: Path) -> Path:
    import yaml

    proj = base / "project"
    proj.mkdir()
    for name in ("raptor", "flows", "tasks"):
        shutil.copytree(ROOT / name, proj / name, ignore=shutil.ignore_patterns("__pycache__"))
    params = json.loads(json.dumps(TINY))
    params["datasets"]["SYNTH"]["raw_dir"] = str(raw)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (proj / "dvc.yaml").write_text(stages.dvc_yaml(params_from_dict(params)))
    stages.ensure_local_params(proj)  # the params stage depends on it (a fresh clone has none)
    env = env_for(proj)
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=proj, env=env, check=True, capture_output=True)
    return proj


def env_for(proj: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "RAPTOR_PREFECT"))}
    env.update(defaults(proj))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env["PYTHONUNBUFFERED"] = "1"  # lines arrive as they are printed: the per-stage split reads their times
    return env


def run_timed(cmd: list[str], cwd: Path, env: dict) -> tuple[int, float, list[tuple[float, str]]]:
    """``(exit status, wall seconds, [(seconds since start, line)])`` of ``cmd``, its output read as it comes."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [(time.perf_counter() - start, line.rstrip("\n")) for line in proc.stdout]
    proc.wait()
    return proc.returncode, time.perf_counter() - start, lines


def split_stages(lines: list[tuple[float, str]], wall: float) -> dict[str, dict]:
    """Per DVC stage: ``startup_s``, ``body_s``, ``exit_s`` (the module's docstring), ``wall_s``."""
    starts = [(t, m.group(1)) for t, line in lines if (m := RUNNING.match(line))]
    out = {}
    for i, (t0, name) in enumerate(starts):
        t_next = starts[i + 1][0] if i + 1 < len(starts) else wall
        seg = [(t, line) for t, line in lines if t0 <= t < t_next]
        begin = next((t for t, line in seg if BEGIN.search(line)), None)
        end = next((t for t, line in reversed(seg) if END.search(line)), None)
        row = {"wall_s": round(t_next - t0, 2)}
        if begin is not None and end is not None:
            row.update(startup_s=round(begin - t0, 2), body_s=round(end - begin, 2), exit_s=round(t_next - end, 2))
        out[name] = row
    return out


#: What both probes run first: the stage command's own start-up, timed step by step.
PROBE_HEAD = r'''
import json, os, sys, time
T0 = time.perf_counter()
marks = []
def mark(step):
    marks.append([step, round(time.perf_counter() - T0 - sum(m[1] for m in marks), 2)])
sys.path.insert(0, os.getcwd())
from flows.__main__ import build_parser
parser = build_parser(); mark("command line and stage declaration (raptor.pipeline.stages, the agents: torch)")
args = parser.parse_args(["graph", "--dataset", "SYNTH", "--params", "build/params.json",
                          "--in", "data=data/SYNTH/ingested", "--out", "out=data/SYNTH/graph.npz"])
from raptor.commands.stage import stage_call
call = stage_call("graph", args); mark("stage arguments and paths")
'''


PROBE = PROBE_HEAD + r'''import torch; mark("import torch (already imported by the declaration)")
import mlflow; mark("import mlflow")
import prefect; mark("import prefect")
import flows.stages as fs; mark("import flows.stages (what is left of it: tasks, scipy, ...)")
from flows.invocation import dvc_process
dvc_process(); mark("/proc lookup of the DVC process")
from tasks import tracking
tracking.experiment_id("raptor/SYNTH"); mark("MLflow: open the SQLite store, find the experiment")
from prefect.client.orchestration import get_client
with get_client(sync_client=True) as client:
    client.read_flows(limit=1)
mark("Prefect API up: the temporary server's start")
fs.graph_flow(dataset="SYNTH", params="build/params.json", inputs=call.inputs, outputs=call.outputs)
mark("one flow run of the graph stage (its own work: ~0.1 s)")
print(json.dumps(marks))
'''


PROBE_PLAIN = PROBE_HEAD + r'''import flows.stages as fs; mark("import flows.stages (no Prefect, no MLflow)")
from flows.invocation import dvc_process, invocation_outside_prefect, use_prefect
assert not use_prefect(); mark("Prefect or not (the environment, the profile file)")
dvc = dvc_process(); mark("/proc lookup of the DVC process")
from raptor.pipeline.projectlock import project_lock
with project_lock("."):
    mark("project lock")
    fs.graph_flow.fn(dataset="SYNTH", params="build/params.json", inputs=call.inputs, outputs=call.outputs)
    mark("the graph stage's function (its own work: ~0.1 s)")
print(json.dumps(marks))
'''


def _probe(code: str, proj: Path, env: dict) -> dict:
    load = os.getloadavg()
    rc, wall, lines = run_timed([sys.executable, "-c", code], proj, env)
    if rc:
        raise SystemExit("breakdown probe failed:\n" + "\n".join(line for _, line in lines[-40:]))
    steps = json.loads(next(line for _, line in reversed(lines) if line.startswith("[[")))  # the probe's print
    return {"steps_s": dict(steps), "exit_s": round(wall - sum(s for _, s in steps), 2), "wall_s": round(wall, 2),
            "loadavg_before": load, "loadavg_after": os.getloadavg()}


def breakdown(tmp: Path, raw: Path) -> dict:
    """The steps of one graph stage's start-up, each timed after the ones before it, in a project that
    ran ``dvc repro graph@SYNTH``: with Prefect's temporary server (as every stage of a plain ``dvc
    repro`` had before) and, where the code has it, without Prefect; ``python -c pass`` for the
    interpreter."""
    (tmp / "breakdown").mkdir()
    proj = make_project(tmp / "breakdown", raw)
    env = env_for(proj)
    subprocess.run(["dvc", "repro", "graph@SYNTH"], cwd=proj, env=env, check=True, capture_output=True)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    out = {"python -c pass": round(time.perf_counter() - t, 2),
           "with Prefect (temporary server)": _probe(PROBE, proj, env)}
    if (ROOT / "tasks" / "lazy.py").exists():  # the code that runs a stage without Prefect
        out["without Prefect"] = _probe(PROBE_PLAIN, proj, env)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--ways", nargs="*", default=list(WAYS), choices=list(WAYS))
    ap.add_argument("--breakdown", action="store_true", help="also time the steps of one stage's start-up")
    ap.add_argument("--out", default="benchmarks/results/stage_startup.json")
    args = ap.parse_args()
    n_stages = len(stages.main_stages(TINY["train"]["variants"]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    results = {}
    out = {"commit": commit, "stages": n_stages, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        raw = write_raw(Path(tmp) / "raw", SyntheticSpec(seed=3))
        if args.breakdown:
            out["breakdown"] = breakdown(Path(tmp), raw)
            print(json.dumps(out["breakdown"], indent=2), flush=True)
        for way in args.ways:
            extra, cmd = WAYS[way]
            times, splits, loads = [], [], []
            for r in range(args.repeats):
                base = Path(tmp) / f"{way}-{r}"
                base.mkdir()
                proj = make_project(base, raw)
                load = os.getloadavg()
                rc, seconds, lines = run_timed(cmd, proj, {**env_for(proj), **extra})
                loads.append({"before": load, "after": os.getloadavg()})
                if rc:
                    print("\n".join(line for _, line in lines[-60:]), file=sys.stderr)
                    raise SystemExit(f"{way} failed")
                times.append(seconds)
                splits.append(split_stages(lines, seconds))
                print(f"{way} #{r}: {seconds:.1f} s (load {load[0]:.1f})", flush=True)
            row = {"min_s": round(min(times), 1), "median_s": round(statistics.median(times), 1),
                   "runs_s": [round(t, 1) for t in times], "loadavg": loads}
            if way.startswith("repro"):
                row["per_stage"] = {name: {k: round(statistics.median(s[name][k] for s in splits if k in s[name]), 2)
                                           for k in splits[0][name]} for name in splits[0]}
                flows = [v for v in row["per_stage"].values() if "startup_s" in v]
                row["startup_s"] = {"median": round(statistics.median(v["startup_s"] for v in flows), 2),
                                    "max": round(max(v["startup_s"] for v in flows), 2)} if flows else None
            results[way] = row
    out["ways"] = results
    if "repro-temporary" in results:
        base = results["repro-temporary"]["min_s"]
        out["saved_per_stage_s"] = {w: round((base - r["min_s"]) / n_stages, 1) for w, r in results.items()}
    print(json.dumps(out, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
