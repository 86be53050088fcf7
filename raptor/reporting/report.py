"""Significance tests across variants and the report (tables, figures, an index of outputs).

Inputs are the stage outputs (see :mod:`raptor.pipeline.stages`): per variant, a training folder with
``seed<S>/history.json`` (a pretraining stage's output has the same shape) and an evaluation folder with
``seed<S>/metrics.json`` and ``seed<S>/predictions.parquet``, read by :mod:`raptor.reporting.runs_reader`.
"""

from __future__ import annotations

import csv
import io as _io
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from raptor.common.io import atomic_dir, atomic_path, atomic_write_json, atomic_write_text
from raptor.agents import variants
from raptor.constants import METRIC_KEYS
from raptor.reporting.paper import MAIN_TABLE, METRICS, REWARD_THRESHOLD
from raptor.reporting.runs_reader import evaluated_seeds, histories, read_summary, require_seeds, seed_dirs, seed_metrics, seed_ranks
from raptor.evaluation.stats import format_probability, per_query_tests, rounded, seed_level_tests
from raptor.evaluation.summary import summarize


# ------------------------------------------------------------------------------------------ summaries


def epochs_to_reward(history: Sequence[Mapping[str, Any]], threshold: float = REWARD_THRESHOLD) -> Optional[int]:
    """The first RL epoch (1-based count of epochs done) whose mean reward reaches ``threshold``."""
    for row in history:
        if row.get("reward") is not None and row["reward"] >= threshold:
            return int(row["epoch"]) + 1
    return None


def compare_variants(eval_dirs: Mapping[str, str | Path], n_resamples: int = 10_000, seed: int = 0,
                     seeds: Optional[Sequence[int]] = None) -> dict:
    """Every variant against the baseline of :mod:`raptor.agents.variants` (:func:`significance` each):
    ``{"baseline": name, "comparisons": {treatment: result}}``. ``seeds`` (the params' ``train.seeds``):
    every folder must hold exactly these (:func:`raptor.reporting.runs_reader.require_seeds`)."""
    if seeds is not None:
        require_seeds(eval_dirs, seeds)
    base = baseline_of(eval_dirs)
    comparisons = {t: significance(eval_dirs, t, base, n_resamples=n_resamples, seed=seed)
                   for t in eval_dirs if t != base}
    return {"baseline": base, "comparisons": comparisons}


def baseline_of(names: Sequence[str]) -> str:
    """The one baseline variant among ``names`` (:mod:`raptor.agents.variants`); :class:`ValueError` if
    there is none or more than one."""
    base = [v for v in names if variants.get(v).baseline]
    if len(base) != 1:
        raise ValueError(f"significance needs exactly one baseline variant among {sorted(names)} "
                         f"(baselines: {', '.join(n for n, v in variants.VARIANTS.items() if v.baseline)})")
    return base[0]


