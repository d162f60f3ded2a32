"""A draft context smaller than the target's (`--draft-ctx-size`): the draft model drafts from
the last tokens that fit (`window_start`), and greedy output stays plain decoding's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import llama_cpp.llama_cpp as lc
import numpy as np
import pytest

from localspec import Finished, GenerationRequest, Runtime, RuntimeSettings, SamplingSettings
from localspec.llama import LlamaContext, LlamaModel
from localspec.speculative.draft_model import (
    DRAFT_ROOM,
    DRAFT_SOURCE,
    DraftModelProposer,
    window_start,
)
from localspec.speculative.proposer import DraftLimits
from localspec.speculative.sampling import Sampler
from localspec.speculative.settings import SpecMode, SpecSettings

TARGET_CTX, DRAFT_CTX = 1024, 256
# ~420 tokens on the tiny byte-level vocabulary: longer than the draft's whole context
LONG_PROMPT = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(14))
SHORT_PROMPT = "def add(a, b):\n    return a + b\n\n"


@pytest.mark.parametrize("n_ctx", [256, 512, 4096])
def test_a_window_leaves_room_to_draft_and_moves_in_steps(n_ctx: int) -> None:
    starts = [window_start(n, n_ctx) for n in range(1, 4 * n_ctx)]
    assert starts[: n_ctx - 1] == [0] * (n_ctx - 1)  # what fits is seen whole
    assert starts == sorted(starts)
    windows = [n - start for n, start in enumerate(starts, start=1)]
    assert all(n_ctx - window >= DRAFT_ROOM for window in windows[n_ctx - 1 :])
    # after the first move the window never shrinks below half of what it may hold
    assert min(windows[n_ctx - 1 :]) > (n_ctx - DRAFT_ROOM) // 2
    # the window is processed afresh once per half-window of tokens, not every token
    assert len(set(starts)) <= 4 * n_ctx // ((n_ctx - DRAFT_ROOM) // 2) + 1


def test_a_context_too_small_for_the_room_gives_half_to_the_window() -> None:
    windows = [n - window_start(n, 64) for n in range(64, 300)]
    assert min(windows) == 17 and max(windows) == 32


@pytest.fixture(scope="module")
def draft(tiny_draft_exact: Path) -> Iterator[DraftModelProposer]:
    with (
        LlamaModel(tiny_draft_exact) as model,
        LlamaContext(model, DRAFT_CTX, n_threads=1) as context,
    ):
        yield DraftModelProposer(context)


def test_a_sequence_longer_than_the_context_is_drafted_from_its_end(
    draft: DraftModelProposer,
) -> None:
    context = draft.context
    assert isinstance(context, LlamaContext)
    tokens = context.model.tokenize(LONG_PROMPT, add_special=True, parse_special=False)
    assert len(tokens) > DRAFT_CTX
    sampler = Sampler(SamplingSettings(), np.random.default_rng(0))
    draft.reset(tokens)
    start = window_start(len(tokens), DRAFT_CTX)
    assert context.tokens == tuple(tokens[start:-1])  # the prompt's window, processed up front
    assert draft.behind(tokens) == 1
    made = draft.propose(tokens, DraftLimits(max_len=8), sampler)
    assert len(made) == 8 and made.source == DRAFT_SOURCE
    assert context.n_past <= context.n_ctx
    assert context.tokens[: len(tokens) - start] == tuple(tokens[start:])


def _generate(runtime: Runtime, prompt: str, mode: SpecMode) -> Finished:
    tokens = runtime.prompts.tokenize(prompt)
    # nothing learned: the session's n-gram cache and suffix store would hold the plain
    # run's answer and draft all of it, where this test needs the draft model to draft
    spec = SpecSettings(mode, draft_max=4, p_min=0.0, ngram_min_match=2, learn=False)
    request = GenerationRequest(tokens, max_tokens=300, ignore_eos=True, spec=spec)
    *_, done = runtime.generate(request)
    assert isinstance(done, Finished)
    return done


@pytest.fixture(scope="module")
def small_draft(tiny_target: Path, tiny_draft_noisy: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(
        target=tiny_target,
        draft=tiny_draft_noisy,
        n_ctx=TARGET_CTX,
        draft_n_ctx=DRAFT_CTX,
        n_threads=1,
    )
    with Runtime(settings) as runtime:
        yield runtime


def test_the_draft_context_has_the_asked_size(small_draft: Runtime) -> None:
    small_draft.load_draft()
    draft = small_draft.models.draft_context
    assert draft is not None
    assert int(lc.llama_n_ctx(draft.handle)) == DRAFT_CTX
    assert int(lc.llama_n_ctx(small_draft.models.target_context.handle)) == TARGET_CTX


@pytest.mark.parametrize("mode", [SpecMode.DRAFT, SpecMode.HYBRID])
@pytest.mark.parametrize("prompt", [LONG_PROMPT, SHORT_PROMPT], ids=["long", "crossing"])
def test_greedy_output_is_plain_decodings_past_the_drafts_context(
    small_draft: Runtime, mode: SpecMode, prompt: str
) -> None:
    """A prompt longer than the draft's context, and one whose answer outgrows it: the
    draft model keeps drafting from its window, and every token is plain decoding's."""
    plain = _generate(small_draft, prompt, SpecMode.OFF)
    speculative = _generate(small_draft, prompt, mode)
    assert len(small_draft.prompts.tokenize(prompt)) + len(plain.tokens) > DRAFT_CTX
    assert speculative.tokens == plain.tokens
    assert speculative.stats.by_proposer[DRAFT_SOURCE].drafted > 0
