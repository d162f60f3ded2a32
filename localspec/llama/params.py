"""The settings a llama.cpp context is made with (`LlamaContext`): threads, batch, sequences,
outputs, flash attention, the value cache's type and recurrent rollback states."""

from __future__ import annotations

import os

import llama_cpp.llama_cpp as lc

from localspec.errors import ModelLoadError
from localspec.llama.backend import set_fields
from localspec.llama.parked import N_SEQUENCES

_FLASH_ATTN = {
    None: lc.LLAMA_FLASH_ATTN_TYPE_AUTO,
    True: lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    False: lc.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}

VALUE_CACHE_TYPES = {"f16": lc.GGML_TYPE_F16, "bf16": 30}  # ggml.h's GGML_TYPE_BF16
"""The value cache's element types a context may keep: llama.cpp's f16, or bf16, which keeps
its CPU flash attention on one kernel for one token and a batch alike (docs/exactness.md)."""


def default_threads() -> int:
    """All cores: decoding is memory-bound and this is a single-user, foreground tool."""
    return max(1, os.cpu_count() or 1)


def context_params(
    n_ctx: int,
    *,
    n_batch: int,
    n_threads: int | None,
    max_outputs: int,
    flash_attn: bool | None,
    rollback: int,
    value_cache: str,
) -> lc.llama_context_params:
    """llama.cpp's parameters for a context (`LlamaContext` says what each setting does);
    refuses rollback states llama.cpp would abort the process over."""
    params: lc.llama_context_params = lc.llama_context_default_params()
    threads = n_threads or default_threads()
    set_fields(
        params,
        n_ctx=n_ctx,
        n_batch=min(n_batch, n_ctx),
        n_ubatch=min(n_batch, n_ctx),
        # the prompt, tokens parked for the next one, one chunk moving back: one pool
        n_seq_max=N_SEQUENCES,
        kv_unified=True,
        # llama.cpp sizes its logits buffer for n_outputs_max rows (default n_batch): 512
        # rows of a 152k vocabulary is 311 MB; speculation needs 1 + k rows at most
        n_outputs_max=min(max_outputs, n_batch, n_ctx),
        n_threads=threads,
        n_threads_batch=threads,
        no_perf=True,
        flash_attn_type=_FLASH_ATTN[flash_attn],
        type_v=VALUE_CACHE_TYPES[value_cache],
        n_rs_seq=rollback,
    )
    if rollback and params.n_ubatch <= rollback + 1:  # llama.cpp would abort the process
        raise ModelLoadError(f"{rollback} rollback states need a batch of over {rollback + 1}")
    return params
