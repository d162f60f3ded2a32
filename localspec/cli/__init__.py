"""The `localspec` command: parses arguments, then runs the command they name (`exit_codes`).

Only the parser is imported here: `--version` and `--help` end while parsing, before logging,
the state folder's paths or any command's module is imported (a command's handler imports its
module when it runs: `parser`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from localspec.cli.bench_parser import default_bench
from localspec.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(default_bench(sys.argv[1:] if argv is None else argv))
    from localspec.cli.exit_codes import run  # noqa: PLC0415  (not for --version and --help)

    return run(args)


if __name__ == "__main__":
    sys.exit(main())
