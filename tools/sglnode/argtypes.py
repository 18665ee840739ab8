"""Argument types that refuse what no run can use, at parse time (usage error, exit 64).

`float("nan")` and `float("inf")` parse as floats, and a NaN compares false with every bound, so a
plain `type=float` lets `--timeout nan` through to a deadline that is never reached (issue 16).
Every number on the command line goes through `number()`: finite, within stated bounds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TypeVar

N = TypeVar("N", int, float)

# The longest wait or timeout any command accepts: a week. Longer is a typo (or `inf`).
MAX_SECONDS = 7 * 24 * 3600.0


def number(
    kind: type[N], minimum: float, maximum: float, *, above: bool = False, unit: str = ""
) -> Callable[[str], N]:
    """An argparse type: `kind(text)`, finite, `minimum <= value <= maximum` (`>` with `above`)."""

    def parse(text: str) -> N:
        try:
            value = kind(text.strip())
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number (got {text!r})")
        low_ok = value > minimum if above else value >= minimum
        if not low_ok or value > maximum:
            low = f"> {minimum:g}" if above else f">= {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {low} and <= {maximum:g}{unit} (got {text!r})")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse


def seconds(
    minimum: float = 0.0, maximum: float = MAX_SECONDS, *, above: bool = True
) -> Callable[[str], float]:
    """A duration in seconds: finite, positive unless told otherwise, at most a week."""
    return number(float, minimum, maximum, above=above, unit=" s")
