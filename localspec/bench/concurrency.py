"""`localspec bench concurrency`: does a streaming chat answer hold up the editor, and the
editor the chat?

The contenders are the editor bench's server processes (`editor.start_servers`): `localspec
serve`, and llama-server with 3 slots (`-np 3`) when one is given. Each repeat runs three
phases per contender, back to back:
- editor alone: K llama.vim completions to `/infill` (the editor session's, sent as the editor
  bench sends them: greedy), one after another, a round trip each;
- chat alone: one streaming `/v1/chat/completions` answer to a fixed coding question, at most
  M tokens, greedy: the time to its first content chunk and its tokens/s, by the client's clock;
- both: the same chat on a thread; once its first content chunk has arrived and `delay_s` has
  passed, the same K completions one after another, each answer marked by whether it came
  back before the chat's last chunk (a server that serves one request at a time answers the
  editor only after the chat).
With a context (`--chat-context FILE`, as an agent's turn carries a file), the chat's
question follows that text, made new for every request (`fresh_context`), and the completions
start `delay_s` after the chat is sent: they arrive while its prompt is processed, where a
server that stops a prompt only between its llama.cpp calls makes them wait for one.
The contenders take turns per repeat, alternating who goes first, so that a slow minute of
the shared machine falls on both. Before the repeats each answers the completions and the
chat once, untimed, so that the first repeat is not the only one to meet cold caches.

The completions are the same K requests in every phase: "alone" and "during" differ in the
chat beside them, not in the prompts. From the warm-up on, each prompt is one the server has
seen, as an editor's next request mostly is (the text around the cursor barely moves); a chat
that takes the editor's KV cells makes the editor process its prompts again, which is part of
what a user meets, and so part of what is measured.

The chat's tokens are its `usage.completion_tokens` (asked for with `stream_options`), else its
content chunks counted; its speed is the tokens after the first over the time from the first
content chunk to the last. llama-server's OpenAI route has no fixed-length option, so an answer
may end before M tokens: the speed is per token either way. "With the editor" is the whole
answer's speed, the part before the completions and after the last one included: how many
completions came back while it streamed says how much of it the editor shared.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from localspec.bench.contender import Skipped
from localspec.bench.editor import Reply, prepared, read_reply
from localspec.bench.llama_vim import EditorRequest
from localspec.bench.server_process import (
    FAILURES,
    REQUEST_TIMEOUT_S,
    InBackground,
    failure_text,
)

QUESTION = "Write a Python function that parses an INI file, with docstrings and tests."
CHAT_PATH = "/v1/chat/completions"
DEFAULT_FIM = 8
DEFAULT_CHAT_TOKENS = 300
DEFAULT_DELAY_S = 1.0
DEFAULT_REPEATS = 3
LLAMA_SLOTS = 3

Done = Callable[[str, str, float], None]
"""Called after each phase: (what ran, contender, a speed for the progress line)."""


class Contender(Protocol):
    """What the bench needs of a server (`server_process.ServerProcess`; tests script one)."""

    name: str

    def post(self, path: str, body: dict[str, Any] | None) -> tuple[Any, float]: ...

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[Any]: ...

    def log_tail(self, lines: int = 5) -> str: ...


@dataclass(frozen=True)
class ConcurrencyOptions:
    chat_tokens: int = DEFAULT_CHAT_TOKENS
    # after the chat's first content chunk (with `context`: after sending it), before the editor
    delay_s: float = DEFAULT_DELAY_S
    repeats: int = DEFAULT_REPEATS
    # text the chat carries before its question, as an agent's turn carries a file: the
    # completions then start while its prompt is processed (`--chat-context`)
    context: str = ""


@dataclass(frozen=True)
class ChatRun:
    """One streamed chat answer, by the client's clock (`time.perf_counter`)."""

    first_token_s: float  # from sending the request to the first content chunk
    tokens: int
    decode_s: float  # from the first content chunk to the last
    ended_at: float  # when the last chunk (`[DONE]`) arrived
    server_tokens_per_s: float | None = None  # the server's own timings.predicted_per_second

    @property
    def tokens_per_s(self) -> float:
        if self.tokens < 2 or self.decode_s <= 0:
            return math.nan
        return (self.tokens - 1) / self.decode_s


