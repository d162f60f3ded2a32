"""The first token comes from the prompt's last batch, as llama-server takes it: a generation
makes one decode fewer than the tokens it emits, on every path alike, and gives the tokens a
one-token decode of the last prompt token gives (the f32 tiny model has no near-ties)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.model import LlamaModel
from localspec.speculative.engine import Engine, Finished, GenerationRequest
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.sampling import Sampler
from localspec.speculative.settings import SpecMode, SpecSettings

PROMPT = [5, 17, 42, 99, 23, 7, 64, 12, 31, 8, 77, 3]


class CountingContext(LlamaContext):
    """A real context that records every decode: (tokens, which logits)."""

    def __init__(self, model: LlamaModel) -> None:
        super().__init__(model, 256, n_threads=1)
        self.decodes: list[tuple[int, WhichLogits]] = []

    def decode(self, tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
        self.decodes.append((len(tokens), logits))
        return super().decode(tokens, logits=logits)


class RecordingNGram(NGramProposer):
    """The n-gram proposer, recording each draft's length."""

    def __init__(self, n_min: int, n_max: int) -> None:
        super().__init__(n_min=n_min, n_max=n_max)
        self.lengths: list[int] = []

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        draft = super().propose(tokens, limits, sampler)
        self.lengths.append(len(draft.tokens))
        return draft


@pytest.fixture
def context(model: LlamaModel) -> Iterator[CountingContext]:
    counting = CountingContext(model)
    yield counting
    counting.close()


def _generate(engine: Engine, mode: SpecMode, prompt: Sequence[int], n: int) -> Finished:
    request = GenerationRequest(prompt, max_tokens=n, ignore_eos=True, spec=SpecSettings(mode))
    *_, last = engine.generate(request)
    assert isinstance(last, Finished)
    return last


def _one_token_reference(model: LlamaModel, prompt: Sequence[int], n: int) -> list[int]:
    """Greedy decoding the way the engine decoded before: the prompt but its last token in a
    batch, then every token alone."""
    with LlamaContext(model, 256, n_threads=1) as fresh:
        fresh.decode(prompt[:-1], logits="none")
        out: list[int] = []
        token = prompt[-1]
        for _ in range(n):
            token = int(np.argmax(fresh.decode([token], logits="last")[0]))
            out.append(token)
        return out


def test_plain_decoding_takes_its_first_token_from_the_prompt_batch(
    model: LlamaModel, context: CountingContext
) -> None:
    engine = Engine(context, model)
    done = _generate(engine, SpecMode.OFF, PROMPT, 6)
    assert context.decodes == [(len(PROMPT), "last")] + [(1, "all")] * 5
    assert list(context.tokens) == (PROMPT + done.tokens)[:-1]  # the last token pending
    assert done.tokens == _one_token_reference(model, PROMPT, 6)


def test_a_fully_cached_prompt_decodes_its_last_token_again(
    model: LlamaModel, context: CountingContext
) -> None:
    engine = Engine(context, model)
    first = _generate(engine, SpecMode.OFF, PROMPT, 4)
    context.decodes.clear()
    again = _generate(engine, SpecMode.OFF, PROMPT + first.tokens[:2], 2)
    # the cache held all but the last of those tokens: only that one is decoded, with logits
    assert again.stats.cached_tokens == len(PROMPT) + 1
    assert context.decodes[0] == (1, "last")
    assert again.tokens == first.tokens[2:]


def test_speculation_on_the_first_step_decodes_the_draft_alone(
    model: LlamaModel, context: CountingContext
) -> None:
    """A prompt that ends as it began, after the model's answer to its start: the lookup
    drafts that answer again at once, and the tiny model agrees with its first token. The
    verification decodes the draft's tokens only (the pending token's row is the
    prefill's); output stays plain decoding's."""
    engine = Engine(context, model, ngram=RecordingNGram(n_min=2, n_max=8))
    prompt = PROMPT + _generate(engine, SpecMode.OFF, PROMPT, 12).tokens + PROMPT
    plain = _generate(engine, SpecMode.OFF, prompt, 8)
    context.truncate(0)
    context.decodes.clear()
    fast = _generate(engine, SpecMode.NGRAM, prompt, 8)
    assert fast.tokens == plain.tokens
    assert isinstance(engine.ngram, RecordingNGram)
    drafted = engine.ngram.lengths[0]
    assert drafted > 0 and fast.stats.by_proposer["ngram"].accepted > 0
    assert context.decodes[:2] == [(len(prompt), "last"), (drafted, "all")]
    assert list(context.tokens) == (prompt + fast.tokens)[:-1]


def test_a_draft_rejected_at_once_costs_the_first_step_no_decode(
    model: LlamaModel, context: CountingContext
) -> None:
    """A first draft whose first token the prefill's row already rejects needs no decode."""
    ngram = RecordingNGram(n_min=2, n_max=8)
    engine = Engine(context, model, ngram=ngram)
    prompt = PROMPT * 3  # the lookup drafts the prompt's start again; the model disagrees
    plain = _generate(engine, SpecMode.OFF, prompt, 4)
    context.truncate(0)
    context.decodes.clear()
    fast = _generate(engine, SpecMode.NGRAM, prompt, 4)
    assert fast.tokens == plain.tokens and fast.tokens[0] != PROMPT[0]
    assert ngram.lengths[0] > 0 and fast.stats.by_proposer["ngram"].accepted == 0
    assert context.decodes[:2] == [(len(prompt), "last"), (1, "all")]
