"""The statistics record every generation ends with.

Field names follow the speculative-decoding literature and llama.cpp's server where one
exists (`drafted` ~ `draft_n`, `accepted` ~ `draft_n_accepted`), so surfaces can map them
onto their wire formats without interpretation.

The record is frozen: a consumer (an observer, the history, a server's reply) may keep it,
and what it kept never changes afterwards. The engine counts into a mutable tally while it
generates (`localspec.speculative.tally`) and builds the record once, when it finishes; what
is known only later (a server's slot, the guard) goes into a new record (`replace`) before
anyone sees the event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ProposerStats:
    """How one proposer fared: target steps it drafted for, tokens drafted and accepted."""

    steps: int = 0
    drafted: int = 0
    accepted: int = 0


class AcceptanceFigures:
    """The two derived rates of any record that counts drafted and accepted tokens and target
    steps (a generation's statistics, a benchmark sample)."""

    drafted: int
    accepted: int
    target_steps: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens produced per target step: 1 + accepted / steps (1.0 = plain decoding)."""
        return 1.0 + self.accepted / self.target_steps if self.target_steps else 0.0


@dataclass(frozen=True)
class GenerationStats(AcceptanceFigures):
    """What happened during one generation, for users, benchmarks and (later) the tuner.

    Its sequences and mappings are read-only copies (tuples, `MappingProxyType`s), whatever
    the caller passed: a record built from a tally, or read from a server's JSON, shares
    nothing that its builder could go on changing."""

    mode: str
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens not processed: the common prefix and shifted chunks
    shifted_tokens: int = 0  # those of them reused by shifting a cached chunk into place
    restored_tokens: int = 0  # those of them from a state the prompt cache restored
    # the prompt-processing budget ran out (`GenerationRequest.max_prompt_s`): nothing was
    # generated and `prompt_unprocessed` prompt tokens are still to process
    prompt_cut: bool = False
    prompt_unprocessed: int = 0
    generated_tokens: int = 0
    finish_reason: str = ""
    stop_word: str = ""  # the stop string that ended it, if one did (finish_reason "stop")
    ttft_s: float = 0.0
    total_s: float = 0.0
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    sample_s: float = 0.0
    target_steps: int = 0
    drafted: int = 0
    accepted: int = 0
    drafted_per_position: Sequence[int] = ()
    accepted_per_position: Sequence[int] = ()
    by_proposer: Mapping[str, ProposerStats] = field(default_factory=dict)
    # auto mode: how often the tuner chose each option ("none", "ngram:3", "draft:4") and the
    # speed it predicted for its choices, to compare with the measured tokens_per_second
    tuner_choices: Mapping[str, int] = field(default_factory=dict)
    tuner_predicted_tokens_per_s: float = 0.0
    # constrained generation: the constraint's kind, the seconds its guide spent (masks,
    # consuming, validating drafts, rolling back), the masks it computed, and the draft
    # tokens proposers dropped because the constraint forbade them
    constraint: str = ""
    mask_s: float = 0.0
    masks: int = 0
    draft_cut: int = 0
    # the request's drafting budget (max_draft_tokens, max_draft_ms) ran out before the end
    draft_budget_spent: bool = False
    # seconds per phase of the steps, by kind of step (`localspec.speculative.steptime`)
    step_profile: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # a server's slot that ran it (`localspec.server.slots`), and how often an editor's request
    # interrupted it there (it waited meanwhile: in its times, not in its tokens)
    slot: int = 0
    interruptions: int = 0
    # the guard rule ("latency", "cost") that made this request run plain although it asked
    # for speculation (`localspec.observe.guard`); "" when none did
    guard: str = ""
    # on the engine's clock, what plain decoding's estimate beside this request is made of
    # (`localspec.observe.plain`): the seconds inside its steps; its steps that drafted
    # nothing and decoded (the first step's pending row came with the prompt), and their
    # seconds less the policy's pricing, drafting and learning; and its verification decodes
    # by their sizes ("1", "5", "4+1" for a step decoded in chunks) as [steps, seconds]
    steps_s: float = 0.0
    plain_steps: int = 0
    plain_steps_s: float = 0.0
    decodes: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the one way to set a frozen dataclass's field: only while it is being built
        for name in ("drafted_per_position", "accepted_per_position"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        for name in ("by_proposer", "tuner_choices", "step_profile", "decodes"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def generation_s(self) -> float:
        """Time spent producing tokens, i.e. after the prompt was processed."""
        return max(self.total_s - self.prefill_s, 0.0)

    @property
    def mask_s_per_token(self) -> float:
        """The constraint's cost per generated token (0 without a constraint)."""
        return self.mask_s / self.generated_tokens if self.generated_tokens else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.generation_s if self.generation_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary including the derived rates: lists and dicts, as
        `dataclasses.asdict` would give for the mutable record this once was."""
        record = {f.name: _thawed(getattr(self, f.name)) for f in fields(self)}
        record.update(
            generation_s=self.generation_s,
            tokens_per_second=self.tokens_per_second,
            mask_s_per_token=self.mask_s_per_token,
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
        )
        return record


def _frozen(value: Any) -> Any:
    """A read-only copy of `value`: mappings as `MappingProxyType`s, lists as tuples, all the
    way down (`ProposerStats` are frozen themselves)."""
    if isinstance(value, Mapping):
        return MappingProxyType({key: _frozen(item) for key, item in value.items()})
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    return value


def _thawed(value: Any) -> Any:
    """`_frozen`'s inverse, for JSON: dicts, lists and dataclasses as dicts."""
    if isinstance(value, Mapping):
        return {key: _thawed(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thawed(item) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value
