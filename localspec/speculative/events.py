"""The events a generation yields: text chunks, one per target step, then `Finished`.

Kept apart from the engine (numpy, llama.cpp) so that a client reading them from a server
(`localspec.remote`) imports only this.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from localspec.speculative.stats import GenerationStats


@dataclass(frozen=True)
class TextChunk:
    """Tokens accepted in one target step and the text they completed.

    `from_draft` counts how many of `tokens` (a prefix) came from an accepted draft of
    `source`, out of `drafted` proposed; the last token always comes from the target itself.
    Surfaces show `source` and `drafted` live as the proposer and draft length in use.
    `generated_s` is when the step ended, in seconds since the prompt was processed: the
    clock of llama.cpp's `t_max_predict_ms` (its t_gen), which a surface's time rule reads
    here rather than from when the chunk reaches it.
    """

    text: str
    tokens: list[int]
    source: str
    from_draft: int
    drafted: int = 0
    generated_s: float = 0.0


FinishReason = Literal["stop", "length", "context", "cancelled", "prompt_time"]
"""`stop`: end of generation or a stop string; `length`: max_tokens; `context`: the context is
full (surfaces speaking OpenAI's wire call it "length" and say which); `cancelled`: the
caller's `should_stop` said so (a surface's own stop rule, a disconnect); `prompt_time`: the
request's prompt-processing budget ran out first, nothing was generated and the cache holds
what was processed (a limit, like "length", for surfaces that have no word for it)."""


@dataclass(frozen=True)
class Finished:
    """The last event of a generation."""

    text: str
    tokens: list[int]
    finish_reason: FinishReason
    stats: GenerationStats


Event = TextChunk | Finished


@dataclass(frozen=True)
class Paused:
    """A generation's prompt processing stopped between two batches because more urgent
    work waits (`Engine.generate_pausable`'s `pause`); asking for the next event goes on
    from there. Only a caller that passes `pause` sees it, and it never reaches a client."""

    processed: int  # prompt tokens the cache holds so far
    total: int


def without_pauses(events: Iterable[Event | Paused]) -> Iterator[Event]:
    """The events of a run that was given no `pause` (which therefore never pauses)."""
    for event in events:
        if not isinstance(event, Paused):
            yield event