def significance(
    eval_dirs: Mapping[str, str | Path],
    treatment: str,
    baseline: str,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """``treatment`` vs ``baseline`` (e.g. RL-RAPTOR vs Pure-RL) from their evaluation folders
    (``seed<S>/metrics.json`` and per-query ranks): :func:`significance_of_seeds`."""
    for v in (treatment, baseline):
        if v not in eval_dirs:
            raise ValueError(f"no evaluation of variant {v!r} (have {sorted(eval_dirs)})")
    return significance_of_seeds(
        {v: seed_metrics(eval_dirs[v]) for v in (treatment, baseline)},
        {v: seed_ranks(eval_dirs[v]) for v in (treatment, baseline)},
        treatment, baseline, n_resamples=n_resamples, seed=seed)


def significance_of_seeds(
    metrics: Mapping[str, Mapping[int, Mapping[str, Any]]],
    ranks: Mapping[str, Mapping[int, np.ndarray]],
    treatment: str,
    baseline: str,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict:
    """``treatment`` vs ``baseline``: paired t-tests over the seeds both have (per metric) and per-query
    tests on reciprocal ranks (averaged over seeds per query): Wilcoxon signed-rank and a paired bootstrap.

    ``metrics``: variant -> seed -> test metrics (fractions); ``ranks``: variant -> seed -> ``[Q]`` ranks
    of the same ``Q`` queries in the same order (the caller checks the queries)."""
    ma, mb = metrics[treatment], metrics[baseline]
    common = sorted(set(ma) & set(mb))
    out: dict[str, Any] = {"treatment": treatment, "baseline": baseline, "seeds": common,
                           "summary": {treatment: summarize(ma, METRICS), baseline: summarize(mb, METRICS)}}
    if len(common) >= 2:
        tests = seed_level_tests({s: ma[s] for s in common}, {s: mb[s] for s in common}, METRICS)
        out["seed_level"] = {m: r.to_dict() for m, r in tests.items()}
    else:
        out["seed_level"] = None
        out["seed_level_note"] = f"{len(common)} common seed(s): a paired t-test needs at least 2"
    ra, rb = ranks.get(treatment, {}), ranks.get(baseline, {})
    common_r = sorted(set(ra) & set(rb))
    if common_r:
        a = np.stack([1.0 / ra[s] for s in common_r])
        b = np.stack([1.0 / rb[s] for s in common_r])
        if a.shape != b.shape:
            raise ValueError("the two variants were evaluated on different query sets")
        out["per_query"] = per_query_tests(a, b, n_resamples=n_resamples, seed=seed).to_dict()
    return out


# ------------------------------------------------------------------------------------------ tables


def _mark(sig: Optional[dict], variant: str, metric: str) -> str:
    """``*`` where ``variant`` beats the baseline on ``metric`` (one-sided paired t-test, p < 0.05)."""
    pair = ((sig or {}).get("comparisons") or {}).get(variant) or {}
    r = (pair.get("seed_level") or {}).get(metric)
    return "*" if r and r.get("significant_one_sided") else ""


def budget_text(train_dir: str | Path) -> str:
    """The budget a variant's seeds actually trained, from their summaries and histories
    (``seed<S>/summary.json``, ``seed<S>/history.json``): e.g. ``5 pretraining + 15 RL epochs`` or
    ``20 RL epochs``, with ``a/b`` where seeds differ (early stopping)."""
    pre, rl = set(), set()
    folders = seed_dirs(train_dir)
    for seed, h in histories(train_dir).items():
        pre.add((read_summary(folders[seed]) or {}).get("pretrain_epochs", 0))
        rl.add(len(h))
    fmt = lambda xs: "/".join(str(x) for x in sorted(xs))
    return (f"{fmt(pre)} pretraining + " if pre - {0} else "") + f"{fmt(rl)} RL epochs"


def main_table_rows(dataset: str, summaries: Mapping[str, dict], sig: Optional[dict] = None,
                    budgets: Optional[Mapping[str, str]] = None) -> list[dict]:
    """Rows of the paper's main-table layout for one dataset: the published rows, then ours
    (``budgets``: variant -> the epochs it trained, :func:`budget_text`, in its ``source``)."""
    rows = []
    for model, per_ds in MAIN_TABLE.items():
        if dataset in per_ds:
            vals = per_ds[dataset]
            rows.append({"model": model, "source": "paper", **{m: f"{v:.2f}" for m, v in zip(METRICS, vals)}})
    for variant, s in summaries.items():
        name = f"{variants.get(variant).label} (ours, {s['n']} seeds)"
        row = {"model": name, "source": "this run" + (f", {budgets[variant]}" if budgets and variant in budgets else "")}
        for m in METRICS:
            row[m] = f"{100 * s[m]['mean']:.2f} ± {100 * s[m]['std']:.2f}{_mark(sig, variant, m)}"
        rows.append(row)
    return rows


def _markdown_table(rows: list[dict], columns: Sequence[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    return head + "".join("| " + " | ".join(str(r.get(c, "")) for c in columns) + " |\n" for r in rows)


def csv_text(rows: list[dict], columns: Sequence[str]) -> str:
    buf = _io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------ figures


def _curve_band(hists: Mapping[int, list[dict]], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Epochs, mean and std over seeds of ``key`` (only epochs every seed has)."""
    series = [[(r["epoch"], r[key]) for r in h if r.get(key) is not None] for h in hists.values()]
    series = [s for s in series if s]
    if not series:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    common = sorted(set.intersection(*[set(e for e, _ in s) for s in series]))
    vals = np.array([[dict(s)[e] for e in common] for s in series], dtype=float)
    return np.array(common) + 1, vals.mean(0), vals.std(0, ddof=1) if len(series) > 1 else np.zeros(len(common))


def _draw_curves(ax, curves: Mapping[str, Mapping[int, list[dict]]], key: str, ylabel: str,
                 references: Optional[Mapping[str, float]] = None) -> None:
    """One line per label with a ±1 std band across seeds on ``ax``; ``references`` (label -> value)
    are dashed horizontal lines in their label's colour."""
    import matplotlib.pyplot as plt

    if len(curves) > 10:  # the default cycle repeats after 10 colours: sweeps with many arms
        ax.set_prop_cycle(color=plt.get_cmap("tab20").colors)
    for label, hists in curves.items():
        x, m, s = _curve_band(hists, key)
        if len(x) == 0:
            continue
        line, = ax.plot(x, m, label=f"{label} ({len(hists)} seed{'s' if len(hists) != 1 else ''})",
                        marker="o" if len(x) < 30 else None, markersize=3)
        ax.fill_between(x, m - s, m + s, alpha=0.2)
        if references and label in references:
            ax.axhline(references[label], color=line.get_color(), linestyle="--", linewidth=1,
                       label=f"{label}, paper (test): {references[label]:.4f}")
    ax.set_xlabel("RL epoch")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _save(fig, path: str | Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)


def plot_curves(curves: Mapping[str, Mapping[int, list[dict]]], key: str, ylabel: str, title: str,
                path: str | Path, threshold: Optional[float] = None,
                references: Optional[Mapping[str, float]] = None) -> None:
    """One line per label with a ±1 std band across seeds, written as PNG atomically; ``references``
    (label -> value) are dashed horizontal lines in their label's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    _draw_curves(ax, curves, key, ylabel, references)
    if threshold is not None:
        ax.axhline(threshold, color="grey", linestyle="--", linewidth=1, label=f"reward {threshold}")
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, path)


def plot_bars(labels: Sequence[str], heights: Sequence[float], errors: Sequence[float], axes: tuple[str, str],
              title: str, path: str | Path) -> None:
    """A bar per label with a ±error whisker (``axes``: x and y labels), written as PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=120)
    ax.bar(list(labels), list(heights), yerr=list(errors), capsize=4)
    ax.set_xlabel(axes[0])
    ax.set_ylabel(axes[1])
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)


def plot_curve_panels(curves: Mapping[str, Mapping[int, list[dict]]], panels: Sequence[tuple[str, str]], title: str,
                      path: str | Path) -> None:
    """The same runs side by side, one panel per ``(history key, axis label)`` (validation MRR and
    training reward, say), one legend; written as PNG atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), dpi=120, squeeze=False)
    for ax, (key, ylabel) in zip(axes[0], panels):
        _draw_curves(ax, curves, key, ylabel)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, path)


# ------------------------------------------------------------------------------------------ report


def write_report(
    dataset: str,
    train_dirs: Mapping[str, str | Path],
    eval_dirs: Mapping[str, str | Path],
    out_dir: str | Path,
    significance_path: Optional[str | Path] = None,
) -> dict:
    """Write the report folder atomically: ``main_table.md/.csv``, ``training_efficiency.png``,
    ``validation_mrr.png``, ``efficiency.csv``, ``README.md`` (an index) and ``report.json``."""
    sig = json.loads(Path(significance_path).read_text()) if significance_path else None
    summaries = {v: summarize(seed_metrics(d), METRICS) for v, d in eval_dirs.items()}
    rows = main_table_rows(dataset, summaries, sig, {v: budget_text(d) for v, d in train_dirs.items()})
    cols = ["model", "source", *METRICS]
    rl_hists = {v: histories(d) for v, d in train_dirs.items()}
    eff_rows = []
    for v, hs in rl_hists.items():
        for seed, h in hs.items():
            last_reward = h[-1].get("reward") if h else None  # none for a system without RL (recurrency)
            eff_rows.append({"variant": v, "seed": seed, "rl_epochs": len(h),
                             "final_reward": round(last_reward, 4) if last_reward is not None else "",
                             f"epochs_to_reward_{REWARD_THRESHOLD}": epochs_to_reward(h) or "not reached"})
    out = Path(out_dir)
    with atomic_dir(out, lambda d: (d / "main_table.md").is_file(), "a report folder") as tmp:
        atomic_write_text(tmp / "main_table.md", f"# {dataset}: time-aware filtered results (%)\n\n"
                          + _markdown_table(rows, cols)
                          + "\nOurs: mean ± std over seeds. `*`: better than the baseline "
                            f"({variants.get(sig['baseline']).label if sig else 'none'}) in a paired "
                            "one-sided t-test over seeds, p < 0.05.\n")
        atomic_write_text(tmp / "main_table.csv", csv_text(rows, cols))
        eff_cols = ["variant", "seed", "rl_epochs", "final_reward", f"epochs_to_reward_{REWARD_THRESHOLD}"]
        atomic_write_text(tmp / "efficiency.csv", csv_text(eff_rows, eff_cols))
        labels = {variants.get(v).label: hs for v, hs in rl_hists.items()}
        rewarded = {k: hs for k, hs in labels.items() if any(r.get("reward") is not None for h in hs.values() for r in h)}
        plot_curves(rewarded, "reward", "mean training reward", f"{dataset}: RL reward (±1 std over seeds)",
                    tmp / "training_efficiency.png", threshold=REWARD_THRESHOLD)
        plot_curves(labels, "val_mrr", "validation MRR", f"{dataset}: validation MRR (±1 std over seeds)",
                    tmp / "validation_mrr.png")
        report = {"dataset": dataset, "summaries": summaries, "significance": sig, "efficiency": eff_rows}
        atomic_write_json(tmp / "report.json", report)
        index = [f"# Report: {dataset}", "", "| file | what |", "|---|---|",
                 "| main_table.md / main_table.csv | the paper's main-table layout with its published rows and ours |",
                 "| training_efficiency.png | RL reward per epoch, mean ± 1 std over seeds, per variant |",
                 "| validation_mrr.png | validation MRR at each validation, mean ± 1 std over seeds |",
                 f"| efficiency.csv | per seed: RL epochs, final reward, first epoch with reward >= {REWARD_THRESHOLD} |",
                 "| report.json | all of the above as data, with the significance tests |", ""]
        for treatment, pair in ((sig or {}).get("comparisons") or {}).items():
            names = f"{variants.get(treatment).label} vs {variants.get(sig['baseline']).label}"
            if pair.get("seed_level"):
                index += [f"## Significance ({names}, paired over seeds)", "",
                          "| metric | mean diff | 95% CI | p (one-sided) | Cohen's d_z |", "|---|---|---|---|---|"]
                for m, r in pair["seed_level"].items():
                    index.append(f"| {m} | {r['mean_diff']:+.4f} | [{r['ci_low']:+.4f}, {r['ci_high']:+.4f}] | "
                                 f"{format_probability(r['p_one_sided'])} | "
                                 f"{format(r['cohens_dz'], '.2f') if r['cohens_dz'] is not None else 'inf'} |")
                index.append("")
            if pair.get("per_query"):
                index += [f"## Per-query tests on reciprocal ranks ({names})", "", "```",
                          json.dumps(rounded(pair["per_query"]), indent=2)[:4000], "```", ""]
        atomic_write_text(tmp / "README.md", "\n".join(index))
    return report


def write_ablation_report(dataset: str, arms: Mapping[int, str | Path], out_dir: str | Path,
                          evals: Optional[Mapping[int, str | Path]] = None) -> dict:
    """The pretraining-epochs ablation: RL reward curves per number of pretraining epochs (mean ± std
    over seeds), the best validation MRR per arm and, with ``evals``, its test metrics (mean ± std
    over seeds), as PNGs, CSV and JSON (written atomically).

    ``arms`` maps pretraining epochs -> the arm's training folder (``seed<S>/history.json``);
    ``evals`` maps them to its evaluation folder (``seed<S>/metrics.json``).
    """
    hists = {int(n): histories(d) for n, d in sorted(arms.items())}
    rows = []
    for n, hs in hists.items():
        best = [max((r["val_mrr"] for r in h if r.get("val_mrr") is not None), default=float("nan"))
                for h in hs.values()]
        to_thr = [epochs_to_reward(h) for h in hs.values()]
        rows.append({"pretrain_epochs": n, "seeds": len(hs),
                     "best_val_mrr_mean": float(np.nanmean(best)) if best else float("nan"),
                     "best_val_mrr_std": float(np.nanstd(best, ddof=1)) if len(best) > 1 else 0.0,
                     "final_reward_mean": float(np.mean([h[-1]["reward"] for h in hs.values() if h])) if hs else float("nan"),
                     f"epochs_to_reward_{REWARD_THRESHOLD}": ";".join(str(t) if t else "not reached" for t in to_thr)})
        if evals is not None:
            stats = summarize(evaluated_seeds(evals[n]), METRIC_KEYS)
            rows[-1].update({f"test_{m}_{k}": stats[m][k] for m in METRIC_KEYS for k in ("mean", "std")})
    out = Path(out_dir)
    with atomic_dir(out, lambda d: (d / "ablation.json").is_file(), "an ablation report folder") as tmp:
        plot_curves({f"{n} pretraining epochs": hs for n, hs in hists.items()}, "reward", "mean training reward",
                    f"{dataset}: RL reward by pretraining epochs", tmp / "ablation_reward.png", threshold=REWARD_THRESHOLD)
        plot_bars([str(r["pretrain_epochs"]) for r in rows], [r["best_val_mrr_mean"] for r in rows],
                  [r["best_val_mrr_std"] for r in rows], ("pretraining epochs", "best validation MRR"),
                  f"{dataset}: validation MRR by pretraining epochs", tmp / "ablation_mrr.png")
        cols = list(rows[0]) if rows else ["pretrain_epochs"]
        atomic_write_text(tmp / "ablation.csv", csv_text(rows, cols))
        atomic_write_json(tmp / "ablation.json", {"dataset": dataset, "arms": rows})
    return {"dataset": dataset, "arms": rows}
