"""A jinja2 sandbox with a budget, for chat templates: code shipped inside a model file.

jinja2's sandbox keeps a template away from Python's internals but not from the CPU or the
memory: `range(100000)` nested twice runs ten billion steps, `'x' * 10**10` asks for ten
gigabytes, and both hang or kill the process that loads the model. Here every loop step taken
through `range` and every call counts against a step budget (with a wall-clock deadline as a
backstop for steps the count does not see), every string or list built with `*`, `+` or
`**` is sized before it is built, and the output is measured while it is produced. A template
that exceeds any of these raises `TemplateBudgetError` from inside its own code, so the
caller can name the template line it stopped on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import jinja2
import jinja2.ext
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

MAX_STEPS = 1_000_000
"""Loop steps through `range` plus calls: a long conversation with tools takes thousands."""
MAX_OUTPUT_CHARS = 8_000_000
"""Twice what a million-token context holds: no prompt a model can read is longer."""
MAX_SECONDS = 10.0
"""Only a backstop for work the step count does not see; the step budget ends loops first."""
_MAX_EXPONENT = 10_000


class TemplateBudgetError(Exception):
    """The template ran past its step, time or output budget; the message says which."""


class BudgetedEnvironment(ImmutableSandboxedEnvironment):
    """The environment llama-cpp-python's `Jinja2ChatFormatter` builds (same options, same
    `generation` tag and `tojson`), with the budget of this module."""

    intercepted_binops = frozenset({"*", "+", "**"})

    def __init__(self) -> None:
        super().__init__(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[Jinja2ChatFormatter.IgnoreGenerationTags, jinja2.ext.loopcontrols],
        )
        self.filters["tojson"] = Jinja2ChatFormatter.tojson
        self.globals["range"] = self._range
        self.steps = 0
        self.deadline = time.monotonic() + MAX_SECONDS

    def render(self, template: jinja2.Template, context: dict[str, Any]) -> str:
        """`template` rendered with `context`, chunk by chunk, the output measured as it grows."""
        self.steps, self.deadline = 0, time.monotonic() + MAX_SECONDS
        chunks: list[str] = []
        size = 0
        for chunk in template.generate(context):
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise TemplateBudgetError(
                    f"its output passed {MAX_OUTPUT_CHARS} characters, more than any prompt"
                )
            chunks.append(chunk)
            self._step()
        return "".join(chunks)

    def _step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS or time.monotonic() > self.deadline:
            raise TemplateBudgetError(
                f"it ran past its budget ({MAX_STEPS} loop steps and calls, {MAX_SECONDS:g} s): "
                f"a loop that does not end"
            )

    def _range(self, *args: int) -> Iterator[int]:
        for value in range(*args):
            self._step()
            yield value

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self._step()
        if isinstance(getattr(__obj, "__self__", None), str):
            _check_size(max((a for a in args if isinstance(a, int)), default=0))
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        """`*`, `+` and `**`, refused when the result would be larger than the output budget."""
        self._step()
        if operator == "**" and isinstance(right, int) and right > _MAX_EXPONENT:
            raise TemplateBudgetError(f"it raises a number to the power {right}")
        if operator == "*":
            for sized, count in ((left, right), (right, left)):
                if isinstance(sized, str | list | tuple) and isinstance(count, int):
                    _check_size(len(sized) * count)
        if operator == "+" and isinstance(left, str | list) and isinstance(right, str | list):
            _check_size(len(left) + len(right))
        return super().call_binop(context, operator, left, right)


def _check_size(size: int) -> None:
    if size > MAX_OUTPUT_CHARS:
        raise TemplateBudgetError(
            f"it builds a value of {size} items, more than the {MAX_OUTPUT_CHARS} allowed"
        )
