"""Claude Code's changing billing line on the real pair, through the official `anthropic` SDK
(marker real_model): two requests of its interactive shape (the shipped interactive trace)
that differ only in that line process the shared prompt once.

Interactive Claude Code 2.1.197 ends the line's `cc_version` in a hash of the request
(`2.1.197.f66`, then `2.1.197.6c5`); kept in the prompt, that first line would make every token
after it new to the cache (`localspec.server.client_lines`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest

from localspec.bench.agent import load_trace, shipped_traces
from tests.server.conftest import server_env, start_server

__all__ = ["server_env"]

pytestmark = pytest.mark.real_model

VERSIONS = ("2.1.197.f66", "2.1.197.6c5")  # as the recorded session sent them


def interactive_request() -> dict[str, Any]:
    """Claude Code's first main request from the interactive trace, with its `Read` tool
    only and its instructions shortened (~3,000 tokens: a minute of prompt on a CPU)."""
    trace = next(path for path in shipped_traces(interactive=True) if "claude" in path.stem)
    body = next(turn.body for turn in load_trace(trace) if turn.kind == "first")
    system = [dict(block) for block in body["system"]]
    system[2]["text"] = system[2]["text"][:2000]
    tools = [tool for tool in body["tools"] if tool["name"] == "Read"]
    return {"system": system, "messages": body["messages"], "tools": tools}


def test_a_changed_billing_line_reuses_the_prompt(
    server_env: None, pair_paths: tuple[Path, Path]
) -> None:
    request = interactive_request()
    server = start_server(*pair_paths, "--ctx-size", "8192", "--spec", "off", threads=None)
    usages = []
    try:
        sdk = anthropic.Anthropic(base_url=server.url, api_key=server.token, max_retries=0)
        for version in VERSIONS:
            billing = f"x-anthropic-billing-header: cc_version={version}; cc_entrypoint=cli;"
            system = [{"type": "text", "text": billing}, *request["system"][1:]]
            message = sdk.messages.create(
                model="claude-opus-4-8",
                max_tokens=1,
                system=system,
                messages=request["messages"],
                tools=request["tools"],
                extra_body={"temperature": 0, "spec": "off"},
            )
            usages.append(message.usage)
    finally:
        assert server.stop() == 0
    first, second = usages
    prompt = first.input_tokens + (first.cache_read_input_tokens or 0)
    assert prompt > 2000
    assert second.input_tokens + (second.cache_read_input_tokens or 0) == prompt
    assert second.input_tokens <= 1  # the one token every generation decodes again
