"""How prompt processing splits a prompt into llama_decode calls.

A server's worker can stop a prompt only between two calls: llama_decode blocks for the whole
batch it is given. On a CPU a 512-token batch of the 1.5B target takes 5-15 s (35-100 prompt
tokens/s), so an editor's completion that arrives while an agent's long prompt is processed
waited that long before it could start. Pieces of `CPU_PIECE` tokens bound that wait to ~1.3-3.7
s and cost ~2% of prompt speed, measured here (1,024 tokens, 4 interleaved rounds: 98.3 tok/s
in 512-token calls, 96.5 in 128, 89.5 in 64). On a GPU a 512-token batch takes tens of
milliseconds and smaller ones waste most of it: there pieces are the whole batch.

The pieces depend only on how many tokens are left, never on whether anything interrupted: a
prefill stopped after a piece and resumed decodes the same calls as one that was never
stopped, so an interrupted answer is the same answer. A short tail joins the piece before it:
a call of fewer than ~64 tokens takes other CPU kernels. On this CPU 128-token pieces gave the
same logits, bit for bit, as 512-token calls wherever those ended in a call of 64 tokens or
more (prompts of 900 and 1,100 tokens); where they ended in a short one (530 = 512 + 18) the
two round that tail differently, as a warm and a cold cache already do.
"""

from __future__ import annotations

CPU_PIECE = 128
"""Prompt tokens per llama_decode call where the target runs on the CPU (`--ubatch-size`)."""

MIN_PIECE = 16
"""The smallest `--ubatch-size`: below it each call's overhead dominates."""

MAX_PIECE = 512
"""The largest `--ubatch-size`: the batch localspec's contexts are made with."""


def next_piece(left: int, piece: int, n_batch: int) -> int:
    """How many of the `left` prompt tokens the next call decodes: `piece`, or all of them
    where what would remain is under half a piece and the whole fits one batch."""
    if left <= piece or (left - piece < piece // 2 and left <= n_batch):
        return left
    return piece
