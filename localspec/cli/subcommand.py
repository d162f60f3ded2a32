"""What every sub-command's parser module shares: the subparsers' type and how a
sub-command is added with its handler."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:  # argparse's subparsers type is generic only to type checkers
    Commands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

Handler = Callable[[argparse.Namespace], int]


def add_command(
    commands: Commands, name: str, handler: Handler, help_: str
) -> argparse.ArgumentParser:
    """The parser of sub-command `name`, which runs `handler`."""
    sub = commands.add_parser(name, help=help_, description=help_)
    sub.set_defaults(handler=handler)
    return sub
