"""What `pretrain.stop_label` and `pretrain.on_answer` change in the labels pretraining sees.

Walks training queries (both directions, a random sample of ``--queries``, seed ``--seed``) for ``K``
steps in the environment (``EnvConfig`` defaults) under each of the four label rules, each step drawn
uniformly among the candidates labelled reachable, or among all valid candidates when none is (what a
freshly initialised policy's restricted softmax roughly does: its logits are near zero). Per rule and
step ``k`` it reports: the share of walks standing on the answer ``o_q``; the mean number of valid
candidates and of candidates labelled reachable (STOP included); the share of states whose STOP is
labelled reachable; the share of states with any reachable candidate; and at the end the share of walks
that end on ``o_q`` (the reward a policy following the labels would get).

Writes ``benchmarks/results/label_rules_<dataset>.json`` and prints a Markdown table (the one in
docs/pretraining.md). One thread (it shares the machine with training runs):

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/label_rules.py --data data/ICEWS14/ingested \\
        --graph data/ICEWS14/graph.npz --labels data/ICEWS14/labels
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def walk_stats(env, table, queries: np.ndarray, rule, rng: np.random.Generator, batch: int = 2048) -> dict:
    """Per-step label statistics of walks that follow ``rule``'s labels (see the module docstring)."""
    from raptor.labeling.actions import ActionCandidates, action_labels

    K = env.K
    sums = {key: np.zeros(K) for key in ("on_answer", "valid", "reachable", "stop_reachable", "any_reachable")}
    reached = 0
    for lo in range(0, len(queries), batch):
        state = env.reset(queries[lo:lo + batch])
        B = state.batch_size
        for k in range(K):
            c = env.candidates(state)
            cands = ActionCandidates(c.entity, c.time, relation=c.relation, num_relations=env.num_relations,
                                     mask=c.mask, current_entity=state.entity)
            y = action_labels(table, state.answer, state.query_time, k, cands, rule,
                              query_subject=state.query_entity).astype(bool) & c.mask
            sums["on_answer"][k] += float((state.entity == state.answer).sum())
            sums["valid"][k] += float(c.mask.sum())
            sums["reachable"][k] += float(y.sum())
            sums["stop_reachable"][k] += float(y[:, 0].sum())  # slot 0 is STOP
            sums["any_reachable"][k] += float(y.any(1).sum())
            allowed = np.where(y.any(1, keepdims=True), y, c.mask)
            u = rng.random(allowed.shape) * allowed  # uniform among the allowed: the largest of uniforms
            choice = np.argmax(np.where(allowed, u, -1.0), axis=1)
            state = env.step(state, c, choice)
        reached += int((state.entity == state.answer).sum())
    n = float(len(queries))
    out = {key: [round(v / n, 4) for v in arr] for key, arr in sums.items()}
    out["walk_reaches_answer"] = round(reached / n, 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="ICEWS14")
    ap.add_argument("--data", required=True, help="the ingested dataset folder (data/<ds>/ingested)")
    ap.add_argument("--graph", required=True, help="its graph.npz (data/<ds>/graph.npz)")
    ap.add_argument("--labels", required=True, help="its label table folder (data/<ds>/labels)")
    ap.add_argument("--queries", type=int, default=20000, help="training queries walked (a random sample)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from raptor.config import EnvConfig
    from raptor.data.dataset import load_dataset, with_inverse_queries
    from raptor.data.graph import TemporalGraph
    from raptor.labeling.actions import ON_ANSWER_LABELS, STOP_LABELS, LabelRule
    from raptor.labeling.store import load_label_table
    from raptor.mdp.env import TemporalEnv

    ds = load_dataset(Path(args.data))
    env = TemporalEnv(TemporalGraph.load(args.graph), EnvConfig())
    table = load_label_table(Path(args.labels))
    queries = with_inverse_queries(ds.splits["train"], ds.num_relations).astype(np.int64)
    pick = np.sort(np.random.default_rng(args.seed).choice(len(queries), min(args.queries, len(queries)), replace=False))
    queries = queries[pick]
    rules = {}
    t0 = time.perf_counter()
    for stop, on_answer in itertools.product(STOP_LABELS, ON_ANSWER_LABELS):
        rule = LabelRule(stop=stop, on_answer=on_answer)
        rules[f"stop_label={stop}, on_answer={on_answer}"] = walk_stats(
            env, table, queries, rule, np.random.default_rng(args.seed))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    result = {"dataset": args.dataset, "queries": int(len(queries)), "seed": args.seed, "K": env.K,
              "commit": commit, "seconds": round(time.perf_counter() - t0, 1), "python": platform.python_version(),
              "walk": "uniform among the reachable candidates (all valid ones when none is)", "rules": rules}
    out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"label_rules_{args.dataset}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out)
    print(table_md(result))


def table_md(result: dict) -> str:
    """The Markdown table of a result (per rule: each step's shares, then the walk's end)."""
    lines = [f"{result['dataset']}, {result['queries']} training queries walked, seed {result['seed']}, "
             f"commit {result['commit']}; per step k = 0 / 1 / 2.", "",
             "| rule | on o_q | candidates labelled reachable (of valid) | STOP labelled reachable | "
             "a reachable candidate | walks ending on o_q |", "|---|---|---|---|---|---|"]
    for name, r in result["rules"].items():
        f = lambda key: " / ".join(f"{v:.3f}" for v in r[key])  # noqa: E731
        reach = " / ".join(f"{a:.1f} ({b:.0f})" for a, b in zip(r["reachable"], r["valid"]))
        lines.append(f"| {name} | {f('on_answer')} | {reach} | {f('stop_reachable')} | {f('any_reachable')} | "
                     f"{r['walk_reaches_answer']:.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
