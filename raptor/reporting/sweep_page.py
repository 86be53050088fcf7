"""A sweep's results: its tables (``results.json|csv|md|png``) and the sweeps page of the docs.

:func:`write_results` tabulates the arms of a sweep (:mod:`raptor.pipeline.sweep`: its plan and its
runs) from their run folders, or from their records in a results folder
(:func:`raptor.pipeline.sweep.job_dirs`): per run and per arm the validation and test metrics, mean
+- sample std over seeds, each arm against the arm ``default`` of its variant (:func:`_vs_default`:
the significance tests of :func:`raptor.reporting.report.significance`) and the :func:`verdict` of
the rule fixed before the results (docs/sweeps.md). :func:`write_sweep_page` makes the docs' sweeps
page from finished results folders. Every file of a run is read by
:mod:`raptor.reporting.runs_reader`; no number is typed.
"""

from __future__ import annotations

import collections
import itertools
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from raptor.agents import variants as variant_registry
from raptor.common.io import atomic_path, atomic_write_json, atomic_write_text
from raptor.config import flatten
from raptor.constants import METRIC_KEYS
from raptor.evaluation.stats import json_safe
from raptor.evaluation.summary import summarize
from raptor.pipeline.sweep import DEFAULT_ARM, Plan, job_dirs, value_name
from raptor.reporting.paper import MAIN_TABLE
from raptor.reporting.records import copy_tree_files
from raptor.reporting.report import csv_text, plot_curve_panels, plot_curves, significance
from raptor.reporting.runs_reader import read_history, read_json, read_metrics, read_summary, recorded_commit

#: The curves beside each choice's table on the sweeps page: ``(history key, axis label)``.
CHOICE_PANELS = (("val_mrr", "validation MRR"), ("reward", "training reward"))


def collect_results(plan: Plan, root: Optional[str | Path] = None) -> dict[str, Any]:
    """Per run and per (arm, variant): best validation MRR, test metrics (fractions) and their
    mean and sample std over seeds; ``delta_test_mrr`` of each arm against
    :data:`raptor.pipeline.sweep.DEFAULT_ARM` of the same variant (``None`` without a default arm). A
    run not yet trained or evaluated is reported as missing, not guessed. ``root``: read the runs
    (each run's ``summary.json`` and its evaluation's ``metrics.json``) from a results folder's
    records (:func:`raptor.pipeline.sweep.job_dirs`) rather than from the sweep folder."""
    overrides = {a.name: a.overrides for a in plan.sweep.arms}
    notes = {a.name: plan.sweep.note(a) for a in plan.sweep.arms}
    runs, missing = [], []
    for job in plan.train:
        train_dir, eval_dir = job_dirs(plan, job, root)
        summary = read_summary(train_dir)
        metrics = read_metrics(eval_dir)
        if not summary or not metrics:
            missing.append(job.run_name)
            continue
        runs.append({"arm": job.arm, "variant": job.variant, "seed": job.seed,
                     "pretrain_epochs": job.pretrain_epochs, "rl_epochs": summary.get("rl_epochs"),
                     "best_val_mrr": summary.get("best_val_mrr"), "best_epoch": summary.get("best_epoch"),
                     "train_seconds": summary.get("train_seconds", summary.get("seconds")), "device": summary.get("device"),
                     "precision": summary.get("precision"),
                     **{f"test_{m}": metrics.get(m) for m in METRIC_KEYS}})
    keys = ("best_val_mrr",) + tuple(f"test_{m}" for m in METRIC_KEYS)
    arms = []
    for (arm, variant), group in itertools.groupby(sorted(runs, key=lambda r: (r["arm"], r["variant"])),
                                                   key=lambda r: (r["arm"], r["variant"])):
        group = list(group)
        stats = summarize({r["seed"]: r for r in group}, keys)
        arms.append({"arm": arm, "variant": variant, "overrides": overrides[arm], "note": notes[arm],
                     "epochs": _budget(group), "seeds": stats["seeds"],
                     **{f"{k}_mean": stats[k]["mean"] for k in keys}, **{f"{k}_std": stats[k]["std"] for k in keys}})
    order = {a.name: i for i, a in enumerate(plan.sweep.arms)}
    arms.sort(key=lambda a: (order[a["arm"]], a["variant"]))
    base = {a["variant"]: a["test_mrr_mean"] for a in arms if a["arm"] == DEFAULT_ARM}
    eval_dirs = {(j.arm, j.variant): str(job_dirs(plan, j, root)[1].parent) for j in plan.train}
    incomplete = {(j.arm, j.variant) for j in plan.train if j.run_name in missing}
    for a in arms:
        a["delta_test_mrr"] = a["test_mrr_mean"] - base[a["variant"]] if a["variant"] in base else None
        pair = ((a["arm"], a["variant"]), (DEFAULT_ARM, a["variant"]))
        a["vs_default"] = (_vs_default(eval_dirs[pair[0]], eval_dirs[pair[1]])
                           if a["variant"] in base and a["arm"] != DEFAULT_ARM and not incomplete & set(pair) else None)
    return {"sweep": plan.sweep.name, "dataset": plan.dataset, "runs": runs, "arms": arms, "missing": missing}


