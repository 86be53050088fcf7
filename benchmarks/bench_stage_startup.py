"""Benchmark the orchestration overhead of the main job: the whole stage graph on a tiny synthetic
dataset (where the stages' own work is a second or two), run three ways in fresh projects:

  repro-temporary   ``dvc repro``: every stage process starts Prefect's temporary server (before)
  repro-one-server  ``python -m flows.server -- dvc repro``: one server for the whole job
  pipeline          ``python -m flows.server -- python -m flows pipeline``: what scripts/run.sh runs
                    (one Prefect pipeline run, stages as subflows in one process)

Prints and writes wall seconds per way (min and median over ``--repeats``), the number of stages and
the load average. Usage: python benchmarks/bench_stage_startup.py [--repeats 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from raptor import stages  # noqa: E402
from raptor.config import params_from_dict  # noqa: E402
from raptor.runenv import defaults  # noqa: E402
from raptor.synthetic import SyntheticSpec, write_raw  # noqa: E402

TINY = {
    "profile": "paper",
    "datasets": {"SYNTH": {"raw_dir": None, "start_date": "2020-01-01"}},
    "train": {"variants": ["pure_rl", "raptor"], "seeds": [0, 1], "num_threads": 1},
    "model": {"entity_dim": 8, "relation_dim": 8, "time_dim": 4, "step_dim": 4, "mlp_hidden_dim": 16},
    "env": {"max_actions": 10}, "pretrain": {"epochs": 1, "batch_size": 512}, "rl": {"epochs": 1, "batch_size": 512},
    "eval": {"beam_size": 5, "valid_every": 1},
}

WAYS = {
    "repro-temporary": ["dvc", "repro"],
    "repro-one-server": [sys.executable, "-m", "flows.server", "--", "dvc", "repro"],
    "pipeline": [sys.executable, "-m", "flows.server", "--", sys.executable, "-m", "flows", "pipeline"],
}


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
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env.update(defaults(proj))
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--ways", nargs="+", default=list(WAYS), choices=list(WAYS))
    ap.add_argument("--out", default="benchmarks/results/stage_startup.json")
    args = ap.parse_args()
    n_stages = len(stages.main_stages(TINY["train"]["variants"]))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        raw = write_raw(Path(tmp) / "raw", SyntheticSpec(seed=3))
        for way in args.ways:
            times = []
            for r in range(args.repeats):
                base = Path(tmp) / f"{way}-{r}"
                base.mkdir()
                proj = make_project(base, raw)
                start = time.perf_counter()
                proc = subprocess.run(WAYS[way], cwd=proj, env=env_for(proj), capture_output=True, text=True)
                seconds = time.perf_counter() - start
                if proc.returncode:
                    print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
                    raise SystemExit(f"{way} failed")
                times.append(seconds)
                print(f"{way} #{r}: {seconds:.1f} s", flush=True)
            results[way] = {"min_s": round(min(times), 1), "median_s": round(statistics.median(times), 1),
                            "runs_s": [round(t, 1) for t in times]}
    out = {"stages": n_stages, "ways": results, "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    if "repro-temporary" in results:
        base = results["repro-temporary"]["min_s"]
        out["saved_per_stage_s"] = {w: round((base - r["min_s"]) / n_stages, 1) for w, r in results.items()}
    print(json.dumps(out, indent=2))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
