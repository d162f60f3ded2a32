"""The Responses API's `tools` as the model gets them: functions, functions grouped under a
`namespace`, and hosted tools left out (`localspec.server.hosted_tools`).

Codex CLI declares its sub-agent and MCP tools as namespaces:
`{"type": "namespace", "name": NS, "description": ..., "tools": [{"type": "function",
"name": NAME, ...}]}`, and reads a call to one back as a `function_call` item carrying both
(`"name": NAME, "namespace": NS`); it sends such items back in later requests' `input` the
same way. The model is offered each of them as a plain function named NAME (NS.NAME when
NAME is taken by another tool), and `Names` maps between the two.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from localspec.server.hosted_tools import refuse_only_hosted, responses_hosted
from localspec.server.served_runtime import ServedRuntime
from localspec.server.tools import ToolRequest, checked_tools, function_tool, tool_choice
from localspec.server.wire import Fields
from localspec.tools.grammar import Tool, ToolChoice


@dataclass
class Names:
    """The names of namespaced functions: the model's (`NAME` or `NS.NAME`) and the client's
    (NS, NAME), both ways."""

    client: dict[str, tuple[str, str]] = field(default_factory=dict)
    model: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, model_name: str, namespace: str, name: str) -> None:
        self.client[model_name] = (namespace, name)
        self.model[namespace, name] = model_name

    def model_name(self, namespace: str | None, name: str) -> str:
        """The model's name for a call the client sends back (`function_call` items)."""
        if not namespace:
            return name
        return self.model.get((namespace, name), name)

    def call_fields(self, model_name: str) -> dict[str, Any]:
        """A call's `name` (and `namespace`) as the client expects them back."""
        pair = self.client.get(model_name)
        if pair is None:
            return {"name": model_name}
        return {"name": pair[1], "namespace": pair[0]}


@dataclass(frozen=True)
class ResponsesTools:
    """What the request's `tools` became: the tool request (None without any function),
    the namespaced functions' names, and the hosted tools left out (their types)."""

    request: ToolRequest | None
    names: Names
    left_out: tuple[str, ...]


def responses_tools(fields: Fields, runtime: ServedRuntime) -> ResponsesTools:
    """The request's tools as the model is offered them; a `tool_choice` that forces a
    hosted tool, or requires a call where only hosted tools are declared, is a 400."""
    declared: list[tuple[str | None, Fields]] = []
    left_out: list[str] = []
    for index, raw in enumerate(fields.objects("tools")):
        tool = Fields(raw, prefix=f"tools[{index}].")
        kind = tool.string("type")
        if kind == "function":
            declared.append((None, tool))
        elif kind == "namespace":
            declared.extend(_namespace(tool))
        elif responses_hosted(kind):
            left_out.append(kind)
        else:
            raise tool.error(
                "type",
                f"{kind!r} is not supported: send function tools (alone or in a namespace); "
                "hosted tools (web_search, ...) are left out",
            )
    kinds = tuple(dict.fromkeys(left_out))
    _refuse_forced_hosted(fields)
    tools, names = _named(declared)
    choice = tool_choice(fields)
    if choice.mode == "function" and choice.name:
        namespace = fields.mapping("tool_choice").string("namespace") or None
        choice = ToolChoice("function", names.model_name(namespace, choice.name))
    refuse_only_hosted(fields, choice, len(tools), kinds, "required")
    request = checked_tools(
        fields, runtime, tuple(tools), choice, fields.boolean("parallel_tool_calls")
    )
    return ResponsesTools(request, names, kinds)


def _namespace(declared: Fields) -> list[tuple[str | None, Fields]]:
    namespace = declared.string("name")
    if not namespace:
        raise declared.error("name", "must be the namespace's name")
    inner: list[tuple[str | None, Fields]] = []
    for index, raw in enumerate(declared.objects("tools")):
        tool = Fields(raw, prefix=f"{declared.prefix}tools[{index}].")
        kind = tool.string("type")
        if kind != "function":
            raise tool.error("type", f"{kind!r} is not supported in a namespace: only function is")
        inner.append((namespace, tool))
    return inner


def _named(declared: list[tuple[str | None, Fields]]) -> tuple[list[Tool], Names]:
    """The function tools under the model's names: a namespaced function keeps its own name
    unless another tool has it, then it is NS.NAME."""
    counts = Counter(tool.string("name") for _namespace, tool in declared)
    names = Names()
    tools = []
    for namespace, tool in declared:
        name = tool.string("name")
        if not name:
            raise tool.error("name", "must be the function's name")
        model_name = name
        if namespace is not None:
            model_name = f"{namespace}.{name}" if counts[name] > 1 else name
            names.add(model_name, namespace, name)
        tools.append(function_tool(tool, model_name))
    return tools, names


def _refuse_forced_hosted(fields: Fields) -> None:
    """A `tool_choice` that forces a hosted tool (`{"type": "web_search"}`) cannot be
    followed: a 400 naming it."""
    value = fields.body.get("tool_choice")
    if isinstance(value, dict):
        kind = value.get("type")
        if isinstance(kind, str) and responses_hosted(kind):
            raise fields.error(
                "tool_choice",
                f"forces the hosted tool {kind!r}, which this server cannot run (hosted tools "
                "are left out of the prompt): choose a function tool, auto or none",
            )
