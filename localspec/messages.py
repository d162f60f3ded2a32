"""A turn of a conversation, as every surface builds it and every prompt renders it.

It lives on its own, importing nothing that loads llama.cpp, so the client of a running
server (`localspec.remote`), the chat template's rendering and the runtime share one type.
"""

from __future__ import annotations

from dataclasses import dataclass

from localspec.tools.calls import ToolCall


@dataclass(frozen=True)
class Message:
    """One turn of a conversation. `tool_calls`: the calls an assistant's turn made;
    `tool_call_id`: which call a `tool` turn (`content`: the call's result) answers."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
