"""What the context tests on the tiny f32 model share: a small context, random tokens."""

from __future__ import annotations

import numpy as np

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel


def small_context(model: LlamaModel) -> LlamaContext:
    """512 cells in 64-token batches: room for a few moved chunks, several batches each."""
    return LlamaContext(model, 512, n_batch=64, n_threads=1)


def random_tokens(seed: int, n: int) -> list[int]:
    """`n` seeded tokens of the tiny vocabulary, clear of its special ones."""
    return [int(t) for t in np.random.default_rng(seed).integers(20, 250, n)]
