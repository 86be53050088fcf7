"""`raptor ingest`: raw ICEWS text splits -> validated Parquet dataset."""

from __future__ import annotations

import argparse
from dataclasses import replace

from raptor.config import load_params
from raptor.data.ingest import LAYOUT_HELP, LAYOUTS, IngestOptions, dataset_options, ingest, ingest_from_url

NAME = "ingest"
HELP = (
    "Validate raw splits (train/valid/test.txt, with entity2id.txt and relation2id.txt or names in the splits) "
    "and write train/valid/test.parquet, entities.parquet, relations.parquet and meta.json to --out, atomically."
)


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument("--raw", help="folder with the raw splits (default: the dataset's raw_dir in params)")
    p.add_argument("--dataset", help="dataset of params `datasets` (default: the only one listed)")
    p.add_argument("--out", required=True, help="output folder (replaced as a whole when valid)")
    p.add_argument("--params", default="params.yaml", help="params file (default: %(default)s)")
    p.add_argument("--url", help="fetch an archive instead of reading --raw (online machines only)")
    p.add_argument("--sha256", help="expected SHA-256 of the --url archive (required with --url)")
    p.add_argument("--layout", choices=LAYOUTS, help=f"how the raw folder is written (default: the dataset's "
                   f"layout in params, else auto = detect). {LAYOUT_HELP}")
    p.add_argument("--no-verify", action="store_true",
                   help="do not check the raw files against the dataset's published checksums (params `datasets.NAME.checksums`; a copy of your own)")
    p.add_argument("--sums", help="SHA256SUMS file to check the raw files against "
                   "(default: one found in the raw folder or its parent)")


def run(args: argparse.Namespace) -> int:
    name, d = None, None
    if args.dataset or not args.raw:  # --raw alone needs no params file
        name, d = load_params(args.params).dataset(args.dataset)
    url = args.url or (d.url if d else None)
    options = dataset_options(name, d) if d else IngestOptions()
    options = replace(options, layout=args.layout or options.layout)
    if args.no_verify:
        options = replace(options, checksums={})
    if url:
        result = ingest_from_url(url, args.sha256 or (d.sha256 if d else None), args.out, options)
    else:
        result = ingest(args.raw or d.raw_dir, args.out, replace(options, sums_file=args.sums))
    counts = ", ".join(f"{k} {v:,}" for k, v in result.counts.items())
    print(
        f"ingested {result.num_entities:,} entities, {result.num_relations:,} relations; {counts}; "
        f"time step {result.time_step} (offset {result.time_offset}) -> {result.out_dir} in {result.seconds:.2f} s"
    )
    return 0
