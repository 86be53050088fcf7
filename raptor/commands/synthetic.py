"""`raptor synthetic`: write a tiny synthetic TKG in the raw published layout (for smoke runs)."""

from __future__ import annotations

import argparse
import dataclasses

from raptor.data.synthetic import SCALE_PRESETS, SyntheticSpec, write_raw, write_scaled_raw

NAME = "synthetic"
#: One line for `raptor --help`.
SHORT = "a tiny synthetic TKG in the raw layout (smoke runs, tests), or one of a dataset's size"
HELP = ("Write a tiny synthetic TKG with planted patterns in the raw ICEWS layout to --out (for smoke runs and tests), "
        "or with --preset one of a published dataset's size and shape (scale measurements).")


#: What each field of :class:`raptor.data.synthetic.SyntheticSpec` means, as its option's help.
FIELD_HELP = {
    "num_entities": "entities",
    "num_relations": "relations: 0-4 carry the planted patterns, the rest are noise (at least 6)",
    "num_timestamps": "time steps (days)",
    "one_hop_per_step": "planted one-hop instances per step (s r_a o at t, then s r_b o a step or two later)",
    "two_hop_per_step": "planted two-hop instances per step (s r_c x, x r_d o, then s r_e o)",
    "noise_per_step": "random noise facts per step",
    "train_fraction": "share of the steps, from the start, in train",
    "valid_fraction": "share of the steps after train in valid (the rest is test)",
    "time_step": "raw time units per step (24 mimics ICEWS18's hours)",
    "first_day": "the first step's raw time, in steps (ICEWS files start at 1)",
    "seed": "random seed of the facts (and of --preset's)",
}


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="output folder (raw layout: train/valid/test.txt, dictionaries)")
    defaults = SyntheticSpec()
    for f in dataclasses.fields(SyntheticSpec):
        p.add_argument(f"--{f.name.replace('_', '-')}", type=type(getattr(defaults, f.name)),
                       default=getattr(defaults, f.name), help=f"{FIELD_HELP.get(f.name, '')} (default: %(default)s)".lstrip())
    p.add_argument("--preset", choices=sorted(SCALE_PRESETS),
                   help="instead: a TKG of this dataset's size and shape (Zipf popularity, recurring facts; "
                        "raptor.data.synthetic.ScaleSpec), seeded by --seed")


def run(args: argparse.Namespace) -> int:
    if args.preset:
        spec = dataclasses.replace(SCALE_PRESETS[args.preset], seed=args.seed)
        out = write_scaled_raw(args.out, spec)
        print(f"synthetic {args.preset}-sized TKG ({spec.num_entities:,} entities, {spec.num_relations} relations, "
              f"{spec.num_timestamps:,} steps of {spec.time_step} raw units) -> {out}")
        return 0
    spec = SyntheticSpec(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SyntheticSpec)})
    out = write_raw(args.out, spec)
    print(f"synthetic TKG ({spec.num_entities} entities, {spec.num_relations} relations, "
          f"{spec.num_timestamps} days) -> {out}")
    return 0
