"""The draft-model proposer: a small model of the same family guesses the next k tokens.

The draft keeps its own KV cache, synchronised lazily with the accepted tokens through the
context's prefix reuse: when the n-gram proposer or plain decoding produced the last tokens,
the draft catches up in one batched decode the next time it is asked, instead of every step.
A new prompt is processed up front (`reset`), alongside the target's prompt processing, with
the same chunk reuse as the target's (`reuse_min`: the runtime's --cache-reuse). A request's own
`cache_reuse`/`cache_prompt` reach only the target: the draft's numbers change what is drafted,
never what is accepted, so the draft always takes the cheaper path.

The draft's context may be smaller than the target's (`--draft-ctx-size`): a sequence longer
than it is seen through a window of its last tokens (`window_start`). That changes what is
drafted, never the rule that accepts it: the draft sees less, and may draft worse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.protocols import Logits, ModelContext
from localspec.speculative.sampling import Sampler, apply_penalties, draw

DRAFT_SOURCE = "draft"  # the source a draft-model draft names (`Draft.source`)

DRAFT_ROOM = 64
"""Positions a window leaves free for drafting: the longest draft `SpecSettings` allows."""


def window_start(n_tokens: int, n_ctx: int) -> int:
    """Where the draft's view of a sequence of `n_tokens` starts, in a context of `n_ctx`.

    A sequence shorter than the context is seen whole, as before. A longer one is seen from a
    start that moves in steps of half the window (llama.cpp's context shift discards half too),
    so the window is processed afresh once per step rather than every token, and it leaves
    `DRAFT_ROOM` positions to draft into (half the context, in a context too small for that).
    The start depends on the length alone: `reset` and `propose` agree on it.
    """
    if n_tokens < n_ctx:
        return 0
    room = max(n_ctx - DRAFT_ROOM, n_ctx // 2, 1)  # the longest window
    step = max(room // 2, 1)
    return -(-(n_tokens - room) // step) * step


@dataclass(frozen=True)
class PairVocab:
    """A draft's vocabulary beside its target's where their sizes differ by padding
    (`localspec.llama.model.ensure_same_vocabulary`): the ids both have mean the same text."""

    draft: int  # how many ids the draft has
    target: int

    def readable(self, tokens: Sequence[int]) -> bool:
        return self.target <= self.draft or all(token < self.draft for token in tokens)

    def fit(self, row: Logits) -> Logits:
        """The draft's logits over the target's ids: padding the draft lacks can never be
        drafted (-inf), and padding only the draft has is dropped, so the draft proposes,
        and its q gives probability to, ids the target has, and q and p share one support."""
        if self.draft >= self.target:
            return row[: self.target]
        fitted: Logits = np.full(self.target, -np.inf, dtype=row.dtype)
        fitted[: self.draft] = row
        return fitted


def top_probability(logits: npt.NDArray[np.float32]) -> tuple[int, float]:
    """The most probable token under these logits, and its probability."""
    z = logits.astype(np.float64)
    best = int(np.argmax(z))
    return best, float(1.0 / np.exp(z - z[best]).sum())


class DraftModelProposer:
    """Drafts up to k tokens, stopping before a token whose probability is below p_min or
    that the limits' `keep_drafting` (the tuner's early stop) turns down.

    At temperature 0 it drafts greedily (deterministic, verified by comparison); otherwise it
    samples from its distribution under the same sampling settings and returns those
    distributions as `q_draft` for the min(1, p/q) rule. Under a constraint it drafts from
    the masked logits, as the target is verified, so q and p share one support.
    """

    name = DRAFT_SOURCE

    def __init__(
        self, context: ModelContext, reuse_min: int = 0, vocab: PairVocab | None = None
    ) -> None:
        self.context = context
        self.reuse_min = reuse_min
        self.vocab = vocab

    def can_draft(self, tokens: Sequence[int]) -> bool:
        """Whether the draft can read `tokens` (its window of them): a target whose
        vocabulary is padded further may emit (or be sent) an id the draft lacks, which the
        draft cannot decode; it then drafts nothing for that sequence. What the draft
        decoded it could read, so only the rest is looked at."""
        if self.vocab is None or self.vocab.target <= self.vocab.draft:
            return True
        window = tokens[window_start(len(tokens), self.context.n_ctx) :]
        return self.vocab.readable(window[self.context.common_prefix(window) :])

    def reset(self, prompt: Sequence[int]) -> None:
        """Process the new prompt now, with the target's, so that the first draft step does
        not carry it (and prompt time is reported as prompt time); shared prefixes are reused."""
        window = prompt[window_start(len(prompt), self.context.n_ctx) :]
        if self.can_draft(prompt):
            self.context.prefill(window[:-1], reuse_min=self.reuse_min)

    def finish(self, tokens: Sequence[int]) -> None:
        """Nothing to learn: the draft model is frozen."""

    def behind(self, tokens: Sequence[int]) -> int:
        """How many tokens of `tokens` the draft would have to process before drafting."""
        window = tokens[window_start(len(tokens), self.context.n_ctx) :]
        return len(window) - self.context.common_prefix(window)

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        started = time.perf_counter()
        window = tokens[window_start(len(tokens), self.context.n_ctx) :]
        max_len = min(limits.max_len, self.context.n_ctx - len(window))
        if max_len <= 0 or not self.can_draft(tokens):
            return Draft([], self.name)
        fit = (lambda row: row) if self.vocab is None else self.vocab.fit
        logits = fit(self.context.sync(window))

        def advance(token: int) -> Logits:
            return fit(self.context.decode([token], logits="last")[0])

        return draft_from(
            logits,
            advance,
            tokens,
            max_len=max_len,
            limits=limits,
            sampler=sampler,
            source=self.name,
            started=started,
        )


def draft_from(
    logits: Logits,
    advance: Callable[[int], Logits],
    tokens: Sequence[int],
    *,
    max_len: int,
    limits: DraftLimits,
    sampler: Sampler,
    source: str,
    started: float,
) -> Draft:
    """Up to `max_len` tokens drafted from `logits` (after `tokens`), `advance(token)` giving
    the logits after each kept token: the drafting rule every model proposer shares (the draft
    model, an MTP head), so that q_draft and the early stop mean the same for all of them.

    Greedy drafting is deterministic (verified by comparison); otherwise each token is drawn
    from the sampling settings' distribution q, returned as q_draft for min(1, p/q).
    """
    settings = sampler.settings
    # penalties only look at the last repeat_last_n tokens, so keep just those
    history = list(tokens[-settings.repeat_last_n :]) if settings.penalised else []
    drafted: list[int] = []
    confidences: list[float] = []
    q_draft: list[npt.NDArray[np.float64]] = []
    for i in range(max_len):
        if limits.constraint is not None:  # q must be the masked q (min(1, p/q) exactness)
            logits = limits.constraint.constrain(logits, drafted)
        if settings.greedy:
            token, confidence = top_probability(apply_penalties(logits, history, settings))
            if settings.samplers is not None:  # the chain's argmax may not be the top one
                token = sampler.greedy_token(logits, history)
        else:
            q = sampler.distribution(logits, history)
            token = draw(q, sampler.rng)
            # The stop must be decided before the draw: stopping on q[token] would keep
            # only confident draws, and min(1, p/q) with the untruncated q then biases
            # the output (measured: p = .5/.3/.2 came out .65/.19/.16). q.max() is known
            # before drawing, and the tuner's bands learn from the same number they judge.
            confidence = float(q.max())
        if confidence < limits.p_min:
            break
        if limits.keep_drafting is not None and not limits.keep_drafting(i, confidence):
            break
        if not settings.greedy:
            q_draft.append(q)
        drafted.append(token)
        confidences.append(confidence)
        history.append(token)
        if i + 1 < max_len:
            logits = advance(token)
    return Draft(
        drafted,
        source,
        None if settings.greedy else q_draft,
        seconds=time.perf_counter() - started,
        confidence=tuple(confidences),
    )
