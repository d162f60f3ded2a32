"""What agents send with their default configs, against real servers on the Qwen-template tiny
models: Claude Code's billing line kept out of the prompt so that a changed hash leaves the
cached prefix whole (`--keep-client-headers`: kept in)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

import localspec
from localspec.server.client_lines import CLAUDE_CODE_BILLING, RULES, messages_system
from tests.server.conftest import Server, qwen_models, server_env, start_server

__all__ = ["qwen_models", "server_env"]

TRACES = Path(localspec.__file__).parent / "workloads" / "agents"
BILLING = "x-anthropic-billing-header: cc_version=2.1.197.6c5; cc_entrypoint=cli;"
GREEDY = {"temperature": 0, "spec": "off"}


@pytest.fixture(scope="module")
def agent_server(server_env: None, qwen_models: tuple[Path, Path]) -> Iterator[Server]:
    running = start_server(*qwen_models, "--ctx-size", "8192")
    yield running
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)


def recorded(agent: str, index: int = 0) -> dict[str, Any]:
    """A request body from a shipped trace, as the agent sent it."""
    line = (TRACES / f"{agent}.jsonl").read_text().splitlines()[index]
    body: dict[str, Any] = json.loads(line)["body"]
    return body


# --- the billing line ------------------------------------------------------------------


def claude_code_body(billing: str, marker: str) -> dict[str, Any]:
    """Claude Code's first request from the shipped trace with `billing` as its first system
    block, shortened to fit the tiny server's context; `marker` keeps tests' prompts apart."""
    body = recorded("claude-code")
    body["system"][0]["text"] = billing
    body["system"][2]["text"] = marker + body["system"][2]["text"][:1200]
    for tool in body["tools"]:
        tool["description"] = tool["description"][:200]
    return {**body, "stream": False, "max_tokens": 2, **GREEDY}


def test_the_billing_line_is_one_declared_rule() -> None:
    assert CLAUDE_CODE_BILLING in RULES
    for rule in RULES:
        assert rule.client and rule.seen_in and rule.where and rule.done


@pytest.mark.parametrize(
    "line",
    [
        BILLING,  # `claude -p`
        f"{BILLING[:-1]}; cch=eb6c6;",  # interactive: the hash changes per request
        "x-anthropic-billing-header: cc_version=2.1.100.7b4; cc_entrypoint=cli; cch=00000;",
    ],
)
def test_the_billing_line_is_dropped_where_claude_code_puts_it(line: str) -> None:
    rest = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "x"}}]
    assert messages_system([{"type": "text", "text": line}, *rest]) == rest
    assert messages_system(f"{line}\nYou are Claude Code.") == "You are Claude Code."
    assert messages_system(line) == ""


@pytest.mark.parametrize(
    "system",
    [
        # not first
        [{"type": "text", "text": "You are Claude Code."}, {"type": "text", "text": BILLING}],
        "You are Claude Code.\n" + BILLING,
        # not the exact fields
        "x-anthropic-billing-header: cc_entrypoint=cli; cc_version=2.1.197;",
        "x-anthropic-billing-header: cc_version=2.1.197.6c5;",
        "X-Anthropic-Billing-Header: cc_version=2.1.197.6c5; cc_entrypoint=cli;",
        # more on the line, or before it
        BILLING + " and then the instructions",
        " " + BILLING,
        [{"type": "text", "text": BILLING + "\nYou are Claude Code."}],
        [{"type": "image", "text": BILLING}],
        None,
        [],
    ],
)
def test_what_merely_looks_like_it_is_left_alone(system: Any) -> None:
    assert messages_system(copy.deepcopy(system)) == system


def test_a_changed_billing_hash_reuses_the_whole_prompt(agent_server: Server) -> None:
    """The real request shape (the shipped trace), two requests differing only in `cch`:
    the second processes nothing of the prompt again but the one token every generation
    decodes."""
    with agent_server.tcp() as http:
        first = http.post(
            "/v1/messages", json=claude_code_body(f"{BILLING} cch=1a2b3;", "raw.")
        ).json()
        second = http.post(
            "/v1/messages", json=claude_code_body(f"{BILLING} cch=9f8e7;", "raw.")
        ).json()
    prompt = first["usage"]["input_tokens"] + first["usage"]["cache_read_input_tokens"]
    assert prompt > 500
    assert second["usage"]["input_tokens"] + second["usage"]["cache_read_input_tokens"] == prompt
    assert second["usage"]["input_tokens"] <= 1
    assert second["timings"]["prompt_n"] <= 1


def test_the_same_through_the_anthropic_sdk(agent_server: Server) -> None:
    """Claude Code's client library, the line as the first line of a string `system`."""
    sdk = anthropic.Anthropic(base_url=agent_server.url, api_key=agent_server.token)
    body = claude_code_body(BILLING, "sdk.")
    text = "\n".join(block["text"] for block in body["system"][1:])
    usages = []
    for cch in ("0a1b2", "c3d4e"):
        message = sdk.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=2,
            system=f"{BILLING[:-1]}; cch={cch};\n{text}",
            messages=body["messages"],
            tools=body["tools"],
            extra_body=GREEDY,
        )
        usages.append(message.usage)
    assert usages[1].input_tokens <= 1
    assert usages[1].cache_read_input_tokens == (
        usages[0].input_tokens + (usages[0].cache_read_input_tokens or 0) - usages[1].input_tokens
    )


def _count(server: Server, body: dict[str, Any]) -> int:
    fields = {key: body[key] for key in ("model", "system", "messages", "tools")}
    with server.tcp() as http:
        response = http.post("/v1/messages/count_tokens", json=fields)
    assert response.status_code == 200, response.text
    count: int = response.json()["input_tokens"]
    return count


def test_the_line_elsewhere_stays_in_the_prompt(agent_server: Server) -> None:
    body = claude_code_body(BILLING, "count.")
    without = {**body, "system": body["system"][1:]}
    assert _count(agent_server, body) == _count(agent_server, without)
    in_user = copy.deepcopy(without)
    in_user["messages"][0]["content"][0]["text"] = BILLING
    shorter = copy.deepcopy(without)
    shorter["messages"][0]["content"][0]["text"] = ""
    assert _count(agent_server, in_user) > _count(agent_server, shorter)


def test_keep_client_headers_keeps_the_line(
    server_env: None, qwen_models: tuple[Path, Path]
) -> None:
    server = start_server(*qwen_models, "--ctx-size", "8192", "--keep-client-headers")
    try:
        body = claude_code_body(BILLING, "keep.")
        without = {**body, "system": body["system"][1:]}
        assert _count(server, body) > _count(server, without)
        with server.tcp() as http:
            http.post("/v1/messages", json=claude_code_body(f"{BILLING} cch=1a2b3;", "keep."))
            again = http.post(
                "/v1/messages", json=claude_code_body(f"{BILLING} cch=9f8e7;", "keep.")
            ).json()
        # the hash comes a few tokens in: everything after it is processed again
        assert again["usage"]["input_tokens"] > 500
    finally:
        assert server.stop() == 0
