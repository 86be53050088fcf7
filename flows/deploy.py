"""Serve the whole pipeline as a scheduled Prefect deployment.

    export PREFECT_API_URL=http://127.0.0.1:4200/api     # a running `prefect server start`
    python -m flows.deploy --cron "0 3 * * *"             # every day at 03:00 (UTC unless --timezone)
    python -m flows.deploy --interval 3600 --root /srv/raptor

The process stays in the foreground: it registers the deployment ``raptor-pipeline/<name>`` with the
server, polls for scheduled runs and executes each in a subprocess (working directory ``--root``).
Each run is :func:`flows.scheduled.scheduled_pipeline`, i.e. :func:`flows.pipeline.pipeline_flow` on
``--root``'s dvc.yaml: DVC's stage graph, where only changed stages run (a run on unchanged inputs
retrains nothing) and ``dvc.lock`` records what ran. The deployment takes no run parameters: a run
requested through the API cannot name another project or dvc file (the server refuses it).
Against a server that requires credentials set ``PREFECT_API_AUTH_STRING`` (docs/deployment.md).
Stop it with Ctrl-C or SIGTERM (the deployment's schedule is paused on shutdown). Runs can also be started by
hand: ``prefect deployment run raptor-pipeline/<name>``. By default at most one run executes at a
time (``--limit``), so a long run is never overlapped by the next scheduled one.

A server is needed: Prefect's temporary local API has no scheduler, so no run would ever be
created. See docs/deployment.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta
from pathlib import Path

from raptor.pipeline.runenv import apply_defaults

DEFAULT_NAME = "raptor-scheduled"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m flows.deploy",
        description="Serve the whole pipeline of one project (flows.scheduled) as a scheduled Prefect deployment.",
    )
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help='cron expression, e.g. "0 3 * * *" (03:00 every day)')
    when.add_argument("--interval", type=float, help="seconds between runs, e.g. 86400")
    p.add_argument("--timezone", default="UTC", help="timezone of the schedule (default UTC)")
    p.add_argument("--params", default="params.yaml", help="params file to check before serving, relative to "
                   "--root (default params.yaml; params.local.yaml beside it applies too)")
    p.add_argument("--root", default=".", help="project directory the runs work in (default: current)")
    p.add_argument("--name", default=DEFAULT_NAME, help=f"deployment name (default {DEFAULT_NAME})")
    p.add_argument("--limit", type=int, default=1, help="most runs executing at once (default 1)")
    p.add_argument("--tag", action="append", default=[], help="deployment tag (repeatable)")
    return p


def schedule_from_args(args: argparse.Namespace):
    from prefect.schedules import Cron, Interval

    if args.cron is not None:
        return Cron(args.cron, timezone=args.timezone)
    if args.interval <= 0:
        raise ValueError("--interval: must be > 0 seconds")
    return Interval(timedelta(seconds=args.interval), timezone=args.timezone)


def serve(args: argparse.Namespace, root: Path, params: Path) -> None:
    """Register the deployment and serve it until Ctrl-C or SIGTERM; both pause its schedule (no
    runs pile up while nobody serves them) and end without a traceback."""
    import asyncio
    import signal

    from prefect.deployments.runner import EntrypointType
    from prefect.runner import Runner
    from prefect.utilities.callables import ParameterSchema

    from .scheduled import ROOT_ENV, scheduled_pipeline

    class _NoParameters(ParameterSchema):
        # The flow has none; without this the schema still admits unknown keys ({"root": ...}).
        additionalProperties: bool = False

    class _Runner(Runner):
        def handle_sigterm(self, *_, **__):
            # Prefect's own handler stops the runner from inside the signal handler and exits at
            # once ("Runner.astop was never awaited"), skipping the pause. A KeyboardInterrupt raised
            # here is no better: with a run in flight Prefect's executor catches it (the run is
            # killed, the runner goes on serving). So schedule the runner's own async stop on its
            # loop: `start()` then returns normally and the shutdown pauses the schedule.
            loop = getattr(self, "_loop", None)
            if loop is None or not loop.is_running() or getattr(self, "_sigterm_seen", False):
                signal.raise_signal(signal.SIGINT)  # not serving yet, or a second SIGTERM
                return
            self._sigterm_seen = True
            loop.call_soon_threadsafe(lambda: loop.create_task(self.astop()))

    # The project is fixed here, not by run parameters: the runner's flow-run subprocesses inherit it.
    os.environ[ROOT_ENV] = str(root)
    runner = _Runner(name=args.name, pause_on_shutdown=True, limit=args.limit)
    deployment = scheduled_pipeline.to_deployment(
        name=args.name,
        schedules=[schedule_from_args(args)],
        description=f"The raptor-tkg pipeline on {params}, scheduled "
        + (f"by cron '{args.cron}' ({args.timezone})" if args.cron else f"every {args.interval:g} s"),
        tags=["raptor", *args.tag],
        concurrency_limit=args.limit,  # shown on the deployment's page (the runner enforces it too)
        # Import the flow as a module (flows.scheduled) in each run: its relative imports need it.
        entrypoint_type=EntrypointType.MODULE_PATH,
        enforce_parameter_schema=True,  # the server refuses a run that names any parameter (HTTP 409)
    )
    deployment._parameter_openapi_schema = _NoParameters(additionalProperties=False)  # noqa: SLF001
    # As Runner.add_flow does: runs execute locally, from the flow object in memory (not from an
    # entrypoint read back from the server).
    deployment.work_pool_name = None
    deployment.work_queue_name = None
    deployment_id = runner.add_deployment(deployment)
    runner._deployment_registry.register_flow(deployment_id, scheduled_pipeline)  # noqa: SLF001
    print(f"flows.deploy: serving raptor-pipeline/{args.name} (at most {args.limit} run(s) at once); "
          "Ctrl-C or SIGTERM stops and pauses the schedule", file=sys.stderr, flush=True)
    try:
        asyncio.run(runner.start())
    except KeyboardInterrupt:
        pass
    print("flows.deploy: stopped; the schedule is paused", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(args.root).resolve()
    params = Path(args.params) if Path(args.params).is_absolute() else root / args.params
    if not params.is_file():
        print(f"flows.deploy: params file not found: {params}", file=sys.stderr)
        return 2
    if args.limit < 1:
        print("flows.deploy: --limit must be >= 1", file=sys.stderr)
        return 2
    try:
        schedule_from_args(args)  # validated now: a bad schedule fails before the server check
    except ValueError as exc:
        print(f"flows.deploy: {exc}", file=sys.stderr)
        return 2
    from raptor.config import LOCAL_PARAMS, load_params

    try:
        load_params(params, local=params.parent / LOCAL_PARAMS)  # a broken params file fails now, not at 03:00
    except Exception as exc:  # noqa: BLE001 - any load error is reported the same way
        print(f"flows.deploy: {exc}", file=sys.stderr)
        return 2
    if not os.environ.get("PREFECT_API_URL"):
        print(
            "flows.deploy: PREFECT_API_URL is not set. A schedule needs a Prefect server:\n"
            "  prefect server start --host 127.0.0.1 --port 4200 &\n"
            "  export PREFECT_API_URL=http://127.0.0.1:4200/api",
            file=sys.stderr,
        )
        return 2

    # Runs execute in subprocesses that inherit this working directory: relative paths in
    # params.yaml (datasets.*.raw_dir) resolve against the project root, as with `dvc repro`.
    os.chdir(root)
    apply_defaults(root)
    serve(args, root, params)
    return 0


if __name__ == "__main__":
    sys.exit(main())