def _vs_default(arm_eval_dir: str, default_eval_dir: str) -> dict[str, Any]:
    """An arm's test MRR against the default arm's, same variant and seeds: the paired t-test over
    seeds (two-sided; ``None`` with fewer than 2 seeds) and, on the per-query reciprocal ranks averaged
    over seeds, the paired bootstrap (95% CI of the MRR difference) and the Wilcoxon test (both two-sided):
    :func:`raptor.reporting.report.significance`, the test the pipeline applies to the variants."""
    sig = significance({"arm": arm_eval_dir, DEFAULT_ARM: default_eval_dir}, "arm", DEFAULT_ARM)
    t = (sig["seed_level"] or {}).get("mrr")
    pq = sig["per_query"]
    return {"seeds": sig["seeds"], "queries": pq["n"], "mrr_diff": pq["mrr_diff"],
            "seed_ttest_p": t["p_two_sided"] if t else None,
            "bootstrap_ci": [pq["bootstrap"]["ci_low"], pq["bootstrap"]["ci_high"]],
            "bootstrap_p": pq["bootstrap"]["p_two_sided"], "wilcoxon_p": pq["wilcoxon"]["p_two_sided"]}


def _budget(runs: list[dict[str, Any]]) -> str:
    """Epochs the runs of one arm trained: ``pretrain + RL`` (``5 + 60``; Pure-RL ``0 + 60``), the RL
    counts of all seeds where they differ (early stopping: ``5 + 40/60``)."""
    pre = sorted({r["pretrain_epochs"] or 0 for r in runs})
    rl = sorted({r["rl_epochs"] for r in runs if r["rl_epochs"] is not None})
    return "/".join(map(str, pre)) + " + " + ("/".join(map(str, rl)) or "?")


def _pct(mean: float, std: float) -> str:
    return f"{100 * mean:.2f} ± {100 * std:.2f}"


def _p(p: Optional[float]) -> str:
    return "" if p is None else f"{p:.2g}"


def _delta(arm: Mapping[str, Any]) -> str:
    """The arm's change in test MRR against ``default``, in points (``""`` where there is none)."""
    return "" if arm["delta_test_mrr"] is None else f"{100 * arm['delta_test_mrr']:+.2f}"


#: :func:`verdict`'s answers.
BETTER, WORSE, UNCLEAR = "better", "worse", "no clear difference"


def verdict(arm: Mapping[str, Any], default: Optional[Mapping[str, Any]]) -> str:
    """Whether an arm beats the default arm of its variant, by a rule fixed before the results:
    :data:`BETTER` when its mean best validation MRR is higher (validation chooses) **and** the per-query
    bootstrap 95% CI of its test MRR change lies above 0 (test confirms); :data:`WORSE` for both the other
    way; :data:`UNCLEAR` otherwise. ``""`` for the default arm itself or without the tests."""
    vs = arm.get("vs_default")
    if default is None or arm["arm"] == DEFAULT_ARM or not vs:
        return ""
    d_val = arm["best_val_mrr_mean"] - default["best_val_mrr_mean"]
    lo, hi = vs["bootstrap_ci"]
    if d_val > 0 and lo > 0:
        return BETTER
    if d_val < 0 and hi < 0:
        return WORSE
    return UNCLEAR