@dataclass(frozen=True)
class Round:
    """One contender's three phases in one repeat."""

    name: str
    repeat: int
    fim_alone: list[Reply]
    chat_alone: ChatRun
    fim_during: list[Reply]
    chat_during: ChatRun
    while_streaming: list[bool]  # per `fim_during`: back before the chat's last chunk


@dataclass
class ConcurrencyResult:
    rounds: list[Round] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


CONTEXT_MARK_CHARS = 400
"""`fresh_context` marks the text at least this often (at the end of the line that reaches
it): ~100-150 tokens of code, so no run between marks is long enough for a server's chunk
reuse (`--cache-reuse 256` tokens) to take it from an earlier chat (a single line of over
~1,000 characters could be)."""


def fresh_context(text: str, send: str) -> str:
    """`text` as no server has seen it before, for the chat's request named `send`: a line
    naming the send leads it and follows every `CONTEXT_MARK_CHARS` characters' worth of lines,
    so that its whole prompt is processed, as an agent's new turn's tool results are."""
    marked, run = [f"# send {send}"], 0
    for number, line in enumerate(text.splitlines()):
        marked.append(line)
        run += len(line) + 1
        if run >= CONTEXT_MARK_CHARS:
            marked.append(f"# send {send}.{number}")
            run = 0
    return "\n".join(marked)


def chat_body(max_tokens: int, context: str = "") -> dict[str, Any]:
    content = f"{context}\n\n{QUESTION}" if context else QUESTION
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def read_chat(chunks: Iterable[Any], sent_at: float, on_first: Callable[[], None]) -> ChatRun:
    """Time a chat stream as it arrives; `on_first` runs at its first content chunk."""
    first_at = last_content_at = ended_at = math.nan
    content_chunks = 0
    usage_tokens: int | None = None
    server_speed: float | None = None
    for chunk in chunks:
        ended_at = time.perf_counter()
        if chunk == "[DONE]":
            continue
        if not isinstance(chunk, dict) or "error" in chunk:
            raise ValueError(f"the chat stream failed: {str(chunk)[:300]}")
        usage, timings = chunk.get("usage"), chunk.get("timings")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            usage_tokens = usage["completion_tokens"]
        if isinstance(timings, dict) and "predicted_per_second" in timings:
            server_speed = float(timings["predicted_per_second"])
        if any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices", [])):
            content_chunks += 1
            last_content_at = ended_at
            if content_chunks == 1:
                first_at = ended_at
                on_first()
    if not content_chunks:
        raise ValueError("the chat answer had no content")
    return ChatRun(
        first_token_s=first_at - sent_at,
        tokens=content_chunks if usage_tokens is None else usage_tokens,
        decode_s=last_content_at - first_at,
        ended_at=ended_at,
        server_tokens_per_s=server_speed,
    )


def run_chat(
    server: Contender, body: dict[str, Any], on_first: Callable[[], None] = lambda: None
) -> ChatRun:
    return read_chat(server.stream(CHAT_PATH, body), time.perf_counter(), on_first)


def run_fims(
    server: Contender, bodies: Sequence[dict[str, Any]]
) -> tuple[list[Reply], list[float]]:
    """The completions one after another: each reply, and when it came back."""
    replies, arrivals = [], []
    for body in bodies:
        replies.append(read_reply(*server.post("/infill", body)))
        arrivals.append(time.perf_counter())
    return replies, arrivals


