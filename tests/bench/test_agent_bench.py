"""`localspec bench agent` end to end: a session recorded by a real server (`serve --record`)
on the Qwen-template tiny models, replayed in two modes; counts, kinds and exactness."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from localspec.bench.agent import (
    AgentTurn,
    TurnResult,
    base_turns,
    load_trace,
    prompt_work,
    replay,
    replayed,
    shipped_traces,
    speedups,
    summarise,
    turn_kind,
)
from localspec.cli import main
from localspec.errors import UsageError
from tests.server.conftest import qwen_models, server_env, start_server

__all__ = ["qwen_models", "server_env"]

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
CHAT = [{"role": "user", "content": "Read hello.py"}]
CALLED = [
    *CHAT,
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "print(6 * 7)\n" * 20},
]


def test_turn_kinds_on_every_api() -> None:
    assert turn_kind("/v1/chat/completions", {"messages": CHAT}) == "side"
    assert turn_kind("/v1/chat/completions", {"messages": CHAT, "tools": TOOLS}) == "first"
    assert turn_kind("/v1/chat/completions", {"messages": CALLED, "tools": TOOLS}) == "tool"
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1"}]}
    assert turn_kind("/v1/messages", {"messages": [result], "tools": [{}]}) == "tool"
    output = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    assert turn_kind("/v1/responses", {"input": [output], "tools": [{}]}) == "tool"
    assert turn_kind("/v1/responses", {"input": "hi", "tools": [{}]}) == "first"


def test_replayed_bodies_are_greedy_whole_and_capped() -> None:
    turn = AgentTurn("a", 1, "/v1/messages", {"max_tokens": 32000, "stream": True, "messages": []})
    sent = replayed(turn, "ngram", 64)
    assert sent["stream"] is False and sent["temperature"] == 0
    assert sent["spec"] == {"mode": "ngram", "learn": True, "suffix_drafts": True}
    assert sent["max_tokens"] == 64
    assert replayed(turn, "auto+no-suffix", 64, learn=False)["spec"] == {
        "mode": "auto",
        "learn": False,
        "suffix_drafts": False,
    }
    responses = AgentTurn("a", 2, "/v1/responses", {"input": "hi"})
    assert replayed(responses, "off", 64)["max_output_tokens"] == 64
    chat = AgentTurn("a", 3, "/v1/chat/completions", {"max_completion_tokens": 10})
    assert replayed(chat, "off", 64) == {
        "stream": False,
        "temperature": 0,
        "spec": {"mode": "off", "learn": True, "suffix_drafts": True},
        "max_tokens": 10,
    }


def test_only_the_last_mode_of_a_turn_teaches_the_server() -> None:
    """Every mode of a turn drafts from the earlier turns' answers, none from another mode's
    answer to its own turn."""
    turns = [AgentTurn("a", i, "/v1/chat/completions", {"messages": []}) for i in (1, 2, 3)]
    sent: list[dict[str, Any]] = []

    def post(path: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
        sent.append(body["spec"])
        raise ValueError("not a server")

    sessions: list[int] = []
    run = replay(
        turns,
        ["off", "auto", "auto+no-suffix"],
        repeats=2,
        max_tokens=8,
        post=post,
        session=sessions.append,
    )
    assert sessions == [0, 1]  # a fresh server before each repeat
    assert len(run.failures) == len(sent) == 3 * 3 * 2
    learning = [spec["learn"] for spec in sent]
    assert learning == [False, False, True] * 6
    assert sorted(spec["mode"] for spec in sent[:3]) == ["auto", "auto", "off"]


def test_shipped_traces_load() -> None:
    traces = shipped_traces()
    assert traces, "the agent traces ship with the package"
    for path in traces:
        turns = load_trace(path)
        assert {turn.path for turn in turns} <= {
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/responses",
        }


def test_a_trace_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"no": "path"}\n')
    with pytest.raises(UsageError, match="serve --record"):
        load_trace(bad)


def test_a_recorded_session_replays_in_each_mode(
    server_env: None, qwen_models: tuple[Path, Path], tmp_path: Path
) -> None:
    trace = tmp_path / "tiny-agent.jsonl"
    server = start_server(*qwen_models, "--ctx-size", "2048", "--record", str(trace))
    bodies: list[tuple[str, dict[str, Any]]] = [
        ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4}),
        ("/v1/chat/completions", {"messages": CHAT, "tools": TOOLS, "max_tokens": 40}),
        ("/v1/chat/completions", {"messages": CALLED, "tools": TOOLS, "max_tokens": 40}),
        ("/v1/messages", {"model": "m", "messages": CHAT, "max_tokens": 6}),
        ("/v1/responses", {"model": "m", "input": "Read hello.py", "max_output_tokens": 6}),
    ]
    try:
        with server.tcp() as http:
            for path, body in bodies:
                assert http.post(path, json=body).status_code == 200
    finally:
        assert server.stop() == 0
    out = tmp_path / "agent.json"
    target, draft = qwen_models
    code = main(
        [
            "bench", "agent", str(trace), "--target", str(target), "--draft", str(draft),
            "--ctx-size", "2048", "--threads", "1", "--modes", "off,ngram,auto+no-suffix",
            "--max-tokens", "12", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    document = json.loads(out.read_text())
    results = document["results"]
    assert len(results) == len(bodies) * 3
    kinds = {result["index"]: result["kind"] for result in results}
    assert kinds == {1: "side", 2: "first", 3: "tool", 4: "side", 5: "side"}
    for index in kinds:
        per_mode = {r["mode"]: r for r in results if r["index"] == index}
        assert per_mode.keys() == {"off", "ngram", "auto+no-suffix"}
        # greedy speculation is exact: every mode generates the same number of tokens
        generated = {mode: result["generated"] for mode, result in per_mode.items()}
        assert len(set(generated.values())) == 1 and generated["off"] <= 12, generated
    assert {row["kind"] for row in document["rows"]} == {"side", "first", "tool", "all"}


def test_per_turn_ratios_compare_speeds_not_times() -> None:
    def result(mode: str, generated: int, decode_s: float) -> TurnResult:
        return TurnResult("a", 1, "tool", mode, 0, 100, 0, generated, 1.0, decode_s, 0, 0, 2.0)

    # auto wrote a few more tokens than off (a near-tie, warm cache against cold), faster
    results = [result("off", 100, 10.0), result("auto", 120, 10.0)]
    assert speedups(results, "auto") == [pytest.approx(1.2)]
    rows = {row.mode: row for row in summarise(results, ["off", "auto"]) if row.kind == "all"}
    assert rows["auto"].tokens_per_s == pytest.approx(12.0)


def test_each_turn_continues_the_last_turn_it_extends() -> None:
    """Claude Code's fourth turn grows its last message rather than adding one: its base is
    the second turn; its `cache_control` marks, which move every turn, are not compared."""
    bases = {}
    for path in shipped_traces():
        for (agent, index), base in base_turns(load_trace(path)).items():
            bases[agent, index] = base.index
    assert bases == {
        ("claude-code", 2): 1,
        ("claude-code", 3): 2,
        ("claude-code", 4): 2,
        ("codex-cli", 2): 1,
        ("opencode", 3): 2,
    }


def test_prompt_work_counts_what_was_processed_again() -> None:
    chat = {"messages": CHAT, "tools": TOOLS}
    turns = [
        AgentTurn("a", 1, "/v1/chat/completions", chat),
        AgentTurn("a", 2, "/v1/chat/completions", {"messages": CALLED, "tools": TOOLS}),
        AgentTurn("a", 3, "/v1/chat/completions", {"messages": CHAT}),  # a side request
    ]

    def result(index: int, mode: str, prompt: int, cached: int) -> TurnResult:
        return TurnResult("a", index, "x", mode, 0, prompt, cached, 1, 0.0, 0.1, 0, 0, 1.0)

    results = [
        result(1, "off", 1000, 0),
        result(1, "auto", 1000, 999),  # the second mode of a turn finds it cached
        result(2, "auto", 1300, 100),  # 300 new, 1200 processed: 900 again
        result(2, "off", 1300, 1299),
        result(3, "off", 50, 0),
    ]
    work = {row.index: row for row in prompt_work(turns, results)}
    assert (work[1].processed, work[1].new, work[1].again) == (1000, 1000, 0)
    assert (work[2].processed, work[2].new, work[2].again) == (1200, 300, 900)
    assert (work[3].new, work[3].again) == (50, 0)


def _variant(trace: Path, out: Path, change: Any) -> Path:
    """The shipped trace with `change(body, turn number)` applied to each request."""
    lines = []
    for number, line in enumerate(trace.read_text().splitlines(), 1):
        record = json.loads(line)
        change(record["body"], number)
        lines.append(json.dumps(record))
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("parallel", [[], ["--parallel", "1"]])
def test_the_bench_shows_a_prefix_processed_again(
    server_env: None, qwen_models: tuple[Path, Path], tmp_path: Path, parallel: list[str]
) -> None:
    """Claude Code's shipped trace, as recorded (`claude -p`), as interactive use sends it
    (the billing line's `cch` changing per request, which the server leaves out), and with a
    line that changes per request in front of its system prompt: only the last one processes
    its turns' prompts again, and the report says how much; with the server's default slots
    and with one (`--parallel 1`: the side request shares the conversation's slot)."""
    trace = next(path for path in shipped_traces() if path.stem == "claude-code")

    def billing_hash(body: dict[str, Any], number: int) -> None:
        body["system"][0]["text"] += f" cch={number:05x};"

    def session_line(body: dict[str, Any], number: int) -> None:
        body["system"][1]["text"] = f"Session {number}.\n" + body["system"][1]["text"]

    traces = [
        trace,
        _variant(trace, tmp_path / "interactive.jsonl", billing_hash),
        _variant(trace, tmp_path / "volatile.jsonl", session_line),
    ]
    out = tmp_path / "agent.json"
    target, draft = qwen_models
    code = main(
        [
            "bench", "agent", *map(str, traces), "--target", str(target), "--draft", str(draft),
            "--ctx-size", "16384", "--threads", "1", "--modes", "off", "--max-tokens", "2",
            "--json", str(out), *parallel,
        ]
    )  # fmt: skip
    assert code == 0
    document = json.loads(out.read_text())
    assert document["settings"]["parallel"] == (int(parallel[1]) if parallel else None)
    work = document["prompt_work"]
    assert len(work) == 3 * 4
    for row in work:
        if row["index"] == 1:
            assert row["new"] == row["prompt_tokens"]
        elif row["agent"] == "volatile":
            assert row["again"] > row["prompt_tokens"] // 2, row
        else:
            assert row["processed"] <= row["new"] + 32, row


INTERACTIVE = ["claude-code-interactive", "codex-cli-interactive", "opencode-interactive"]
BILLING = re.compile(r"x-anthropic-billing-header: cc_version=[\w.]+; cc_entrypoint=cli;")
TINY_CTX = 131072  # the tiny tokenizer: 89,937 tokens for the 24,158 of Claude Code's prompt


def test_the_interactive_traces_are_sessions_with_side_requests() -> None:
    """What makes them the interactive case: each holds two questions and side requests, and
    Claude Code's billing line changes from request to request (its `cc_version` ends in a
    hash of the request: `2.1.197.f66`, `2.1.197.6c5`)."""
    traces = shipped_traces(interactive=True)
    assert [path.stem for path in traces] == INTERACTIVE
    for path in traces:
        turns = load_trace(path)
        kinds = [turn.kind for turn in turns]
        assert kinds.count("first") >= 2 and "side" in kinds and "tool" in kinds, kinds
    claude = load_trace(traces[0])
    lines = {turn.body["system"][0]["text"] for turn in claude}
    assert len(lines) > 1 and all(BILLING.fullmatch(line) for line in lines), lines


@pytest.mark.parametrize("parallel", [[], ["--parallel", "1"]])
def test_interactive_sessions_process_only_what_each_turn_adds(
    server_env: None, qwen_models: tuple[Path, Path], tmp_path: Path, parallel: list[str]
) -> None:
    """The interactive traces replayed (`bench agent --interactive`): every turn processes
    at most what it added to the conversation plus 32 tokens, side requests between the
    turns included; with the server's default slots and with one (`--parallel 1`: a side
    request takes the conversation's slot, whose cache comes back from the prompt cache)."""
    out = tmp_path / "agent.json"
    target, draft = qwen_models
    code = main(
        [
            "bench", "agent", "--interactive", "--target", str(target), "--draft", str(draft),
            "--ctx-size", str(TINY_CTX), "--threads", "1", "--modes", "off", "--max-tokens", "2",
            "--json", str(out), *parallel,
        ]
    )  # fmt: skip
    assert code == 0
    work = json.loads(out.read_text())["prompt_work"]
    turns = [turn for path in shipped_traces(interactive=True) for turn in load_trace(path)]
    assert len(work) == len(turns)
    for row in work:
        assert row["processed"] <= row["new"] + 32, row
