"""`auto` on a FIM prompt with its regions, on the tiny models: drafts from the suffix and
extra-chunk lookups are verified like any n-gram draft, so greedy output stays plain
decoding's token for token, with the guard against near-ties that the runtime measures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import Finished, GenerationRequest, SpecMode, SpecSettings
from localspec.auto_io import measure_tie_noise
from localspec.fim import ExtraChunk, infill_prompt
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.engine import Engine
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.sources import CONTEXT, EXTRA, SUFFIX, Span
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import HardwareProfile, Tuner, ngram_key

# verification nearly free: the tuner drafts any lookup it believes in
CHEAP = tuple(1.0 + 0.01 * b for b in range(9))
BANDS = (2, 3, 5, 8)


class Parts:
    def __init__(self, target: Path) -> None:
        self.model = LlamaModel(target)
        self.context = LlamaContext(self.model, 512, n_threads=1)
        self.guard = TieGuard(measure_tie_noise(self.context, 8))

    def engine(self, trusted: str) -> Engine:
        """An engine whose tuner believes `trusted`'s lookups and distrusts the others', so
        that source is the one drafted whenever it has a match."""
        tuner = Tuner(HardwareProfile(CHEAP, tie_noise=self.guard.noise), explore_ngram=False)
        # priced as one cheap batch (the drafter is told of no guard), so that it drafts what
        # it trusts; the engine's guard still verifies in exact-width chunks (one token at a
        # time here: the tiny model has no exact width), so the answers stay plain decoding's
        for source in (CONTEXT, SUFFIX, EXTRA):
            for match in BANDS:
                for _ in range(20):
                    good = source == trusted
                    tuner.acceptance.update(ngram_key(match, source), 4, 4 if good else 0)
        ngram = NGramProposer(2, 12)
        auto = AutoDrafter(tuner, ngram)
        return Engine(self.context, self.model, ngram=ngram, auto=auto, ties=self.guard)

    def close(self) -> None:
        self.context.close()
        self.model.close()


@pytest.fixture(scope="module")
def parts(tiny_target: Path) -> Iterator[Parts]:
    built = Parts(tiny_target)
    yield built
    built.close()


def generate(
    engine: Engine,
    prompt: list[int],
    mode: SpecMode,
    regions: tuple[Span, ...] = (),
    tokens: int = 48,
) -> Finished:
    request = GenerationRequest(
        prompt, max_tokens=tokens, ignore_eos=True, spec=SpecSettings(mode), regions=regions
    )
    done = list(engine.generate(request))[-1]
    assert isinstance(done, Finished)
    return done


def fim(parts: Parts) -> tuple[list[int], tuple[Span, ...]]:
    built = infill_prompt(
        parts.model,
        "def add(a, b):\n",
        "\n\ndef sub(a, b):\n    return a - b\n",
        extra=[ExtraChunk("m.py", "def mul(a, b):\n    return a * b\n")],
        budget=400,
    )
    return built.tokens, built.regions


@pytest.mark.parametrize("trusted", [SUFFIX, EXTRA, CONTEXT])
def test_auto_with_fim_regions_gives_plain_decoding(parts: Parts, trusted: str) -> None:
    prompt, regions = fim(parts)
    engine = parts.engine(trusted)
    plain = generate(engine, prompt, SpecMode.OFF)
    fast = generate(engine, prompt, SpecMode.AUTO, regions)
    assert fast.tokens == plain.tokens
    assert list(parts.context.tokens) == (prompt + fast.tokens)[:-1]  # cache == token list


def test_drafts_from_a_region_are_accepted_where_the_answer_copies_it(parts: Parts) -> None:
    """The tiny model's greedy answer falls into a loop; a prompt that holds the first part
    of its answer as an extra chunk gets the rest drafted from that chunk."""
    prompt, regions = fim(parts)
    engine = parts.engine(EXTRA)
    answer = generate(engine, prompt, SpecMode.OFF, tokens=96).tokens
    copied = [*prompt, *answer[:60]]
    chunk = (*regions, Span(EXTRA, len(prompt), len(copied)))
    plain = generate(engine, copied, SpecMode.OFF)
    fast = generate(engine, copied, SpecMode.AUTO, chunk)
    assert fast.tokens == plain.tokens
    from_extra = fast.stats.by_proposer.get("ngram-extra")
    assert from_extra is not None and from_extra.accepted > 0
    assert "ngram" not in fast.stats.by_proposer  # the distrusted context lookup is not drafted