def combination(results: Mapping[str, Any], variant: str) -> Optional[dict[str, Any]]:
    """The overrides of ``variant``'s arms that :func:`verdict` calls :data:`BETTER`, together: the arm a
    sweep trains next to see whether they add up (docs/sweeps.md, the rule fixed before the results).
    Arms are taken whole, by descending mean best validation MRR; an arm overriding a key already taken
    (``model.mlp_hidden_dim`` 128 and 512 both better) is left out, so validation picks between them.
    ``None`` when no arm is better."""
    arms = [a for a in results["arms"] if a["variant"] == variant]
    default = next((a for a in arms if a["arm"] == DEFAULT_ARM), None)
    better = sorted((a for a in arms if verdict(a, default) == BETTER), key=lambda a: -a["best_val_mrr_mean"])
    out: dict[str, Any] = {}
    for a in better:
        if not set(a["overrides"]) & set(out):
            out.update(a["overrides"])
    return out or None


def combination_markdown(results: Mapping[str, Any]) -> str:
    """Per variant, the :func:`combination` of the better readings and, where an arm with exactly
    those overrides was trained, its verdict: what the rule makes of the sweep."""
    lines = []
    for variant in dict.fromkeys(a["variant"] for a in results["arms"]):
        combo = combination(results, variant)
        if combo is None:
            lines.append(f"- {variant}: no reading is `{BETTER}`; the defaults stay.")
            continue
        over = ", ".join(f"`{k}: {value_name(v)}`" for k, v in combo.items())
        default = next((a for a in results["arms"] if a["variant"] == variant and a["arm"] == DEFAULT_ARM), None)
        tried = [a for a in results["arms"] if a["variant"] == variant and a["overrides"] == combo]
        if not tried:
            lines.append(f"- {variant}: the `{BETTER}` readings together: {over}; not trained together yet.")
        else:
            v = verdict(tried[0], default) or "not yet tested"
            lines.append(f"- {variant}: the `{BETTER}` readings together: {over}; arm `{tried[0]['arm']}`: {v}.")
    return "\n".join(lines) + "\n"


def paper_gap(arm: Mapping[str, Any], dataset: str, metric: str = "hits@1") -> str:
    """The arm's mean test ``metric`` minus the paper's (Table 1, :data:`raptor.reporting.paper.MAIN_TABLE`) for
    its variant's system on ``dataset``, in points (``""`` where the paper has none)."""
    paper = MAIN_TABLE.get(variant_registry.get(arm["variant"]).label, {}).get(dataset)
    if paper is None or arm.get(f"test_{metric}_mean") is None:
        return ""
    return f"{100 * arm[f'test_{metric}_mean'] - paper[METRIC_KEYS.index(metric)]:+.2f}"


def peak_epochs(results: Mapping[str, Any], arm: Mapping[str, Any]) -> str:
    """Where validation peaked in the arm's runs: the RL epoch (from 1) of each seed's best validation MRR,
    whose checkpoint was tested, in seed order (``/``-separated; one value where all agree; ``?`` for a run
    whose summary names none). A re-scored arm's runs are the default arm's: their checkpoints' epochs."""
    epochs = [r.get("best_epoch") for r in sorted(results["runs"], key=lambda r: r["seed"])
              if (r["arm"], r["variant"]) == (arm["arm"], arm["variant"])]
    text = ["?" if e is None else str(int(e) + 1) for e in epochs]
    return text[0] if len(set(text)) == 1 else "/".join(text)


