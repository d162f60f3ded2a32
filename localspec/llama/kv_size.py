"""What a context's KV cache takes in memory, in llama.cpp's own numbers.

llama.cpp's C API reports no cache size (its memory breakdown is C++ only, and a log line).
What it does report is the size of a sequence's saved state, which holds each cached token's
K and V rows in every layer, in the cache's types, and its cell's bookkeeping. One token more
in the cache is one token's share of that, so, less the bookkeeping, the cache of `n_ctx`
cells takes `n_ctx` times it, whatever the architecture's head layout or the cache's types:
for the Qwen2.5-Coder pair at 4096 tokens, 112.00 and 48.00 MiB, llama.cpp's own log line's
figures. A sliding-window layer keeps fewer cells than the context: for such models the
figure is an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import llama_cpp.llama_cpp as lc

from localspec.llama.context import LlamaContext

# what a saved state holds per cell besides its K and V rows: its position, its count of
# sequence ids and the one id (llama_kv_cache::state_write_meta writes 4 bytes each; models
# with 2-D positions, M-RoPE's, write a few more, which are then counted as K and V)
_CELL_BOOKKEEPING = 12


@dataclass(frozen=True)
class KvSize:
    """A context's KV cache: its cells and the bytes of K and V in each. The cells are
    llama.cpp's n_ctx, the asked size rounded up to a multiple of 256 (`llama_context`)."""

    n_ctx: int
    bytes_per_token: int

    @property
    def bytes(self) -> int:
        return self.n_ctx * self.bytes_per_token


def kv_size(context: LlamaContext) -> KvSize:
    """Measure `context`'s KV cache: decodes two tokens into it, which must be empty, and
    empties it again."""
    if context.n_past:
        raise ValueError("kv_size measures an empty context")
    token = context.model.bos if context.model.bos >= 0 else 0
    sizes = []
    for _ in range(2):
        context.decode([token], logits="none")
        sizes.append(int(lc.llama_state_seq_get_size(context.handle, 0)))
    context.truncate(0)
    return KvSize(context.n_ctx, sizes[1] - sizes[0] - _CELL_BOOKKEEPING)
