"""The statistics record every generation ends with, and how steps accumulate into it.

Field names follow the speculative-decoding literature and llama.cpp's server where one
exists (`drafted` ~ `draft_n`, `accepted` ~ `draft_n_accepted`), so surfaces can map them
onto their wire formats without interpretation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
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


@dataclass
class GenerationStats(AcceptanceFigures):
    """What happened during one generation, for users, benchmarks and (later) the tuner."""

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
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    by_proposer: dict[str, ProposerStats] = field(default_factory=dict)
    # auto mode: how often the tuner chose each option ("none", "ngram:3", "draft:4") and the
    # speed it predicted for its choices, to compare with the measured tokens_per_second
    tuner_choices: dict[str, int] = field(default_factory=dict)
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
    step_profile: dict[str, dict[str, float]] = field(default_factory=dict)
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
    decodes: dict[str, list[float]] = field(default_factory=dict)

    def record_step(self, source: str, drafted: int, accepted: int) -> None:
        """Account one target verification of `drafted` proposed tokens."""
        self.target_steps += 1
        self.drafted += drafted
        self.accepted += accepted
        missing = drafted - len(self.drafted_per_position)
        if missing > 0:
            self.drafted_per_position.extend([0] * missing)
            self.accepted_per_position.extend([0] * missing)
        for position in range(drafted):
            self.drafted_per_position[position] += 1
            self.accepted_per_position[position] += position < accepted
        proposer = self.by_proposer.setdefault(source, ProposerStats())
        proposer.steps += 1
        proposer.drafted += drafted
        proposer.accepted += accepted

    def record_timing(
        self, drafted: int, decoded: Sequence[int], decode_s: float, step_s: float, plain_s: float
    ) -> None:
        """Account one step's times: `decoded` are the sizes of its verification decodes,
        which took `decode_s`; `plain_s` is the step without what only speculation does."""
        self.steps_s += step_s
        if not decoded:
            return
        timed = self.decodes.setdefault("+".join(map(str, decoded)), [0.0, 0.0])
        timed[0] += 1
        timed[1] += decode_s
        if drafted == 0:
            self.plain_steps += 1
            self.plain_steps_s += plain_s

    def record_choice(self, label: str, predicted_tokens_per_s: float) -> None:
        """Account one tuner decision (auto mode); keeps a running mean of its prediction."""
        self.tuner_choices[label] = self.tuner_choices.get(label, 0) + 1
        n = sum(self.tuner_choices.values())
        self.tuner_predicted_tokens_per_s += (
            predicted_tokens_per_s - self.tuner_predicted_tokens_per_s
        ) / n

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
        """A JSON-ready dictionary including the derived rates."""
        record = asdict(self)
        record.update(
            generation_s=self.generation_s,
            tokens_per_second=self.tokens_per_second,
            mask_s_per_token=self.mask_s_per_token,
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
        )
        return record
