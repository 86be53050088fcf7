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
