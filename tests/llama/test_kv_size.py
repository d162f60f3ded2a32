"""A context's KV memory from llama.cpp's state sizes agrees with the model's shape."""

from __future__ import annotations

import llama_cpp.llama_cpp as lc
import pytest

from localspec.llama.context import LlamaContext
from localspec.llama.kv_size import kv_size
from localspec.llama.model import LlamaModel

F16_BYTES = 2  # localspec leaves llama.cpp's KV cache types at their default, f16


@pytest.mark.parametrize(("asked", "cells"), [(256, 256), (1000, 1024)])
@pytest.mark.parametrize("flash_attn", [None, False])  # V stored as rows, or transposed
def test_the_measured_size_is_the_layers_keys_and_values(
    model: LlamaModel, asked: int, cells: int, flash_attn: bool | None
) -> None:
    handle = model.handle
    head_dim = lc.llama_model_n_embd(handle) // lc.llama_model_n_head(handle)
    k_and_v = 2 * lc.llama_model_n_layer(handle) * lc.llama_model_n_head_kv(handle) * head_dim
    with LlamaContext(model, asked, n_threads=1, flash_attn=flash_attn) as context:
        size = kv_size(context)
        assert context.n_past == 0  # measured, and emptied again
    assert size.n_ctx == cells  # llama.cpp's cells: a multiple of 256
    assert size.bytes_per_token == k_and_v * F16_BYTES
    assert size.bytes == cells * size.bytes_per_token


def test_a_context_in_use_is_not_measured(model: LlamaModel) -> None:
    with LlamaContext(model, 256, n_threads=1) as context:
        context.decode([model.bos], logits="none")
        with pytest.raises(ValueError, match="empty context"):
            kv_size(context)
