"""Proposers that know the target's greedy answer (every draft accepted, or every one
rejected), and a virtual clock that the target's decodes advance."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from localspec import GenerationRequest, Runtime, SpecMode, SpecSettings
from localspec.speculative.engine import Finished
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.sampling import Sampler


class Scripted:
    """Drafts the next tokens of `answer` (`right`) or, at every position, a token the answer
    does not have there: each drafted token is accepted, or each is rejected."""

    name = "ngram"

    def __init__(self, answer: list[int], n_vocab: int, *, right: bool) -> None:
        self.answer, self.n_vocab, self.right, self.n_prompt = answer, n_vocab, right, 0

    def reset(self, prompt: Sequence[int]) -> None:
        self.n_prompt = len(prompt)

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        at = len(tokens) - self.n_prompt
        wanted = self.answer[at : at + min(limits.max_len, 4)]
        shift = 0 if self.right else 1
        return Draft([(token + shift) % self.n_vocab for token in wanted], "ngram")

    def finish(self, tokens: Sequence[int]) -> None:
        pass


def request(runtime: Runtime, mode: SpecMode, max_tokens: int = 12) -> GenerationRequest:
    prompt = runtime.prompts.tokenize("def add(a, b):\n    return a + b\n")
    spec = SpecSettings(mode, ngram_draft_max=4, redecode_ties=False)
    return GenerationRequest(
        prompt, max_tokens=max_tokens, ignore_eos=True, spec=spec, route="chat"
    )


def finish(
    runtime: Runtime, mode: SpecMode, ngram: Scripted | None = None, max_tokens: int = 12
) -> Finished:
    # a fixed mode drafts with any `Proposer` in the n-gram proposer's place (auto needs an
    # `NGramProposer`'s index, hence run's narrower type)
    lookup = cast("NGramProposer | None", ngram)
    last = list(runtime.generate_pausable(request(runtime, mode, max_tokens), ngram=lookup))[-1]
    assert isinstance(last, Finished)
    return last


class VirtualClock:
    """The engine's clock in units of work: a plain step's decode is one unit, each more
    token in a batch half a unit, all times `load` (a competing load: 1.5 is 1.5x slower)."""

    def __init__(self) -> None:
        self.now, self.load = 0.0, 1.0

    def __call__(self) -> float:
        return self.now


class CostlyTarget:
    """The real target context, whose decodes also spend time on the virtual clock."""

    def __init__(self, inner: Any, clock: VirtualClock) -> None:
        self.inner, self.clock = inner, clock

    def decode(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        self.clock.now += (1.0 + 0.5 * (len(tokens) - 1)) * self.clock.load
        return self.inner.decode(tokens, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def costly(runtime: Runtime) -> VirtualClock:
    """Make `runtime` measure on a virtual clock that its target's decodes advance."""
    clock = VirtualClock()
    runtime.engine.now = clock
    runtime.engine.target = CostlyTarget(runtime.engine.target, clock)
    return clock
