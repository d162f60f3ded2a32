"""How large a constraint may be, checked on its text before the constraint library sees it.

llguidance compiles grammars and schemas recursively: a GBNF chain of ~3,500 rules, or a
`$ref` chain of ~2,000 definitions, overflows a thread's 8 MiB stack and kills the process
with SIGSEGV, and a 20,000-rule grammar takes ~20 s to compile even on a stack that holds it.
Three limits bound that work (`serve --max-grammar-bytes`, `--max-constraint-depth`,
`--max-constraint-rules`), and compiling runs on a thread with a large stack
(`on_large_stack`), so what fits the limits cannot overflow it. The counts are read from the
text without parsing it (parsing deep text is itself what overflows), erring on the high side.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from localspec.constraints.constraint import Constraint
from localspec.errors import ConstraintError

T = TypeVar("T")

COMPILE_STACK_BYTES = 256 * 1024 * 1024
"""The compiling thread's stack: 30x what the largest grammar the default limits allow was
measured to need (virtual memory; only the pages used are ever touched)."""

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_GBNF_RULE = re.compile(r"::=")
_LARK_RULE = re.compile(r"^\s*[?!]?[A-Za-z_][\w-]*(?:\.\d+)?\s*:", re.MULTILINE)
_REF = re.compile(r'"\$ref"\s*:')


@dataclass(frozen=True)
class ConstraintLimits:
    """`max_bytes`: the source text's UTF-8 size; `max_depth`: nesting of brackets (a JSON
    schema's objects and arrays, a grammar's or regex's groups); `max_rules`: a grammar's rule
    definitions or a schema's `$ref`s, whose chains llguidance follows recursively."""

    max_bytes: int = 256 * 1024
    max_depth: int = 64
    max_rules: int = 1000


class ConstraintLimitError(ConstraintError):
    """A constraint larger than this server or command compiles."""

    def __init__(self, kind: str, what: str, found: int, limit: int, option: str) -> None:
        self.found, self.limit = found, limit
        super().__init__(
            kind, f"it has {found} {what}, over the limit of {limit} (raise it with {option})"
        )


def check_limits(constraint: Constraint, limits: ConstraintLimits) -> None:
    """Raise `ConstraintLimitError` when `constraint`'s text passes one of `limits`."""
    kind, source = constraint.kind, constraint.source
    size = len(source.encode("utf-8", "surrogatepass"))
    if size > limits.max_bytes:
        raise ConstraintLimitError(kind, "bytes", size, limits.max_bytes, "--max-grammar-bytes")
    depth = nesting_depth(constraint)
    if depth > limits.max_depth:
        raise ConstraintLimitError(
            kind, "levels of nesting", depth, limits.max_depth, "--max-constraint-depth"
        )
    rules = rule_count(constraint)
    if rules > limits.max_rules:
        what = "$refs" if kind == "json_schema" else "rules"
        raise ConstraintLimitError(kind, what, rules, limits.max_rules, "--max-constraint-rules")


def nesting_depth(constraint: Constraint) -> int:
    """The deepest bracket nesting outside string literals (escaped brackets in a regex do
    not count; one inside a character class does, which only errs high)."""
    text = _STRING.sub("", constraint.source)
    if constraint.kind == "regex":
        text = re.sub(r"\\.", "", text)
    opening, closing = ("{[", "}]") if constraint.kind == "json_schema" else ("(", ")")
    depth = deepest = 0
    for match in re.finditer(f"[{re.escape(opening + closing)}]", text):
        depth += 1 if match.group() in opening else -1
        deepest = max(deepest, depth)
    return deepest


def rule_count(constraint: Constraint) -> int:
    """A grammar's rule definitions, or a schema's `$ref`s (regexes have neither)."""
    pattern = {"gbnf": _GBNF_RULE, "lark": _LARK_RULE, "json_schema": _REF}.get(constraint.kind)
    return 0 if pattern is None else len(pattern.findall(constraint.source))


def on_large_stack(work: Callable[[], T]) -> T:
    """`work()` run on a thread with a `COMPILE_STACK_BYTES` stack, its result or exception
    passed back; the calling thread waits."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # re-raised on the calling thread
            failure.append(exc)

    with _STACK_SIZE_LOCK:
        previous = threading.stack_size(COMPILE_STACK_BYTES)
        try:
            thread = threading.Thread(target=run, name="localspec-constraint-compile")
            thread.start()
        finally:
            threading.stack_size(previous)
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


_STACK_SIZE_LOCK = threading.Lock()


def release_freed_memory() -> None:
    """Hand memory freed by a compile back to the system (glibc's `malloc_trim`): llguidance
    may use hundreds of MB while compiling, and glibc keeps freed memory in its arenas, so a
    server's resident size would stay at the largest compile's peak."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    import ctypes.util  # noqa: PLC0415  (ctypes and subprocess: not for every command's parser)

    name = ctypes.util.find_library("c")
    trim: Callable[[int], int] | None = getattr(ctypes.CDLL(name), "malloc_trim", None)
    return trim if name else None
