"""One chat turn on a backend, run on a worker thread, and the live figures the UI shows.

`run_turn` is the only code that drives a generation for the app, on either backend (the
models here, or a server: `tui.host`). It measures the conversation as the model's chat
template renders it, refuses a turn that leaves no room for an answer in the context window
(localspec never truncates a conversation), then forwards each engine event to `emit`; an
answer that fills the window ends with the finish reason "context", which the app shows as
such (never as a normal end). Cancelling sets an event that the backend checks before each
target step (`should_stop`; a server's stream is closed at its next chunk, which cancels it
there): the generation ends after the step that was running, so Escape takes effect within
one step. A generic OpenAI-compatible server measures nothing before the answer: its usage
afterwards fills the context meter, and its speculation figures stay dashes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from localspec import (
    UNREPORTED,
    ChatRequest,
    Finished,
    GenerationStats,
    Message,
    SamplingSettings,
    SpecSettings,
    TextChunk,
)
from localspec.constraints import Constraint
from tui.failures import error_line
from tui.host import Backend
from tui.settings import ChatSettings

WARN_FRACTION = 0.8


@dataclass(frozen=True)
class Started:
    """The prompt fits: `prompt_tokens` of the window are in use before the answer. A
    backend that cannot measure before the answer gives 0 of 0, and the `window` it knows
    (the meter shows it once the answer's usage is known)."""

    prompt_tokens: int
    n_ctx: int
    window: int = 0


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
    constraint: Constraint | None = None  # `/edit`: the grammar of the conversation's files


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
    backend: Backend,
    lock: threading.Lock,
    turn: Turn,
    cancel: threading.Event,
    emit: Callable[[TurnEvent], object],
) -> None:
    """Generate one answer, emitting events; an error becomes a `Failed` event, never raised
    (a worker that raised would take the app down with it)."""
    with lock:
        try:
            prompt = backend.prompt(turn.messages)
            n_ctx = backend.n_ctx
            measured = prompt.size is not None and n_ctx > 0
            refusal = overflow_message(prompt.size or 0, n_ctx) if measured else None
            if refusal is not None:
                emit(Refused(refusal))
                return
            if prompt.size is None:
                emit(Started(0, 0, window=n_ctx))
            else:
                emit(Started(prompt.size, n_ctx))
            request = ChatRequest(
                messages=turn.messages,
                max_tokens=turn.settings.max_tokens,
                sampling=turn.settings.sampling(turn.sampling),
                spec=turn.settings.spec(turn.spec),
                stop=turn.stop,
                ignore_eos=turn.ignore_eos,
            )
            # the backend checks `cancel` before each target step and ends the generation
            # normally, so what the tuner learned from the partial answer is kept
            events = backend.generate(prompt, request, cancel.is_set, turn.constraint)
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
    window: int = 0  # the window of a backend that measures the prompt only afterwards
    reported: bool = False  # whether a chunk said what its step drafted and accepted
    final: GenerationStats | None = None

    def on_started(self, event: Started) -> None:
        self.prompt_tokens, self.n_ctx = event.prompt_tokens, event.n_ctx
        self.window = event.window

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
        if chunk.source == UNREPORTED:
            return  # a server that does not say: the proposer stays unknown
        self.reported = True
        self.proposer = f"{chunk.source}:{chunk.drafted}" if chunk.drafted else "target"

    def on_finished(self, stats: GenerationStats) -> None:
        self.final = stats
        if self.window and not self.n_ctx:  # the prompt's size is known now
            self.prompt_tokens, self.n_ctx = stats.prompt_tokens, self.window

    @property
    def speculation_reported(self) -> bool:
        """Whether acceptance, mean length and the proposer are known (a generic server's
        are not: the status bar shows dashes)."""
        if self.final is not None:
            return self.final.mode != UNREPORTED
        return self.reported

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
    def interruptions(self) -> int:
        """How often a server paused this answer for an editor's request (it shares the
        model with other clients: `localspec.server.slots`); known when the answer finishes."""
        return 0 if self.final is None else self.final.interruptions

    @property
    def guard(self) -> str:
        """The guard rule that ran this answer plain although it asked for speculation
        ("latency", "cost": `localspec.observe.guard`); "" when none did."""
        return "" if self.final is None else self.final.guard

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
        generated = self.tokens if self.final is None else self.final.generated_tokens
        return self.prompt_tokens + generated
