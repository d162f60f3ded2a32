"""A step's verification: decode `[pending] + draft`, accept, roll the cache back.

The engine's loop (`Engine.step`) proposes and commits; this decides, greedy drafts in the
exact-width chunks of `localspec.speculative.ties`.
"""

from __future__ import annotations

from collections.abc import Callable

from localspec.speculative.acceptance_rule import Probs, Verdict, verify_draft
from localspec.speculative.generation import Generation
from localspec.speculative.proposer import Draft
from localspec.speculative.protocols import Logits, ModelContext
from localspec.speculative.steptime import StepClock
from localspec.speculative.ties import TieGuard


def _guard(gen: Generation) -> TieGuard | None:
    """The tie guard greedy verification applies (none for sampling, or where turned off)."""
    greedy = gen.target_sampler.settings.greedy
    return gen.ties if greedy and gen.request.spec.redecode_ties else None


def _plan(
    gen: Generation, draft: Draft, guard: TieGuard | None
) -> tuple[list[int], list[Logits], int]:
    """Verification's batch (`[pending] + draft`), the rows it starts with (the prefill's,
    on the first step) and the width it decodes at a time (exact-width chunks, or all)."""
    batch = [gen.history[-1], *draft.tokens]
    rows: list[Logits] = [] if gen.head is None else [gen.head]
    decoding = len(batch) - len(rows)
    width = guard.chunk(decoding) if guard is not None and decoding else max(decoding, 1)
    return batch, rows, width


def verify_step(
    target: ModelContext,
    gen: Generation,
    draft: Draft,
    clock: StepClock,
    now: Callable[[], float],
) -> tuple[Verdict, list[int]]:
    """Decode `[pending] + draft`, accept, and roll the cache back; also returns the sizes
    of the decodes it made (one batch, or the exact-width chunks it needed). Under a
    constraint each position's row is masked first.

    `head` is the pending token's row when the prefill already decoded it (the first
    step): only the draft is decoded then, and the row stands as plain decoding's own."""
    history, sampler, tally, guide = gen.history, gen.target_sampler, gen.tally, gen.guide
    settings = sampler.settings
    guard = _guard(gen)
    batch, rows, width = _plan(gen, draft, guard)
    sizes: list[int] = []
    # penalties only look at the last repeat_last_n tokens, so pass just those
    recent = history[-settings.repeat_last_n :] if settings.penalised else []
    started = now()
    spent = 0.0  # seconds in verification decodes, apart from the acceptance arithmetic
    timings = target.timings
    decode_ns, logits_ns = timings.decode_ns, timings.logits_ns

    def row(i: int) -> Logits:
        nonlocal spent
        while len(rows) <= i:
            before = now()
            chunk = batch[len(rows) : len(rows) + width]
            rows.extend(target.decode(chunk, logits="all"))
            sizes.append(len(chunk))
            spent += now() - before
        return rows[i]

    def constrain(logits: Logits, i: int) -> Logits:
        return logits if guide is None else guide.constrain(logits, draft.tokens[:i])

    def target_at(i: int) -> int | Probs:
        context = [*recent, *draft.tokens[:i]]
        masked = constrain(row(i), i)
        if not settings.greedy:
            return sampler.distribution(masked, context)
        return sampler.greedy_token(masked, context)

    verdict = verify_draft(draft, target_at, sampler.rng)
    target.truncate(len(history) + verdict.accepted)
    tally.verify_s += spent
    tally.sample_s += now() - started - spent
    clock.lap("acceptance")
    clock.take("llama_decode", timings.decode_ns - decode_ns, out_of="acceptance")
    clock.take("logits_copy", timings.logits_ns - logits_ns, "acceptance")
    return verdict, sizes
