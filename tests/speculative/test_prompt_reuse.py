"""A generation's prompt reuse: shifted chunks (target and draft), `cache_reuse`, `cache_prompt`
and the prompt-processing budget, through `Runtime` on the tiny models."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from localspec import Runtime
from localspec.errors import InvalidSettingsError
from localspec.llama.prefill import MIN_SUB_BATCH
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.engine import Finished, GenerationRequest, SpecMode, SpecSettings

N = 256  # RuntimeSettings' default cache_reuse


def _tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(20, 250, n)]


PREFIX, GAP, CHUNK = _tokens(1, 10), _tokens(2, 20), _tokens(3, N + 4)
DRAFT = SpecSettings(mode=SpecMode.DRAFT, draft_max=2, p_min=0.0)


@pytest.fixture(autouse=True)
def _empty_caches(noisy: Runtime) -> None:
    """These tests count what their own requests reuse, so each starts from empty caches:
    what earlier tests left, cached, parked (a run of an earlier prompt: reused exactly) or
    saved by the prompt cache, would serve their prompts instead (each is tested apart)."""
    noisy.models.target_context.reuse.cache = None
    for context in (noisy.models.target_context, noisy.models.draft_context):
        if context is not None:
            context.parked.drop()
            context.truncate(0)


def _finish(runtime: Runtime, request: GenerationRequest) -> Finished:
    *_, last = runtime.generate(request)
    assert isinstance(last, Finished)
    return last


def _moved(runtime: Runtime, **fields: object) -> Finished:
    """Generate after prefix + gap + chunk, then for prefix + chunk + a new tail."""
    first = GenerationRequest([*PREFIX, *GAP, *CHUNK, 7], max_tokens=2, spec=DRAFT)
    _finish(runtime, first)
    prompt = [*PREFIX, *CHUNK, *_tokens(4, 5)]
    return _finish(runtime, GenerationRequest(prompt, max_tokens=2, spec=DRAFT, **fields))  # type: ignore[arg-type]


def test_the_target_shifts_a_moved_chunk(noisy: Runtime) -> None:
    stats = _moved(noisy).stats
    assert stats.cached_tokens == len(PREFIX) + len(CHUNK)
    assert stats.shifted_tokens == len(CHUNK)
    assert stats.generated_tokens == 2


def test_the_draft_shifts_a_moved_chunk_when_it_processes_the_prompt(noisy: Runtime) -> None:
    _moved(noisy)
    proposer, context = noisy.engine.draft, noisy.models.draft_context
    assert isinstance(proposer, DraftModelProposer) and proposer.reuse_min == N
    assert context is not None
    context.prefill([*PREFIX, *GAP, *CHUNK])
    decoded: list[int] = []

    def watch(position: int, tokens: Sequence[int]) -> None:
        decoded.extend(tokens)

    context.decode_hooks.append(watch)
    try:
        DraftModelProposer(context, N).reset([*PREFIX, *CHUNK, 8, 9])
    finally:
        context.decode_hooks.remove(watch)
    # the draft keeps no saved states: the chunk was reused only if it was shifted
    assert decoded == [8] and context.n_past == len(PREFIX) + len(CHUNK) + 1


@pytest.mark.parametrize(
    ("fields", "cached"),
    [({"cache_reuse": 0}, len(PREFIX)), ({"cache_reuse": N + 5}, len(PREFIX))],
)
def test_a_request_can_ask_for_less_reuse(
    noisy: Runtime, fields: dict[str, object], cached: int
) -> None:
    stats = _moved(noisy, **fields).stats
    assert stats.cached_tokens == cached and stats.shifted_tokens == 0


def test_cache_prompt_false_processes_the_whole_prompt(noisy: Runtime) -> None:
    stats = _moved(noisy, cache_prompt=False).stats
    assert stats.cached_tokens == 0 and stats.shifted_tokens == 0
    prompt = [*PREFIX, *CHUNK]
    assert noisy.cache_prompt(prompt).reused == len(prompt) - 1  # all cached already
    assert noisy.cache_prompt(prompt, cache_prompt=False).reused == 0


def test_a_spent_budget_ends_before_generating_and_the_next_request_goes_on(
    noisy: Runtime,
) -> None:
    """A budget no decode fits in (1 ns): exactly one sub-batch per request."""
    prompt = _tokens(5, 3 * MIN_SUB_BATCH + 1)
    noisy.cache_prompt([5])
    request = GenerationRequest(prompt, max_tokens=2, spec=DRAFT, max_prompt_s=1e-9)
    for done in (1, 2):
        finished = _finish(noisy, request)
        stats = finished.stats
        assert (finished.finish_reason, finished.text, finished.tokens) == ("prompt_time", "", [])
        assert stats.prompt_cut and stats.generated_tokens == 0
        assert stats.cached_tokens == (done - 1) * MIN_SUB_BATCH
        assert stats.prompt_unprocessed == len(prompt) - done * MIN_SUB_BATCH
    last = _finish(noisy, request)  # the last sub-batch ends the prompt: then it generates
    assert last.finish_reason == "length" and not last.stats.prompt_cut
    assert last.stats.cached_tokens == 2 * MIN_SUB_BATCH


def test_a_warm_up_under_a_spent_budget_caches_one_sub_batch(noisy: Runtime) -> None:
    prompt = _tokens(6, 3 * MIN_SUB_BATCH)
    noisy.cache_prompt([5])
    assert noisy.cache_prompt(prompt, max_prompt_s=1e-9).reused == 0
    assert noisy.models.target_context.n_past == MIN_SUB_BATCH


@pytest.mark.parametrize("fields", [{"cache_reuse": -1}, {"max_prompt_s": -1.0}])
def test_negative_reuse_settings_are_refused(noisy: Runtime, fields: dict[str, object]) -> None:
    with pytest.raises(InvalidSettingsError):
        _finish(noisy, GenerationRequest([1, 2, 3], **fields))  # type: ignore[arg-type]
