"""Proposers that know the target's greedy answer: every draft accepted, or every one rejected."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

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
    last = list(runtime.run(request(runtime, mode, max_tokens), ngram=lookup))[-1]
    assert isinstance(last, Finished)
    return last
