"""What shifted KV reuse does to the numbers: a replay's prompts, warm against cold.

A chunk shifted into place keeps the keys and values it was computed with: its keys are
re-rotated to the new positions, but its values (and every later layer's keys) attended to
the tokens that were removed in front of it. So the logits after a shifted reuse are not a
cold prefill's (`localspec.llama.context`). This measures by how much on real prompts: each
prompt is prefilled in the runtime's target context with chunk reuse, as a server would (with
its greedy continuation decoded after it, as a completion would leave the cache), and in a
second, fresh context from scratch; the next-token logits and the greedy continuations are
compared.

A request is *affected* when the cache it reused holds a shifted chunk, this time or from an
earlier request (a prefix kept after a shift carries it along); the figures are over the
affected requests, and the exact ones' largest difference is kept apart as the floor of
kernel rounding (batch splits differ between the two contexts). The context's prompt cache
of saved states, if any, is set aside during the replay: only shifting is measured.
Warm-ups (an editor's `n_predict: 0` requests) are replayed in the warm context as a server
processes them, and not measured: they shape the cache the next completion reuses (a ring
rotation a warm-up shifts carries its shift into the next completion).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from localspec.llama.context import LlamaContext, Logits
from localspec.runtime import Runtime


@dataclass(frozen=True)
class ReuseNumerics:
    """The replay's figures: how many requests, how many shifted a chunk this time, how many
    reused a cache holding a shifted chunk (`affected`), the next-token logit differences of
    those (max and median of each request's largest absolute difference), for scale the
    median standard deviation of the cold logits, the exact requests' largest difference,
    and how many affected requests gave the same first token and the same whole greedy
    continuation as the cold prefill."""

    requests: int
    shifted_requests: int
    affected_requests: int
    shifted_tokens: int
    max_logit_diff: float
    median_logit_diff: float
    logit_std: float
    exact_max_logit_diff: float
    first_token_agree: int
    greedy_agree: int
    greedy_compared: int
    greedy_tokens: int

    def rows(self) -> list[tuple[str, str]]:
        """The report's table: (what, figure) rows."""
        compared = self.greedy_compared
        return [
            ("requests", str(self.requests)),
            ("requests that shifted a chunk", str(self.shifted_requests)),
            ("tokens reused by shifting", str(self.shifted_tokens)),
            ("requests reusing a shifted chunk (affected)", str(self.affected_requests)),
            ("next-token logit |diff|, affected: max", f"{self.max_logit_diff:.4f}"),
            ("next-token logit |diff|, affected: median", f"{self.median_logit_diff:.4f}"),
            ("cold logits' std (median)", f"{self.logit_std:.3f}"),
            ("next-token logit |diff|, exact reuse: max", f"{self.exact_max_logit_diff:.4f}"),
            ("same first token, affected", f"{self.first_token_agree}/{compared}"),
            (
                f"same {self.greedy_tokens}-token greedy text, affected",
                f"{self.greedy_agree}/{compared}",
            ),
        ]


@dataclass(frozen=True)
class _Reply:
    logits: Logits
    greedy: list[int]


class _Replay:
    """The warm context's walk, and how much of its cache was computed without a shift."""

    def __init__(self, warm: LlamaContext, cache_reuse: int, greedy_tokens: int) -> None:
        self.warm = warm
        self.cache_reuse = cache_reuse
        self.greedy_tokens = greedy_tokens
        self.exact = 0  # the cache's first `exact` tokens were computed cold
        self.warm.truncate(0)

    def request(self, prompt: Sequence[int]) -> tuple[_Reply, int, bool]:
        """The reply, the tokens shifted, and whether the reply reused a shifted chunk."""
        shifted, affected = self.warm_up(prompt)
        reply = _reply(self.warm, prompt[-1], self.greedy_tokens)
        if not affected:
            self.exact = self.warm.n_past
        return reply, shifted, affected

    def warm_up(self, prompt: Sequence[int]) -> tuple[int, bool]:
        """Process all of `prompt` but its last token, as a warm-up (and every request) does;
        the tokens shifted, and whether the cache now holds a shifted chunk."""
        head = list(prompt[:-1])
        common = self.warm.common_prefix(head)
        shifted = self.warm.prefill(head, reuse_min=self.cache_reuse).shifted
        # recomputed tokens are exact after an exact prefix; after a shifted chunk they are not
        self.exact = min(self.exact, common)
        if self.exact == common and not shifted:
            self.exact = len(head)
        return shifted, self.exact < len(head)


def _reply(context: LlamaContext, last: int, n: int) -> _Reply:
    """The logits after `last` (decoded after the cache) and the greedy tokens that follow."""
    logits = context.decode([last], logits="last")[0]
    first, greedy = logits, []
    for _ in range(n):
        greedy.append(int(np.argmax(logits)))
        if len(greedy) < n:
            logits = context.decode(greedy[-1:], logits="last")[0]
    return _Reply(first, greedy)


def measure_reuse_numerics(
    runtime: Runtime,
    prompts: Sequence[Sequence[int]],
    *,
    cache_reuse: int = 256,
    greedy_tokens: int = 16,
    warm_ups: Collection[int] = (),
) -> ReuseNumerics:
    """Replay `prompts` in order through `runtime`'s target context with chunk reuse of
    `cache_reuse`, each against a cold prefill in a fresh context (see the module); the
    prompts at the indices `warm_ups` are processed only."""
    prompts = [list(p) for p in prompts]
    warm = runtime.models.target_context
    longest = max((len(p) for p in prompts), default=1)
    size = min(runtime.n_ctx, longest + greedy_tokens + 1)
    saved_cache, warm.reuse.cache = warm.reuse.cache, None
    diffs: list[float] = []
    exact_diffs: list[float] = [0.0]
    stds: list[float] = []
    shifted_requests = shifted_tokens = first_agree = greedy_agree = 0
    try:
        replay = _Replay(warm, cache_reuse, greedy_tokens)
        cold_context = LlamaContext(
            runtime.models.target_model, size, n_threads=warm.n_threads, piece=warm.piece
        )
        with cold_context as cold:
            for index, prompt in enumerate(prompts):
                if not prompt:
                    continue
                if index in warm_ups:
                    replay.warm_up(prompt)
                    continue
                reply, shifted, affected = replay.request(prompt)
                cold.truncate(0)
                cold.prefill(prompt[:-1])
                fresh = _reply(cold, prompt[-1], greedy_tokens)
                diff = float(np.max(np.abs(reply.logits - fresh.logits)))
                shifted_requests += shifted > 0
                shifted_tokens += shifted
                if not affected:
                    exact_diffs.append(diff)
                    continue
                diffs.append(diff)
                stds.append(float(np.std(fresh.logits)))
                first_agree += reply.greedy[:1] == fresh.greedy[:1]
                greedy_agree += reply.greedy == fresh.greedy
    finally:
        warm.reuse.cache = saved_cache
    return ReuseNumerics(
        requests=sum(1 for i, p in enumerate(prompts) if p and i not in warm_ups),
        shifted_requests=shifted_requests,
        affected_requests=len(diffs),
        shifted_tokens=shifted_tokens,
        max_logit_diff=max(diffs, default=0.0),
        median_logit_diff=float(np.median(diffs)) if diffs else 0.0,
        logit_std=float(np.median(stds)) if stds else 0.0,
        exact_max_logit_diff=max(exact_diffs),
        first_token_agree=first_agree,
        greedy_agree=greedy_agree,
        greedy_compared=len(diffs),
        greedy_tokens=greedy_tokens,
    )
