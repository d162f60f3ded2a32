"""The KV cache stays in lock-step with the token list: decode, rollback, prefix reuse."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import llama_cpp.llama_cpp as lc
import numpy as np
import pytest

from localspec.errors import DecodeError
from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.model import LlamaModel
from tests.llama.helpers import small_context

# Batched and one-token decoding take different kernel paths, so f32 logits differ slightly:
# measured up to 9e-4 (logit std ~2.8) on the tiny model over 18 positions with this build.
F32_TOLERANCE = 5e-3


@pytest.fixture
def context(model: LlamaModel) -> Iterator[LlamaContext]:
    with LlamaContext(model, 128, n_batch=16, n_threads=1) as ctx:
        yield ctx


def _one_by_one(context: LlamaContext, tokens: list[int]) -> np.ndarray:
    return np.stack([context.decode([t], logits="last")[0] for t in tokens])


def test_batched_logits_match_one_token_decoding(model: LlamaModel, context: LlamaContext) -> None:
    tokens = model.tokenize("the cat sat on the mat")
    batched = context.decode(tokens, logits="all")
    assert batched.shape == (len(tokens), model.n_vocab)
    context.truncate(0)
    single = _one_by_one(context, tokens)
    assert np.max(np.abs(batched - single)) < F32_TOLERANCE


def test_long_input_is_split_into_batches(model: LlamaModel, context: LlamaContext) -> None:
    tokens = model.tokenize("a longer prompt that needs more than sixteen tokens to encode")
    assert len(tokens) > context.n_batch
    rows = context.decode(tokens, logits="all")
    assert rows.shape[0] == len(tokens)
    last = context.decode([tokens[0]], logits="last")
    assert last.shape == (1, model.n_vocab)
    assert context.decode(tokens[:3], logits="none").shape == (0, model.n_vocab)
    assert context.n_past == len(tokens) + 4


def test_truncate_rolls_back_exactly(model: LlamaModel, context: LlamaContext) -> None:
    prefix = model.tokenize("def f(x):")
    context.decode(prefix, logits="none")
    reference = context.decode([220, 221], logits="all")
    context.decode([300 % model.n_vocab, 5, 6], logits="none")  # a rejected draft
    context.truncate(len(prefix))
    assert list(context.tokens) == prefix
    again = context.decode([220, 221], logits="all")
    assert np.max(np.abs(reference - again)) < F32_TOLERANCE


def test_prefill_reuses_the_common_prefix(model: LlamaModel, context: LlamaContext) -> None:
    first = model.tokenize("shared prefix then one ending")
    second = model.tokenize("shared prefix then another ending")
    assert context.prefill(first).reused == 0
    reused = context.prefill(second).reused
    common = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert reused == common
    assert list(context.tokens) == second
    assert context.prefill(second).reused == len(second)  # nothing to do


def test_sync_returns_the_logits_after_the_last_token(
    model: LlamaModel, context: LlamaContext
) -> None:
    tokens = model.tokenize("sync me")
    reference = context.decode(tokens, logits="last")[0]
    context.truncate(0)
    context.decode(tokens[:2], logits="none")
    assert np.max(np.abs(context.sync(tokens) - reference)) < F32_TOLERANCE
    assert np.max(np.abs(context.sync(tokens) - reference)) < F32_TOLERANCE  # fully cached
    assert list(context.tokens) == tokens


def test_overflowing_the_context_is_refused(model: LlamaModel, context: LlamaContext) -> None:
    # llama.cpp rounds the window up (here 128 -> 256); the context reports the real size
    assert context.n_ctx >= 128
    context.decode([5] * (context.n_ctx - 8), logits="none")
    with pytest.raises(DecodeError, match=f"do not fit the {context.n_ctx}-token context"):
        context.decode([5] * 9, logits="last")
    assert context.n_past == context.n_ctx - 8  # nothing half-applied


def test_a_cache_out_of_step_with_its_tokens_is_cleared_not_left_refusing(
    model: LlamaModel, context: LlamaContext
) -> None:
    """Should the KV cache ever hold other positions than the token list (a bug), llama.cpp
    refuses every later batch; the failed decode starts the cache over instead, so one
    request fails and the next is served."""
    tokens = list(range(10, 30))
    context.prefill(tokens)
    memory = lc.llama_get_memory(context.handle)
    lc.llama_memory_seq_rm(memory, 0, 15, -1)  # the cache now ends 5 tokens short
    with pytest.raises(DecodeError):
        context.decode([40], logits="last")
    assert context.n_past == 0
    fresh = context.decode(tokens, logits="last")[0]
    with small_context(model) as cold:
        expected = cold.decode(tokens, logits="last")[0]
    assert np.max(np.abs(fresh - expected)) < F32_TOLERANCE


def test_prompt_progress_counts_each_batch(model: LlamaModel) -> None:
    """A server's `/health` reads how far a long prompt is; idle, it says (0, 0)."""
    with LlamaContext(model, 512, n_batch=64, n_threads=1) as context:
        seen: list[tuple[int, int]] = []
        decode = context.decode

        def watched(tokens: Sequence[int], *, logits: WhichLogits) -> Logits:
            seen.append(context.reuse.progress)
            return decode(tokens, logits=logits)

        context.decode = watched  # type: ignore[method-assign]
        context.prefill(list(range(10, 160)))
        assert seen == [(0, 150), (64, 150), (128, 150)]
        assert context.reuse.progress == (0, 0)
