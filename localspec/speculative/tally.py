"""What a generation counts while it runs, until the engine builds its `GenerationStats`.

The record a consumer receives is frozen (`localspec.speculative.stats`); this is its mutable
counterpart, written only by the engine's own parts (the prompt's processing, the steps,
their verification) between a request's start and its `Finished`. Its fields are those of
the record by the same names; what only the end knows (why it ended, its total time, the
constraint's figures) is given to `freeze`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

from localspec.speculative.stats import GenerationStats, ProposerStats


@dataclass
class StatsTally:
    """A running generation's counts; see `GenerationStats` for what each field means."""

    mode: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    shifted_tokens: int = 0
    restored_tokens: int = 0
    prompt_cut: bool = False
    prompt_unprocessed: int = 0
    generated_tokens: int = 0
    ttft_s: float = 0.0
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
    tuner_choices: dict[str, int] = field(default_factory=dict)
    tuner_predicted_tokens_per_s: float = 0.0
    draft_cut: int = 0
    draft_budget_spent: bool = False
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
        before = self.by_proposer.get(source, ProposerStats())
        self.by_proposer[source] = ProposerStats(
            before.steps + 1, before.drafted + drafted, before.accepted + accepted
        )

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

    def freeze(
        self,
        finish_reason: str,
        total_s: float,
        *,
        stop_word: str = "",
        step_profile: Mapping[str, Mapping[str, float]] | None = None,
        constraint: str = "",
        mask_s: float = 0.0,
        masks: int = 0,
    ) -> GenerationStats:
        """The generation's record, built once at its end from these counts and what only
        the end knows; the record copies what it holds, so nothing done to the tally
        afterwards reaches it."""
        counts = {f.name: getattr(self, f.name) for f in fields(self)}
        return GenerationStats(
            **counts,
            finish_reason=finish_reason,
            total_s=total_s,
            stop_word=stop_word,
            step_profile=step_profile or {},
            constraint=constraint,
            mask_s=mask_s,
            masks=masks,
        )
