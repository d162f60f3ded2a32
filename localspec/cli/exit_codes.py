"""Running a parsed command: logging set up, then every way it can end turned into an exit code.

Exit codes: 0 success, 1 runtime failure, 2 usage error, 130 interrupted. Every failure is
one line on stderr: a `LocalspecError` says what to do; anything else is a bug, reported as
one line with where its traceback went (`--verbose` prints it too).
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
import traceback
from typing import TypeGuard

from localspec.errors import LocalspecError
from localspec.paths import error_log_path, write_private


def run(args: argparse.Namespace) -> int:
    """Run the command `args` chose (`args.handler`) and return its exit code."""
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # huggingface_hub prints its warnings through its own handler already
    logging.getLogger("huggingface_hub").propagate = False
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a full disk says so here, not in Python's shutdown
        return code
    except LocalspecError as exc:
        if args.verbose:
            logging.exception("failed")
        print(f"localspec: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("localspec: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, without Python's shutdown complaint
        _drop_stdout()
        return 0
    except Exception as exc:  # a bug: one line, the traceback kept for the report
        if _output_failed(exc):
            _drop_stdout()
            print(
                f"localspec: error: cannot write the output ({exc.strerror}): free some space or "
                f"send it elsewhere",
                file=sys.stderr,
            )
            return 1
        if args.verbose:
            logging.exception("unexpected error")
        kept = _kept(exc, shown=args.verbose)
        print(f"localspec: internal error: {_describe(exc)} ({kept})", file=sys.stderr)
        return 1


_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _output_failed(exc: Exception) -> TypeGuard[OSError]:
    """Whether `exc` is a write to a stream (no file name: stdout) that found no room: the
    output sent to a full disk or `/dev/full`, not a bug."""
    return isinstance(exc, OSError) and exc.errno in _FULL and exc.filename is None


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered is not flushed (and failed) again
    at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _kept(exc: BaseException, shown: bool) -> str:
    """Write the traceback to the state folder for a bug report; say where it is (`shown`:
    --verbose has printed it as well)."""
    log = error_log_path()
    try:  # the traceback may quote the user's prompt: a private file, never through a link
        write_private(log, "".join(traceback.format_exception(exc)))
    except (OSError, LocalspecError):
        return "a bug; the traceback is above" if shown else "a bug; see it with --verbose"
    if shown:
        return f"a bug; the traceback is above and in {log}"
    return f"a bug; the traceback is in {log}, or run with --verbose"
