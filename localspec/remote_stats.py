"""Reading a server's OpenAI stream into the engine's events and statistics (`remote`).

A localspec server's chunks carry their engine step and its last chunk the statistics, so
they come back as they were. Other servers' figures are put together from what they send:
llama.cpp's `timings` (with `draft_n`, `draft_n_accepted`), `usage`, and the client's clock
for the time to the first token and the whole answer.
"""

from __future__ import annotations

import time
from dataclasses import fields
from typing import Any

from localspec.speculative.events import Finished, FinishReason, TextChunk
from localspec.speculative.stats import GenerationStats, ProposerStats

UNREPORTED = "unreported"
"""The source of a chunk, and the mode of statistics, that the server did not report."""
UNKNOWN_TOKEN = -1
_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "context": "context",
    "cancelled": "cancelled",
    "prompt_time": "prompt_time",
}
_STATS_FIELDS = {f.name for f in fields(GenerationStats)}


class Tally:
    """One stream's text, tokens and figures so far; `read` each chunk, then `finished`."""

    def __init__(self, mode: str, kind: str) -> None:
        self.mode = mode  # what the statistics' mode says when the server reported figures
        # what this kind of server sends: `localspec` objects (localspec's), llama.cpp's
        # `timings` (its and localspec's); a generic server's are not taken on trust
        self.ours = kind == "localspec"
        self.llama_timings = kind != "openai"
        self.started = time.perf_counter()
        self.first: float | None = None
        self.text: list[str] = []
        self.tokens: list[int] = []
        self.steps = 0
        self.stepwise = False  # whether the chunks carried their engine steps
        self.drafted = 0
        self.accepted = 0
        self.finish: str | None = None
        self.record: dict[str, Any] | None = None  # localspec's statistics
        self.timings: dict[str, Any] = {}
        self.usage: dict[str, Any] = {}

    def read(self, event: dict[str, Any]) -> TextChunk | None:
        """The chunk's text as an event (None for one without text); notes its figures."""
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if self.llama_timings and isinstance(event.get("timings"), dict):
            self.timings = event["timings"]
        if "choices" not in event and "content" in event:
            return self._native(event)
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else {}
        if not isinstance(choice, dict):
            raise ValueError("a chunk's choice is not a JSON object")
        ours = event.get("localspec") if self.ours else None
        if choice.get("finish_reason") is not None:
            self.finish = str(choice["finish_reason"])
            if isinstance(ours, dict):
                self.record = ours
        delta = choice.get("delta")
        text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
        if not isinstance(text, str) or (not text and not _is_step(ours)):
            return None
        return self._chunk(text, ours if _is_step(ours) else None)

    def _native(self, event: dict[str, Any]) -> TextChunk | None:
        """llama.cpp's own `/completion` and `/infill` events: text and token ids, then
        `stop` with `stop_type` "limit" for a length (localspec's `stop` says which)."""
        if event.get("stop"):
            self.finish = "length" if event.get("stop_type") == "limit" else "stop"
            ours = event.get("localspec") if self.ours else None
            self.record = ours if isinstance(ours, dict) else None
            return None
        text = event.get("content")
        if not isinstance(text, str) or not text:
            return None
        tokens = event.get("tokens")
        known = isinstance(tokens, list) and all(isinstance(t, int) for t in tokens)
        return self._chunk(text, None, tokens if known else None)

    def _chunk(
        self, text: str, step: dict[str, Any] | None, tokens: list[int] | None = None
    ) -> TextChunk:
        if self.first is None:
            self.first = time.perf_counter()
        self.text.append(text)
        if step is None:  # without its ids, one token per chunk, as servers stream them
            chunk = TextChunk(text, tokens or [UNKNOWN_TOKEN], UNREPORTED, 0)
        else:
            self.stepwise = True
            chunk = TextChunk(
                text,
                [int(t) for t in step["tokens"]],
                str(step.get("source", "target")),
                int(step.get("from_draft", 0)),
                int(step.get("drafted", 0)),
            )
        self.tokens += chunk.tokens
        if chunk.tokens:
            self.steps += 1
            self.drafted += chunk.drafted
            self.accepted += chunk.from_draft
        return chunk

    def finished(self) -> Finished:
        """The end, after the stream's last chunk."""
        if self.record is not None:
            stats = localspec_stats(self.record)
            reason = self.record.get("stop") or self.finish
        else:
            stats = self._stats()
            reason = self.finish
        return Finished(
            "".join(self.text), self.tokens, _FINISH_REASONS.get(str(reason), "stop"), stats
        )

    def cancelled(self) -> Finished:
        """The end of an answer the caller stopped (the server's statistics never came)."""
        stats = self._stats("cancelled")
        return Finished("".join(self.text), self.tokens, "cancelled", stats)

    def _stats(self, finish_reason: str = "") -> GenerationStats:
        """Figures from `usage`, llama.cpp's `timings` and the client's clock; the finish
        reason is the server's unless one is given."""
        now = time.perf_counter()
        ttft = (self.first or now) - self.started
        timings = self.timings
        reported = self.stepwise or "draft_n" in timings
        generated = _count(timings.get("predicted_n"), self.usage.get("completion_tokens"))
        generated = generated or len(self.tokens)
        accepted = _count(timings.get("draft_n_accepted")) or self.accepted
        target_steps = 0
        if self.stepwise:
            target_steps = self.steps
        elif reported:  # each llama.cpp step yields its accepted tokens and one of its own
            target_steps = max(generated - accepted, 0)
        return GenerationStats(
            mode=self.mode if reported else UNREPORTED,
            prompt_tokens=_count(self.usage.get("prompt_tokens"))
            or _count(timings.get("prompt_n")) + _count(timings.get("cache_n")),
            cached_tokens=_count(timings.get("cache_n"), _cached(self.usage)),
            restored_tokens=_count(timings.get("cache_restored")),
            generated_tokens=generated,
            finish_reason=finish_reason or self.finish or "",
            ttft_s=ttft,
            total_s=now - self.started,
            prefill_s=ttft,
            drafted=_count(timings.get("draft_n")) or self.drafted,
            accepted=accepted,
            target_steps=target_steps,
        )


def _is_step(ours: Any) -> bool:
    return isinstance(ours, dict) and isinstance(ours.get("tokens"), list)


def _count(*values: Any) -> int:
    """The first of `values` that is a count (servers leave fields out, or send null)."""
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return 0


def _cached(usage: dict[str, Any]) -> Any:
    details = usage.get("prompt_tokens_details")
    return details.get("cached_tokens") if isinstance(details, dict) else None


def localspec_stats(record: dict[str, Any]) -> GenerationStats:
    """A localspec server's statistics (`GenerationStats.to_dict()` plus extras) as they were."""
    known = {k: v for k, v in record.items() if k in _STATS_FIELDS}
    by_proposer = known.get("by_proposer")
    if isinstance(by_proposer, dict):
        known["by_proposer"] = {
            name: ProposerStats(**counts)
            for name, counts in by_proposer.items()
            if isinstance(counts, dict)
        }
    try:
        return GenerationStats(**known)
    except TypeError as exc:  # a field missing, or of another shape
        raise ValueError(f"the server's statistics are not localspec's: {exc}") from exc
