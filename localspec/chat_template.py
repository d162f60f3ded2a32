"""Rendering a conversation with the GGUF's own Jinja chat template, its failures made errors.

A chat template is code shipped inside the model file: it can fail to compile, read a variable
it was never given, or refuse a conversation on purpose (`raise_exception('System role not
supported')`). Each of those becomes one `ChatTemplateError` naming the model, the template's
message and its line; an error raised outside the template's own code is a bug and propagates.
A template also runs with a budget of steps, time and output (`localspec.template_sandbox`):
one that loops without end or renders gigabytes is the same one-line error.

Tools reach the template as Hugging Face's chat templates expect them (Qwen2.5's renders its
`# Tools` block and `<tool_call>` history from these): the tool definitions as `tools`, an
assistant's calls as `tool_calls` with the arguments as data, a tool's result as a `tool`
message.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.errors import ChatTemplateError
from localspec.messages import Message
from localspec.template_sandbox import BudgetedEnvironment, TemplateBudgetError

# jinja2 rewrites a rendering error's traceback so the template's frames carry this file name
# and the template's own line numbers
_TEMPLATE_FRAME = "<template>"


def template_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """`messages` as chat templates read them; a tool result also gets the `name` of the
    function whose call it answers (templates that label results read it)."""
    names = {call.id: call.name for message in messages for call in message.tool_calls}
    rendered: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_value()},
                }
                for call in message.tool_calls
            ]
        if message.tool_call_id is not None:
            item["tool_call_id"] = message.tool_call_id
            if message.tool_call_id in names:
                item["name"] = names[message.tool_call_id]
        rendered.append(item)
    return rendered


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    model: str,
    bos: str,
    eos: str,
    tools: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The prompt text `template` makes of `messages` (and `tools`, OpenAI's definitions),
    ending with the assistant's turn."""
    environment = BudgetedEnvironment()
    try:
        compiled = environment.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(model, exc.message or str(exc), exc.lineno) from exc
    # what llama-cpp-python's Jinja2ChatFormatter passes, so templates see the same names
    context = {
        "messages": list(messages),
        "eos_token": eos,
        "bos_token": bos,
        "raise_exception": _raise_exception,
        "add_generation_prompt": True,
        "functions": None,
        "function_call": None,
        "tools": list(tools) or None,
        "tool_choice": None,
        "strftime_now": Jinja2ChatFormatter.strftime_now,
    }
    try:
        return environment.render(compiled, context)
    except TemplateBudgetError as exc:
        raise ChatTemplateError(model, str(exc), _template_line(exc)) from None
    except Exception as exc:  # the template is code from the model file: it raises anything
        line = _template_line(exc)
        if line is None:
            raise
        raise ChatTemplateError(model, str(exc) or type(exc).__name__, line) from exc


def _raise_exception(message: str) -> None:
    """The templates' own way to refuse a conversation (`raise_exception('...')`)."""
    raise ValueError(message)


def _template_line(exc: BaseException) -> int | None:
    """The template line the error was raised on, or None when the template did not raise it."""
    lines = [
        frame.lineno
        for frame in traceback.extract_tb(exc.__traceback__)
        if frame.filename == _TEMPLATE_FRAME
    ]
    return lines[-1] if lines else None
