"""The options that bound what one request (or `complete --grammar FILE`) may make the
process do: a constraint's size, depth and rules; on `serve`, stop strings too."""

from __future__ import annotations

import argparse

from localspec.cli.arguments import LIMITS, at_least, option_group
from localspec.constraints.limits import ConstraintLimits
from localspec.speculative.textstream import StopLimits

_CONSTRAINT = ConstraintLimits()
_STOPS = StopLimits()


def add_constraint_limit_options(parser: argparse.ArgumentParser) -> None:
    group = option_group(parser, LIMITS)
    group.add_argument(
        "--max-grammar-bytes",
        type=at_least(1),
        default=_CONSTRAINT.max_bytes,
        metavar="BYTES",
        help=f"largest grammar, JSON schema or regex compiled (default {_CONSTRAINT.max_bytes})",
    )
    group.add_argument(
        "--max-constraint-depth",
        type=at_least(1),
        default=_CONSTRAINT.max_depth,
        metavar="N",
        help="deepest nesting of a schema's objects and arrays or a grammar's groups "
        f"(default {_CONSTRAINT.max_depth})",
    )
    group.add_argument(
        "--max-constraint-rules",
        type=at_least(1),
        default=_CONSTRAINT.max_rules,
        metavar="N",
        help=f"most rules in a grammar, or $refs in a schema (default {_CONSTRAINT.max_rules})",
    )


def add_request_limit_options(parser: argparse.ArgumentParser) -> None:
    add_constraint_limit_options(parser)
    group = option_group(parser, LIMITS)
    group.add_argument(
        "--max-stops",
        type=at_least(1),
        default=_STOPS.max_stops,
        metavar="N",
        help=f"most stop strings a request may send (default {_STOPS.max_stops})",
    )
    group.add_argument(
        "--max-stop-length",
        type=at_least(1),
        default=_STOPS.max_length,
        metavar="CHARS",
        help=f"longest stop string a request may send (default {_STOPS.max_length})",
    )


def constraint_limits(args: argparse.Namespace) -> ConstraintLimits:
    """The limits the options ask for; a command without them gets the defaults."""
    return ConstraintLimits(
        max_bytes=getattr(args, "max_grammar_bytes", _CONSTRAINT.max_bytes),
        max_depth=getattr(args, "max_constraint_depth", _CONSTRAINT.max_depth),
        max_rules=getattr(args, "max_constraint_rules", _CONSTRAINT.max_rules),
    )


def stop_limits(args: argparse.Namespace) -> StopLimits:
    return StopLimits(max_stops=args.max_stops, max_length=args.max_stop_length)