def results_markdown(results: Mapping[str, Any]) -> str:
    """The per-arm table (percent, mean ± sample std over seeds), with the Hits@1 gap to the paper
    (:func:`paper_gap`), where validation peaked (:func:`peak_epochs`), each arm's test MRR against the
    default arm's (:func:`_vs_default`: t-test over seeds, per-query bootstrap CI and Wilcoxon, p two-sided)
    and the :func:`verdict`."""
    notes = any(a.get("note") for a in results["arms"])
    head = ("| arm | overrides | " + ("note | " if notes else "") + "variant | seeds | epochs | val MRR | test MRR "
            "| Hits@1 | Hits@3 | Hits@10 | Hits@1 vs paper | val peak at RL epoch | Δ test MRR | t-test p (seeds) "
            "| per-query 95% CI of Δ | Wilcoxon p | verdict |\n"
            "|---|---|" + ("---|" if notes else "") + "---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    defaults = {a["variant"]: a for a in results["arms"] if a["arm"] == DEFAULT_ARM}
    rows = []
    for a in results["arms"]:
        over = ", ".join(f"`{k}: {value_name(v)}`" for k, v in a["overrides"].items()) or "(base)"
        delta = "" if a["arm"] == DEFAULT_ARM else _delta(a)
        vs = a.get("vs_default")
        tests = (f"{_p(vs['seed_ttest_p'])} | [{100 * vs['bootstrap_ci'][0]:+.2f}, {100 * vs['bootstrap_ci'][1]:+.2f}] "
                 f"| {_p(vs['wilcoxon_p'])}") if vs else " | "
        note = f"{a.get('note', '')} | " if notes else ""
        rows.append(f"| {a['arm']} | {over} | {note}{a['variant']} | {len(a['seeds'])} | {a.get('epochs', '')} | "
                    f"{_pct(a['best_val_mrr_mean'], a['best_val_mrr_std'])} | "
                    + " | ".join(_pct(a[f'test_{m}_mean'], a[f'test_{m}_std']) for m in METRIC_KEYS)
                    + f" | {paper_gap(a, results['dataset'])} | {peak_epochs(results, a)}"
                    + f" | {delta} | {tests} | {verdict(a, defaults.get(a['variant']))} |")
    tail = f"\nMissing (not yet trained or evaluated): {', '.join(results['missing'])}\n" if results["missing"] else ""
    return head + "\n".join(rows) + "\n" + tail


def choice_tables(results: Mapping[str, Any], default_params: Optional[Mapping[str, Any]] = None,
                  figure: Optional[Callable[[tuple[str, ...], str, list[str]], Optional[str]]] = None) -> str:
    """One small table per choice: the arms that override the same keys (``model.mlp_hidden_dim=128``
    and ``=512``), each beside ``default`` of its variant, with the value, note, epochs, validation and
    test MRR (mean ± sample std over seeds), the change in test MRR and the :func:`verdict`.
    ``default_params`` (the default arm's resolved params) supplies the default's value of each key.
    ``figure(keys, variant, arms)``, when given, returns Markdown put under the table (a figure of
    those arms, ``default`` first), or ``None``."""
    defaults = {a["variant"]: a for a in results["arms"] if a["arm"] == DEFAULT_ARM}
    default_values = flatten(dict(default_params or {}))
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for a in results["arms"]:
        if a["arm"] != DEFAULT_ARM and a["overrides"]:
            groups.setdefault(tuple(sorted(a["overrides"])), []).append(a)
    out = []
    for keys, arms in groups.items():
        out += [f"#### {', '.join(f'`{k}`' for k in keys)}", "",
                "| value | note | variant | seeds | epochs | val MRR | test MRR | Δ test MRR | verdict |",
                "|---|---|---|---|---|---|---|---|---|"]
        for variant in dict.fromkeys(a["variant"] for a in arms):
            base = defaults.get(variant)
            rows = ([base] if base else []) + [a for a in arms if a["variant"] == variant]
            for a in rows:
                if a is base:  # its values where its resolved params are at hand
                    value = (", ".join(value_name(default_values[k]) for k in keys) + " (default)"
                             if all(k in default_values for k in keys) else "default")
                    delta, verdict_text, note = "", "", ""
                else:
                    value = ", ".join(value_name(a["overrides"][k]) for k in keys)
                    delta = _delta(a)
                    verdict_text, note = verdict(a, base), a.get("note", "")
                out.append(f"| {value} | {note} | {variant} | {len(a['seeds'])} | {a.get('epochs', '')} | "
                           f"{_pct(a['best_val_mrr_mean'], a['best_val_mrr_std'])} | "
                           f"{_pct(a['test_mrr_mean'], a['test_mrr_std'])} | {delta} | {verdict_text} |")
        out.append("")
        for variant in dict.fromkeys(a["variant"] for a in arms) if figure else ():
            md = figure(keys, variant, [a["arm"] for a in ([defaults[variant]] if variant in defaults else [])
                                        + [a for a in arms if a["variant"] == variant]])
            if md:
                out += [md, ""]
    return "\n".join(out)


def plot_results(results: Mapping[str, Any], path: str | Path) -> None:
    """Test MRR per arm (mean ± std over seeds, one marker per seed), one panel per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(a["variant"] for a in results["arms"]))
    fig, axes = plt.subplots(1, len(variants), figsize=(1.2 + 0.7 * max(len(results["arms"]), 2), 3.6),
                             squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        arms = [a for a in results["arms"] if a["variant"] == variant]
        x = range(len(arms))
        ax.errorbar(x, [100 * a["test_mrr_mean"] for a in arms], yerr=[100 * a["test_mrr_std"] for a in arms],
                    fmt="o", capsize=4, color="C0", label="mean ± std")
        for i, a in enumerate(arms):
            seeds = [100 * r["test_mrr"] for r in results["runs"] if r["arm"] == a["arm"] and r["variant"] == variant]
            ax.plot([i] * len(seeds), seeds, "x", color="C1", alpha=0.7, label="seed" if i == 0 else None)
        ax.set_xticks(list(x), [a["arm"] for a in arms], rotation=35, ha="right", fontsize=8)
        ax.set_title(variant_registry.get(variant).label)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("test MRR (%)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"sweep {results['sweep']} on {results['dataset']}")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def _declaration_files(plan: Plan) -> list[str]:
    """The sweep's declaration files in its folder: ``sweep.json`` and ``params/ARM.json``."""
    return ["sweep.json"] + [f"params/{f.name}" for f in sorted((Path(plan.out_dir) / "params").glob("*.json"))]


def declaration_differences(plan: Plan, results_root: str | Path) -> list[str]:
    """The files of the sweep's declaration (``sweep.json``, ``params/ARM.json``) that ``results_root``
    holds with other contents than ``plan``'s folder: a results folder written by another checkout
    (other params or code) than the one reading it."""
    src, dst = Path(plan.out_dir), Path(results_root)
    return [n for n in _declaration_files(plan) if (src / n).is_file() and (dst / n).is_file()
            and (src / n).read_bytes() != (dst / n).read_bytes()]


def write_results(plan: Plan, results_root: Optional[str | Path] = None,
                  keep_declaration: bool = False) -> dict[str, Any]:
    """``results.json``, ``results.csv`` (per run), ``results.md`` (per arm) and ``results.png``
    in the sweep folder, or, with ``results_root``, made from the records there and written there
    beside a copy of ``sweep.json`` and ``params/`` (a folder :func:`write_sweep_page` reads); returns
    the results. ``keep_declaration``: copies only the declaration files ``results_root`` lacks, so a
    table made from another checkout keeps the params the runs were trained with
    (:func:`declaration_differences` says which differ)."""
    out = Path(plan.out_dir if results_root is None else results_root)
    if results_root is not None:
        for name in _declaration_files(plan):
            if not (keep_declaration and (out / name).is_file()):
                copy_tree_files((Path(plan.out_dir) / name).parent, (out / name).parent, Path(name).name)
    results = collect_results(plan, results_root)
    atomic_write_json(out / "results.json", json_safe(results))
    atomic_write_text(out / "results.csv",
                      csv_text(results["runs"], list(dict.fromkeys(k for r in results["runs"] for k in r))))
    atomic_write_text(out / "results.md", results_markdown(results))
    if results["arms"]:
        plot_results(results, out / "results.png")
    return results


# ---------------------------------------------------------------------------------------------
# The sweeps page (docs): generated from finished sweep folders
# ---------------------------------------------------------------------------------------------


def _sweep_curves(folder: Path, results: Mapping[str, Any], variant: str) -> dict[str, dict[int, list[dict]]]:
    """Per arm of ``variant``: seed -> RL history (``train/ARM/VARIANT/seedS/history.json``; seeds without one
    left out)."""
    curves: dict[str, dict[int, list[dict]]] = {}
    for a in results["arms"]:
        if a["variant"] != variant:
            continue
        for seed in a["seeds"]:
            hist = read_history(folder / "train" / a["arm"] / variant / f"seed{seed}")
            if hist:
                curves.setdefault(a["arm"], {})[seed] = hist
    return curves


def _devices(runs: list[Mapping[str, Any]]) -> str:
    """Where the runs were trained, from their summaries: ``cpu, bfloat16 (26 runs); cpu, float32 (2 runs)``."""
    counts = collections.Counter((r.get("device") or "device not recorded", r.get("precision") or "precision not recorded")
                                 for r in runs)
    return "; ".join(f"{d}, {p} ({n} run{'s' if n > 1 else ''})" for (d, p), n in sorted(counts.items()))


def write_sweep_page(folders: list[tuple[str, str | Path]], out: str | Path, figures_dir: Optional[str | Path] = None,
                     command: str = "raptor sweeps") -> Path:
    """A Markdown page of finished sweeps (``(title, folder)`` pairs; a folder holds ``sweep.json`` and
    ``results.json``, :func:`write_results`): per sweep its description, base overrides, the per-arm
    table of :func:`results_markdown`, test MRR per arm and the validation curves of every arm. Figures go
    to ``figures_dir`` (default ``<out's folder>/figures/sweeps``). No number on the page is typed."""
    out = Path(out)
    fig_dir = Path(figures_dir) if figures_dir is not None else out.parent / "figures" / "sweeps"
    fig_dir.mkdir(parents=True, exist_ok=True)
    rel = fig_dir.relative_to(out.parent) if fig_dir.is_relative_to(out.parent) else fig_dir
    lines = ["# Sweeps", "", f"<!-- generated by `{command}`: do not edit by hand; re-run it instead -->", "",
             f"Generated by `{command}` from each sweep's `sweep.json`, `results.json` and run histories "
             "(`python -m flows sweep NAME` or `raptor sweep NAME` writes them; docs/sweeps.md): no number here "
             "is typed. Metrics in "
             "percent, mean ± sample std over seeds; `epochs`: pretraining + RL epochs trained; Δ and the tests "
             "compare each arm with the arm `default` of the same variant (p two-sided).", ""]
    for title, folder in folders:
        folder = Path(folder)
        plan, results = read_json(folder / "sweep.json"), read_json(folder / "results.json")
        if not plan or not results:
            raise FileNotFoundError(f"{folder}: no sweep.json/results.json (not a finished sweep folder)")
        sweep, dataset = plan["sweep"], results["dataset"]
        for a in results["arms"]:  # results.json written before `epochs` was recorded
            if not a.get("epochs"):
                a["epochs"] = _budget([r for r in results["runs"] if (r["arm"], r["variant"]) == (a["arm"], a["variant"])])
        base = ", ".join(f"`{k}: {value_name(v)}`" for k, v in sweep["base"].items()) or "(none)"
        commit = recorded_commit(folder)
        lines += [f"## {title}: sweep `{sweep['name']}` on {dataset}", ""]
        if sweep.get("description"):
            lines += [sweep["description"], ""]
        lines += [f"Base of every arm: {base}." + (f" Code: commit {commit}." if commit else "")
                  + (f" Trained on: {_devices(results['runs'])}." if results["runs"] else ""), "",
                  results_markdown(results)]
        stem = f"{re.sub(r'[^A-Za-z0-9]+', '-', title).strip('-').lower()}-{dataset.lower()}"

        def choice_figure(keys: tuple[str, ...], variant: str, arms: list[str]) -> Optional[str]:
            curves = _sweep_curves(folder, results, variant)
            curves = {a: curves[a] for a in arms if a in curves}
            if len(curves) < 2:
                return None
            path = fig_dir / f"{stem}-{variant}-{re.sub(r'[^A-Za-z0-9]+', '-', '-'.join(keys)).strip('-').lower()}.png"
            plot_curve_panels(curves, CHOICE_PANELS, f"{dataset}, {variant_registry.get(variant).label}: "
                              f"{', '.join(keys)}", path)
            return f"![{', '.join(keys)}: {' and '.join(label for _, label in CHOICE_PANELS)}]({rel}/{path.name})"

        tables = choice_tables(results, read_json(folder / "params" / f"{DEFAULT_ARM}.json"), choice_figure)
        if tables:
            lines += ["### By choice", "", "Each choice's arms beside `default` (the verdict's rule: "
                      "docs/sweeps.md).", "", tables]
        if results["arms"] and not results["missing"]:
            lines += ["### What the rule makes of it", "", combination_markdown(results)]
        figs = []
        if results["arms"]:
            plot_results(results, fig_dir / f"{stem}-test-mrr.png")
            figs.append(f"![test MRR per arm]({rel}/{stem}-test-mrr.png)")
        for variant in dict.fromkeys(a["variant"] for a in results["arms"]):
            curves = _sweep_curves(folder, results, variant)
            if curves:
                label = variant_registry.get(variant).label
                path = fig_dir / f"{stem}-{variant}-val-mrr.png"
                plot_curves(curves, "val_mrr", "validation MRR", f"{dataset}, sweep {sweep['name']}: {label}", path)
                figs.append(f"![validation MRR, {label}]({rel}/{path.name})")
        lines += [" ".join(figs), ""]
    atomic_write_text(out, "\n".join(lines))
    return out
