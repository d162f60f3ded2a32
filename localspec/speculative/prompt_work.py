"""A request's prompt into the target's cache: reuse, its budget, and pauses.

What the engine does before its first step, apart from the steps: the prompt is processed
with the reuse the request asks for, within its time budget (`t_max_prompt_ms`: the
generation ends with "prompt_time" and the cache keeps what was processed), and, for a
server's worker, stops between two of its llama.cpp calls when more urgent work waits
(`Paused`; going on decodes the calls it would have decoded anyway, `localspec.llama.pieces`).
The statistics record what was reused the first time only: what a paused prompt processed
before its pause is its own work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from localspec.speculative.events import Paused
from localspec.speculative.protocols import Logits, ModelContext, PrefillRecord
from localspec.speculative.request import GenerationRequest
from localspec.speculative.tally import StatsTally


def process_prompt(
    target: ModelContext,
    prompt: Sequence[int],
    *,
    reuse: int,
    cache_prompt: bool,
    deadline: float | None,
    generating: bool = False,
    interrupt: Callable[[], bool] | None = None,
    resumed: bool = False,
) -> tuple[PrefillRecord, Logits | None]:
    """Process `prompt` reusing chunks of at least `reuse` tokens (`cache_prompt` False:
    nothing at all), until `deadline`; returns what was reused. A warm-up leaves the last
    token pending, as a finished generation leaves its own, so a request repeating the
    prompt decodes one token; a `generating` caller gets the logits after the last token too
    (None if the deadline or `interrupt` cut the prompt short). `resumed` goes on with a
    prompt an interrupt cut: what it processed stays, and nothing else is reused. The cut
    prompt's reuse was settled before its first piece: a chunk shifted in or a state restored
    only now (another slot's parked tokens may hold one) would make its answer differ from an
    uncut prompt's."""
    if not cache_prompt and not resumed:
        target.truncate(0)
    restore = cache_prompt and not resumed
    if not restore:
        reuse = 0
    if generating:
        return target.prefill_logits(
            prompt, reuse_min=reuse, deadline=deadline, restore=restore, interrupt=interrupt
        )
    prefilled = target.prefill(prompt[:-1], reuse_min=reuse, deadline=deadline, restore=restore)
    return prefilled, None


def prefill_request(
    target: ModelContext,
    request: GenerationRequest,
    tally: StatsTally,
    *,
    reuse: int,
    started: float,
    now: Callable[[], float],
    pause: Callable[[], bool] | None = None,
    resumed: bool = False,
) -> Logits | Paused | None:
    """Process `request`'s prompt (`reuse`: its chunk reuse, the engine's default resolved)
    within its budget counted from `started` on the `now` clock; returns the logits the
    first token is chosen from, `Paused` when `pause` stopped it, or None when the budget
    cut it (recorded in `tally`)."""
    budget = request.max_prompt_s
    prefilled, head = process_prompt(
        target,
        request.prompt,
        reuse=reuse,
        cache_prompt=request.cache_prompt,
        deadline=started + budget if budget else None,
        generating=True,
        interrupt=pause,
        resumed=resumed,
    )
    if not resumed:
        tally.cached_tokens = prefilled.reused
        tally.shifted_tokens = prefilled.shifted
        tally.restored_tokens = prefilled.restored
    if head is not None:
        return head
    if pause is not None and not (budget and now() - started >= budget):
        return Paused(target.n_past, len(request.prompt))
    tally.prompt_cut = True
    tally.prompt_unprocessed = len(request.prompt) - target.n_past
    return None