def run_both(
    server: Contender,
    bodies: Sequence[dict[str, Any]],
    chat: dict[str, Any],
    delay_s: float,
    *,
    during_prompt: bool = False,
) -> tuple[list[Reply], list[bool], ChatRun]:
    """The chat on a thread and, from its first content chunk (`during_prompt`: from sending
    it) plus `delay_s`, the completions: their replies, whether each came back while the chat
    streamed, and the chat."""
    first = threading.Event()
    if during_prompt:
        first.set()

    def chat_request() -> ChatRun:
        try:
            return run_chat(server, chat, first.set)
        finally:
            first.set()

    chat_run = InBackground(f"chat {server.name}", chat_request)
    replies: list[Reply] = []
    arrivals: list[float] = []
    try:
        if not first.wait(REQUEST_TIMEOUT_S):
            raise TimeoutError(f"no chat content within {REQUEST_TIMEOUT_S:.0f} s")
        if not chat_run.failed:
            time.sleep(delay_s)
            replies, arrivals = run_fims(server, bodies)
    finally:
        chat_run.join(REQUEST_TIMEOUT_S)
    answer = chat_run.result("the chat", REQUEST_TIMEOUT_S)
    return replies, [arrived < answer.ended_at for arrived in arrivals], answer


def run_round(
    server: Contender,
    bodies: Sequence[dict[str, Any]],
    chat: Callable[[int], dict[str, Any]],
    *,
    options: ConcurrencyOptions,
    repeat: int,
    done: Done,
) -> Round:
    label = f"repeat {repeat + 1}"
    fim_alone, _ = run_fims(server, bodies)
    done(f"{label} editor", server.name, _prompt_speed(fim_alone))
    chat_alone = run_chat(server, chat(2 * repeat + 1))
    done(f"{label} chat", server.name, chat_alone.tokens_per_s)
    fim_during, streaming, chat_during = run_both(
        server, bodies, chat(2 * repeat + 2), options.delay_s, during_prompt=bool(options.context)
    )
    done(f"{label} both", server.name, chat_during.tokens_per_s)
    return Round(server.name, repeat, fim_alone, chat_alone, fim_during, chat_during, streaming)


def _prompt_speed(replies: Sequence[Reply]) -> float:
    """Prompt tokens processed per second of round trip (the editor phases' progress figure)."""
    seconds = sum(reply.seconds for reply in replies)
    return sum(reply.prompt_n for reply in replies) / seconds if seconds > 0 else 0.0


def run_concurrency(
    servers: Sequence[Contender],
    requests: Sequence[EditorRequest],
    options: ConcurrencyOptions,
    done: Done = lambda _what, _name, _speed: None,
) -> ConcurrencyResult:
    """The warm-up, then every repeat; a contender that fails is dropped, saying why."""
    bodies = [prepared(request.body, t_max_prompt=False) for request in requests]

    # the sends of another run (a server's disk prompt store keeps them) are not this run's
    run_id = secrets.token_hex(4)

    def chat(send: int) -> dict[str, Any]:
        """The chat's `send`-th request; with a context, one no server has seen."""
        context = fresh_context(options.context, f"{run_id}-{send}") if options.context else ""
        return chat_body(options.chat_tokens, context)

    result = ConcurrencyResult()
    active = list(servers)

    def drop(server: Contender, what: str, exc: Exception) -> None:
        why = f"{what} failed: {failure_text(exc)}; log: {server.log_tail()}"
        result.skipped.append(Skipped(server.name, why))
        active.remove(server)

    for server in list(active):
        try:
            run_fims(server, bodies)
            done("warm-up", server.name, run_chat(server, chat(0)).tokens_per_s)
        except FAILURES as exc:
            drop(server, "the warm-up", exc)
    for repeat in range(options.repeats):
        for server in list(active if repeat % 2 == 0 else active[::-1]):
            try:
                round_ = run_round(server, bodies, chat, options=options, repeat=repeat, done=done)
                result.rounds.append(round_)
            except FAILURES as exc:
                drop(server, f"repeat {repeat + 1}", exc)
    return result
