"""Tools a client declares that the API's provider runs on its side (web search, file search,
code execution, computer use): there is none of that here, so they are left out of the
prompt and the model never calls them.

Clients declare them by default: Codex CLI sends `web_search`, Claude Code asks for
`web_search_20250305` in its WebSearch tool's requests. Refusing the request (as this server
did) stopped a default Codex CLI config at its first request; leaving the tool out lets the
model answer with the tools it can call. Each request kind (the endpoint and the tools left
out) is logged once per server, and a Responses answer says so in its `metadata`
(`METADATA_KEY`); Anthropic's message has no such field. A request that forces a call of a
hosted tool (`tool_choice`) asks for what cannot happen: still a 400 naming the tool.
"""

from __future__ import annotations

import logging
import threading

from localspec.server.wire import Fields
from localspec.tools.grammar import ToolChoice

_log = logging.getLogger(__name__)

METADATA_KEY = "localspec_tools_left_out"
"""The Responses answer's `metadata` key naming the hosted tools left out (comma-separated:
OpenAI's metadata values are strings)."""

_RESPONSES_HOSTED = frozenset(
    {"web_search", "file_search", "code_interpreter", "image_generation", "mcp"}
)
_RESPONSES_HOSTED_PREFIXES = ("web_search_", "computer_use")
# Anthropic's server tools, versioned by date: web_search_20250305, web_fetch_20250910, ...
_MESSAGES_SERVER_PREFIXES = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_")


def responses_hosted(kind: str) -> bool:
    """Whether a Responses tool `type` is one OpenAI runs (`web_search_preview` and the dated
    `computer_use_preview` variants too)."""
    return kind in _RESPONSES_HOSTED or kind.startswith(_RESPONSES_HOSTED_PREFIXES)


def messages_server_tool(kind: str) -> bool:
    """Whether a Messages tool `type` is one of Anthropic's server tools."""
    return kind.startswith(_MESSAGES_SERVER_PREFIXES)


def refuse_only_hosted(
    fields: Fields, choice: ToolChoice, functions: int, kinds: tuple[str, ...], word: str
) -> None:
    """A call required (`word`: the API's name for it) where every tool declared is hosted
    (`kinds`) cannot be made: a 400 naming them."""
    if choice.mode == "required" and not functions and kinds:
        raise fields.error(
            "tool_choice",
            f"is {word!r} but the only tools are hosted ones ({', '.join(kinds)}), which this "
            "server cannot run: declare tools the client runs, or leave tool_choice auto",
        )


class LeftOutLog:
    """One log line per request kind that had hosted tools left out: a client sends the
    same tools with every request, and a line per request would bury the server's others."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, tuple[str, ...]]] = set()
        self._lock = threading.Lock()  # requests are read on worker threads

    def note(self, route: str, kinds: tuple[str, ...]) -> None:
        if not kinds:
            return
        with self._lock:
            if (route, kinds) in self._seen:
                return
            self._seen.add((route, kinds))
        _log.warning(
            "%s: the hosted tools %s are left out of the prompt: this server cannot run them, "
            "so the model is not offered them (said once per request kind)",
            route,
            ", ".join(kinds),
        )
