"""The library commands of ``raptor`` (one module each) and what their arguments share."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    """An argparse ``type``: an integer >= 0 (argparse then says ``argument --seed: must be >= 0``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


#: ``--local none``: read no local overrides file.
NO_LOCAL = "none"


def add_local_option(p: argparse.ArgumentParser) -> None:
    """``--local``: the untracked overrides file the direct forms apply on top of ``--params``, as the
    stages apply params.local.yaml on top of params.yaml (:func:`command_params`)."""
    p.add_argument("--local", default=None,
                   help="local overrides (profile: NAME, KEY: VALUE) applied on top of --params (default: "
                        "params.local.yaml beside the --params file, when it exists; `none`: no local file)")


def command_params(args: argparse.Namespace, overrides: dict | None = None):
    """``(params, source)``: ``args.params`` with the local overrides file (``args.local``, else
    params.local.yaml beside ``args.params`` when it exists) and then ``overrides`` applied; ``source``
    says in words what was read (the start line of a command that trains or evaluates)."""
    from pathlib import Path

    from raptor.config import LOCAL_PARAMS, load_params

    if args.local == NO_LOCAL:
        used = None
    elif args.local is not None and not Path(args.local).is_file():
        raise FileNotFoundError(f"--local {args.local}: no such file (`--local {NO_LOCAL}`: no local overrides)")
    else:
        local = Path(args.local) if args.local is not None else Path(args.params).parent / LOCAL_PARAMS
        used = local if local.is_file() else None
    params = load_params(args.params, overrides, local=used)
    source = f"{args.params}" + (f" + {used}" if used else "") + f" (profile {params.profile})"
    return params, source
