"""What agents send with their default configs, against real servers on the Qwen-template tiny
models: hosted tools left out (and said so), namespaced functions offered and called back as
the client declared them, and Claude Code's billing line kept out of the prompt so that a
changed hash leaves the cached prefix whole (`--keep-client-headers`: kept in)."""

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
from localspec.server.hosted_tools import METADATA_KEY
from tests.server.conftest import Server, qwen_models, server_env, start_server
from tests.server.schemas import WEATHER

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


def claude_code_body(billing: str, marker: str, keep: int = 1200) -> dict[str, Any]:
    """Claude Code's first request from the shipped trace with `billing` as its first system
    block, its instructions shortened to `keep` characters (to fit the tiny server's
    context); `marker` keeps tests' prompts apart."""
    body = recorded("claude-code")
    body["system"][0]["text"] = billing
    body["system"][2]["text"] = marker + body["system"][2]["text"][:keep]
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


# --- hosted tools and namespaces -------------------------------------------------------

FUNCTION = {"type": "function", "name": "get_weather", "parameters": WEATHER}
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Start a sub-agent",
    "strict": False,
    "parameters": {
        "type": "object",
        "properties": {"fork": {"type": "boolean"}},
        "required": ["fork"],
        "additionalProperties": False,
    },
}
AGENTS = {"type": "namespace", "name": "agents", "description": "Sub-agents", "tools": [SPAWN]}
WEB_SEARCH = {"type": "web_search", "external_web_access": False}


def _responses(server: Server, **body: Any) -> dict[str, Any]:
    sent = {"model": "gpt-5-codex", "input": "Start a sub-agent.", **GREEDY, **body}
    with server.tcp() as http:
        response = http.post("/v1/responses", json=sent)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_codex_default_tools_are_served(agent_server: Server) -> None:
    """Functions, a namespace of functions and web_search, as a default Codex CLI config
    sends them: the call comes back named as the namespace declared it."""
    forced = {"type": "function", "name": "spawn_agent"}
    tools = [FUNCTION, AGENTS, WEB_SEARCH]
    answer = _responses(agent_server, tools=tools, tool_choice=forced, max_output_tokens=200)
    call = next(item for item in answer["output"] if item["type"] == "function_call")
    assert (call["name"], call["namespace"]) == ("spawn_agent", "agents")
    assert isinstance(json.loads(call["arguments"])["fork"], bool)
    assert answer["metadata"] == {METADATA_KEY: "web_search"}
    # the call sent back with its namespace reads as the call the model made
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "started"}
    history = [{"role": "user", "content": "Start a sub-agent."}, call, output]
    plain = {**call, "name": "spawn_agent"}
    del plain["namespace"]
    back = _responses(agent_server, tools=tools, input=history, max_output_tokens=1)
    same = _responses(
        agent_server, tools=tools, input=[history[0], plain, output], max_output_tokens=1
    )
    assert back["usage"]["input_tokens"] == same["usage"]["input_tokens"]


def test_a_namespaced_name_taken_twice_is_qualified(agent_server: Server) -> None:
    other = {**AGENTS, "name": "helpers"}
    forced = {"type": "function", "name": "spawn_agent", "namespace": "helpers"}
    answer = _responses(
        agent_server, tools=[AGENTS, other], tool_choice=forced, max_output_tokens=200
    )
    call = next(item for item in answer["output"] if item["type"] == "function_call")
    assert (call["name"], call["namespace"]) == ("spawn_agent", "helpers")
    assert METADATA_KEY not in answer["metadata"]
    # sent back, it reads as the call of the model's helpers.spawn_agent
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "started"}
    qualified = {key: value for key, value in call.items() if key != "namespace"}
    qualified["name"] = "helpers.spawn_agent"
    counts = []
    for sent in (call, qualified):
        history = [{"role": "user", "content": "go"}, sent, output]
        again = _responses(agent_server, tools=[AGENTS, other], input=history, max_output_tokens=1)
        counts.append(again["usage"]["input_tokens"])
    assert counts[0] == counts[1]


def test_a_streamed_namespaced_call_names_its_namespace(agent_server: Server) -> None:
    body = {
        "model": "m",
        "input": "go",
        "tools": [AGENTS],
        "tool_choice": "required",
        "max_output_tokens": 200,
        "stream": True,
        **GREEDY,
    }
    with agent_server.tcp() as http, http.stream("POST", "/v1/responses", json=body) as response:
        text = response.read().decode()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    added = next(e for e in events if e["type"] == "response.output_item.added")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert (added["item"]["name"], added["item"]["namespace"]) == ("spawn_agent", "agents")
    assert done["name"] == "spawn_agent"


def test_hosted_tools_are_left_out_of_the_prompt_and_logged_once(agent_server: Server) -> None:
    bare = _responses(agent_server, input="hosted?", max_output_tokens=1)
    for _ in range(2):
        hosted = _responses(
            agent_server,
            input="hosted?",
            tools=[{"type": "file_search"}, {"type": "code_interpreter"}],
            max_output_tokens=1,
        )
        assert hosted["usage"]["input_tokens"] == bare["usage"]["input_tokens"]
        assert hosted["metadata"][METADATA_KEY] == "file_search,code_interpreter"
    lines = [line for line in agent_server.log if "file_search, code_interpreter" in line]
    assert len(lines) == 1, agent_server.log


def test_anthropic_server_tools_are_left_out(agent_server: Server) -> None:
    ask = [{"role": "user", "content": "Search the web"}]
    custom = {"name": "get_weather", "input_schema": WEATHER}
    server_tool = {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}
    base = {"model": "claude-sonnet-4-5", "messages": ask, "system": "s"}
    assert _count(agent_server, {**base, "tools": [custom, server_tool]}) == _count(
        agent_server, {**base, "tools": [custom]}
    )
    with agent_server.tcp() as http:
        body = {**base, "tools": [custom, server_tool], "max_tokens": 2, **GREEDY}
        assert http.post("/v1/messages", json=body).status_code == 200
    assert [line for line in agent_server.log if "web_search_20250305" in line]


@pytest.mark.parametrize(
    ("path", "body", "names"),
    [
        (
            "/v1/responses",
            {"input": "x", "tools": [WEB_SEARCH], "tool_choice": {"type": "web_search"}},
            "'web_search'",
        ),
        ("/v1/responses", {"input": "x", "tools": [WEB_SEARCH], "tool_choice": "required"}, "web"),
        ("/v1/responses", {"input": "x", "tools": [{"type": "local_shell"}]}, "local_shell"),
        (
            "/v1/responses",
            {"input": "x", "tools": [{**AGENTS, "tools": [{"type": "custom", "name": "p"}]}]},
            "tools[0].tools[0].type",
        ),
        (
            "/v1/messages",
            {
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 2,
                "tools": [{"type": "web_search_20250305", "name": "web_search"}],
                "tool_choice": {"type": "tool", "name": "web_search"},
            },
            "web_search_20250305",
        ),
        (
            "/v1/messages",
            {
                "messages": [{"role": "user", "content": "x"}],
                "max_tokens": 2,
                "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}],
                "tool_choice": {"type": "any"},
            },
            "web_fetch_20250910",
        ),
    ],
)
def test_forcing_what_cannot_run_is_a_400_naming_it(
    agent_server: Server, path: str, body: dict[str, Any], names: str
) -> None:
    with agent_server.tcp() as http:
        response = http.post(path, json={"model": "m", **body})
    assert response.status_code == 400, response.text
    assert names in response.text
