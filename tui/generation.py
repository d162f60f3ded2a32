"""One chat turn on the engine, run on a worker thread, and the live figures the UI shows.

`run_turn` is the only code that drives `Runtime.generate` for the app. It renders the
conversation with the model's chat template, refuses a turn that leaves no room for an answer
in the context window (localspec never truncates a conversation), then forwards each engine
event to `emit`; an answer that fills the window ends with the finish reason "context", which
the app shows as such (never as a normal end). Cancelling sets
an event that the engine checks before each target step (`should_stop`): the generation ends
after the step that was running, so Escape takes effect within one step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from localspec import (
    Finished,
    GenerationRequest,
    GenerationStats,
    Message,
    Runtime,
    SamplingSettings,
    SpecSettings,
    TextChunk,
)
from tui.failures import error_line
from tui.settings import ChatSettings

WARN_FRACTION = 0.8


@dataclass(frozen=True)
class Started:
    """The prompt fits: `prompt_tokens` of the window are in use before the answer."""

    prompt_tokens: int
    n_ctx: int


@dataclass(frozen=True)
class Refused:
    """The turn was not started; `message` tells the user what to change."""

    message: str


@dataclass(frozen=True)
class Cancelled:
    """The user stopped the answer; what was streamed so far stays."""


@dataclass(frozen=True)
class Failed:
    """The turn raised: a `LocalspecError`'s message, or one line about a bug (its trace is
    in the log); what was streamed so far stays."""

    message: str


TurnEvent = Started | Refused | TextChunk | Finished | Cancelled | Failed


@dataclass(frozen=True)
class Turn:
    """What one generation needs besides the runtime."""

    messages: Sequence[Message]
    settings: ChatSettings
    sampling: SamplingSettings
    spec: SpecSettings
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False


def overflow_message(prompt_tokens: int, n_ctx: int) -> str | None:
    """Why a turn cannot start, or None when the window has room for an answer.

    A turn whose answer may pass the window (prompt plus max tokens) still starts: answers are
    often shorter than max tokens, and one that reaches the end is reported as cut short.
    """
    if prompt_tokens < n_ctx:
        return None
    return (
        f"this conversation is {prompt_tokens} tokens but the context window holds {n_ctx}, "
        f"with no room left for an answer: start a new conversation (ctrl+n), or restart with "
        f"a larger --ctx-size"
    )


def run_turn(
    runtime: Runtime,
    lock: threading.Lock,
    turn: Turn,
    cancel: threading.Event,
    emit: Callable[[TurnEvent], object],
) -> None:
    """Generate one answer, emitting events; an error becomes a `Failed` event, never raised
    (a worker that raised would take the app down with it)."""
    with lock:
        try:
            prompt = runtime.chat_prompt(turn.messages)
            refusal = overflow_message(len(prompt), runtime.n_ctx)
            if refusal is not None:
                emit(Refused(refusal))
                return
            emit(Started(len(prompt), runtime.n_ctx))
            request = GenerationRequest(
                prompt=prompt,
                max_tokens=turn.settings.max_tokens,
                sampling=turn.settings.sampling(turn.sampling),
                spec=turn.settings.spec(turn.spec),
                stop=turn.stop,
                ignore_eos=turn.ignore_eos,
                route="chat",
            )
            # the engine checks `cancel` before each target step and ends the generation
            # normally, so what the tuner learned from the partial answer is kept
            events = runtime.generate(request, cancel.is_set)
            try:
                for event in events:
                    if isinstance(event, Finished) and event.finish_reason == "cancelled":
                        emit(Cancelled())
                        return
                    emit(event)
            finally:
                events.close()
        except Exception as exc:  # a LocalspecError says what to do; anything else is a bug
            emit(Failed(error_line(exc, "generating the answer")))


@dataclass
class LiveStats:
    """The status bar's figures, kept up to date chunk by chunk and replaced by the engine's
    exact statistics when the answer finishes."""

    started: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None
    tokens: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    proposer: str = "-"
    prompt_tokens: int = 0
    n_ctx: int = 0
    final: GenerationStats | None = None

    def on_started(self, event: Started) -> None:
        self.prompt_tokens, self.n_ctx = event.prompt_tokens, event.n_ctx

    def on_chunk(self, chunk: TextChunk, now: float | None = None) -> None:
        now = time.perf_counter() if now is None else now
        if not chunk.tokens:
            return  # the flushed text tail of a finished stream is not a target step
        if self.first_token is None:
            self.first_token = now
        self.last_token = now
        self.tokens += len(chunk.tokens)
        self.steps += 1
        self.drafted += chunk.drafted
        self.accepted += chunk.from_draft
        self.proposer = f"{chunk.source}:{chunk.drafted}" if chunk.drafted else "target"

    def on_finished(self, stats: GenerationStats) -> None:
        self.final = stats

    @property
    def tokens_per_second(self) -> float:
        if self.final is not None:
            return self.final.tokens_per_second
        if self.first_token is None or self.last_token is None or self.tokens < 2:
            return 0.0
        span = self.last_token - self.first_token
        # the first token's time is TTFT, so the rate counts the tokens after it
        return (self.tokens - 1) / span if span > 0 else 0.0

    @property
    def ttft_s(self) -> float:
        if self.final is not None:
            return self.final.ttft_s
        return 0.0 if self.first_token is None else self.first_token - self.started

    @property
    def acceptance_rate(self) -> float:
        if self.final is not None:
            return self.final.acceptance_rate
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        if self.final is not None:
            return self.final.mean_acceptance_length
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def context_used(self) -> int:
        return self.prompt_tokens + self.tokens
