"""``python -m flows STAGE ...``: run one pipeline stage as a Prefect flow (what ``dvc.yaml`` calls)."""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flows", description="Run one pipeline stage as a Prefect flow.")
    sub = parser.add_subparsers(dest="stage", required=True)
    p = sub.add_parser("ingest", help="raw splits -> Parquet dataset")
    p.add_argument("--out", required=True)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--raw", default=None, help="override data.raw_dir")
    p = sub.add_parser("graph", help="Parquet dataset -> graph.npz")
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from . import stages  # imported late: Prefect starts up only for a real run

    if args.stage == "ingest":
        result = stages.ingest_flow(out_dir=args.out, params_path=args.params, raw_dir=args.raw)
    elif args.stage == "graph":
        result = stages.graph_flow(data_dir=args.data, out_path=args.out)
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
