"""Rendering a conversation with the GGUF's own Jinja chat template, its failures made errors.

A chat template is code shipped inside the model file: it can fail to compile, read a variable
it was never given, or refuse a conversation on purpose (`raise_exception('System role not
supported')`). Each of those becomes one `ChatTemplateError` naming the model, the template's
message and its line; an error raised outside the template's own code is a bug and propagates.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from typing import Any

import jinja2
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.errors import ChatTemplateError

# jinja2 rewrites a rendering error's traceback so the template's frames carry this file name
# and the template's own line numbers
_TEMPLATE_FRAME = "<template>"


def render_chat(
    template: str, messages: Sequence[dict[str, str]], *, model: str, bos: str, eos: str
) -> str:
    """The prompt text `template` makes of `messages`, ending with the assistant's turn."""
    try:
        formatter = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(model, exc.message or str(exc), exc.lineno) from exc
    # llama-cpp-python types messages as a union of TypedDicts; plain dicts are what it reads
    chat: list[Any] = list(messages)
    try:
        text: str = formatter(messages=chat).prompt
    except Exception as exc:  # the template is code from the model file: it raises anything
        line = _template_line(exc)
        if line is None:
            raise
        raise ChatTemplateError(model, str(exc) or type(exc).__name__, line) from exc
    return text


def _template_line(exc: BaseException) -> int | None:
    """The template line the error was raised on, or None when the template did not raise it."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == _TEMPLATE_FRAME
    ]
    return lines[-1] if lines else None
