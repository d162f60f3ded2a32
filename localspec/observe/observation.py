"""One finished generation as the watchers see it: labels, latencies and what was drafted.

Built once by the runtime from the generation's statistics and the times its text chunks
came out (`Observation.of`), so the metrics, the guard, the drift watch and the history read
the same numbers under the same labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from localspec.observe.plain import PlainEstimate, same_clock
from localspec.speculative.stats import GenerationStats, ProposerStats


@dataclass(frozen=True)
class Observation:
    """What one generation showed.

    `gaps` are the seconds between visible chunks as they left the engine, one per chunk
    after the first (a speculative step's accepted tokens arrive together: one gap), and
    `itl_s` is the generation's mean time per generated token after the first. `plain_itl_s`
    is what plain decoding would have taken per token here, 0 when unknown, and
    `plain_basis` how that was estimated (`localspec.observe.plain`: "own", "recent",
    "scaled" are measured on this generation's clock, "calibration" is not). `guard` names
    the guard rule that made this request run plain ("latency", "cost"; "" when none did).
    """

    route: str
    pair: str
    mode: str  # the mode the request asked for ("auto", "ngram", "off", ...)
    constraint: str  # "none", "json", "grammar", "tool"
    generated_tokens: int
    drafted: int
    accepted: int
    target_steps: int
    ttft_s: float
    prefill_s: float
    generation_s: float
    draft_s: float
    queue_s: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0  # of them, reused rather than processed
    gaps: tuple[float, ...] = ()
    by_proposer: dict[str, ProposerStats] = field(default_factory=dict)
    drafted_per_position: tuple[int, ...] = ()
    accepted_per_position: tuple[int, ...] = ()
    tuner_choices: dict[str, int] = field(default_factory=dict)
    plain_itl_s: float = 0.0
    plain_basis: str = ""
    guard: str = ""
    # how often a server paused it for an editor's request: its times include theirs, so
    # it says nothing of what speculation costs (the guard and the speed-up leave it out)
    interruptions: int = 0

    @property
    def speculated(self) -> bool:
        """Whether any step drafted: a request whose every step was plain is a plain sample."""
        return self.drafted > 0

    @property
    def itl_s(self) -> float:
        """Mean seconds per generated token after the first (0 with fewer than two)."""
        if self.generated_tokens < 2:
            return 0.0
        return max(self.generation_s, 0.0) / (self.generated_tokens - 1)

    @property
    def same_clock(self) -> bool:
        """Whether plain decoding's estimate was measured on this generation's clock."""
        return self.plain_itl_s > 0 and same_clock(self.plain_basis)

    @property
    def speedup(self) -> float:
        """Plain decoding's estimated time over the measured one (0 when unknown)."""
        if self.plain_itl_s <= 0 or self.itl_s <= 0:
            return 0.0
        return self.plain_itl_s / self.itl_s

    @classmethod
    def of(
        cls,
        stats: GenerationStats,
        *,
        route: str,
        pair: str,
        mode: str,
        chunk_times: Sequence[float] = (),
        queue_s: float = 0.0,
        plain: PlainEstimate | None = None,
        guard: str = "",
    ) -> Observation:
        """The observation of a generation that ended with `stats`; `chunk_times` are its
        visible chunks' `generated_s`, in order."""
        gaps = tuple(b - a for a, b in pairwise(chunk_times))
        plain = plain or PlainEstimate()
        return cls(
            route=route,
            pair=pair,
            mode=mode,
            constraint=stats.constraint or "none",
            generated_tokens=stats.generated_tokens,
            drafted=stats.drafted,
            accepted=stats.accepted,
            target_steps=stats.target_steps,
            ttft_s=stats.ttft_s,
            prefill_s=stats.prefill_s,
            generation_s=stats.generation_s,
            draft_s=stats.draft_s,
            queue_s=queue_s,
            prompt_tokens=stats.prompt_tokens,
            cached_tokens=stats.cached_tokens,
            gaps=tuple(max(gap, 0.0) for gap in gaps),
            by_proposer=dict(stats.by_proposer),
            drafted_per_position=tuple(stats.drafted_per_position),
            accepted_per_position=tuple(stats.accepted_per_position),
            tuner_choices=dict(stats.tuner_choices),
            plain_itl_s=plain.itl_s,
            plain_basis=plain.basis,
            guard=guard,
            interruptions=stats.interruptions,
        )
