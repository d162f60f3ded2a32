"""The generation loop: one code path for plain and speculative decoding.

Invariant: the target's KV cache holds every token of `history` except the last ("pending")
one. Each step decodes `[pending] + draft` in one batch, lets `verify_draft` decide, and cuts
the cache back to what was accepted. Plain decoding is the same step with an empty draft, so
`off` and the speculative modes cannot drift apart. The first step is the exception that
proves it: the prompt's last token is decoded in the prompt's last batch (as llama-server
and llama-cpp-python do), so that step decodes only the draft and reads the pending token's
row from the prefill, on every path alike. A request's constraint masks every
position's logits (forbidden tokens -> -inf) before any acceptance rule or sampler sees them,
on that same path; drafts are cut or drafted under the same masks (`localspec.constraints`).
Under greedy decoding the batch's rounding
cannot change the answer either (`localspec.speculative.ties`): the draft is decoded in chunks that
the kernels compute exactly as one-token decoding, one token at a time where no batch width
is exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence

from localspec.constraints.constraint import Constraint
from localspec.constraints.guide import Guide
from localspec.errors import InvalidSettingsError, PromptTooLongError, UsageError
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.draft_model import DRAFT_SOURCE
from localspec.speculative.events import (
    Event,
    Finished,
    FinishReason,
    Paused,
    TextChunk,
    without_pauses,
)
from localspec.speculative.generation import (
    Begun,
    Generation,
    StepResult,
    budget_left,
    samplers,
)
from localspec.speculative.infill_sampler import InfillVocab
from localspec.speculative.mtp import MTP_SOURCE
from localspec.speculative.policy import (
    TARGET,
    DraftPolicy,
    DraftState,
    FixedDrafts,
    StepOutcome,
)
from localspec.speculative.prompt_work import prefill_request, process_prompt
from localspec.speculative.proposer import Draft, Proposer
from localspec.speculative.protocols import Logits, ModelContext, PrefillRecord, Vocabulary
from localspec.speculative.request import GenerationRequest, check_reuse
from localspec.speculative.settings import SpecMode, SpecSettings
from localspec.speculative.steptime import StepClock, step_kind
from localspec.speculative.tally import StatsTally
from localspec.speculative.textstream import TokenTextStream
from localspec.speculative.ties import TieGuard
from localspec.speculative.verify_step import verify_step

# SpecMode, SpecSettings, the request and the events live in modules of their own (a client
# of a server reads them without numpy) but belong here too
__all__ = [
    "Engine",
    "Event",
    "FinishReason",
    "Finished",
    "GenerationRequest",
    "SpecMode",
    "SpecSettings",
    "TextChunk",
]


class EngineTies:
    """`Engine.generate_pausable`'s default for `ties`: the engine's own guard."""


ENGINE_TIES = EngineTies()


class Engine:
    """Runs generations against one target context and optional proposers."""

    def __init__(
        self,
        target: ModelContext,
        vocabulary: Vocabulary,
        *,
        ngram: Proposer | None = None,
        draft: Proposer | None = None,
        auto: AutoDrafter | None = None,
        ties: TieGuard | None = None,
        guides: Callable[[Constraint], Guide] | None = None,
        cache_reuse: int = 0,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        """`ties` is the measured kernel noise that greedy verification guards against; without
        it the batch decides every position (output may then differ from plain decoding at
        near-ties, as llama.cpp's own speculation does). `guides` builds a request's
        constraint into its per-generation guide (`ConstraintCompiler.guide`). `cache_reuse`
        is the chunk reuse of requests that leave theirs to the engine (0: prefix only).
        `now` is the clock durations are measured on: a replay's context keeps a virtual
        one (`localspec.speculative.simulate`); prompt budgets are deadlines on it too."""
        self.target = target
        self.vocabulary = vocabulary
        self.infill = InfillVocab(vocabulary)  # the EOG set is built on a chain's first use
        self.ngram = ngram
        self.draft = draft
        self.auto = auto
        self.ties = ties
        self.guides = guides
        self.cache_reuse = cache_reuse
        self.now = now

    def policy(self, mode: SpecMode, ngram: Proposer | None = None) -> DraftPolicy:
        """The drafting policy of `mode`: auto's tuner, or a fixed mode's proposers in the
        order they are tried each step; `ngram` replaces the engine's n-gram proposer (a
        server's slot keeps one per sequence, its index over that sequence)."""
        if mode is SpecMode.AUTO:
            if self.auto is None:
                raise UsageError(
                    "speculation mode 'auto' needs a tuner "
                    "(Engine(auto=...); Runtime builds one from a calibration)"
                )
            return self.auto
        lookup = ngram or self.ngram
        table: dict[SpecMode, list[tuple[Proposer | None, bool]]] = {
            SpecMode.OFF: [],
            SpecMode.NGRAM: [(lookup, False)],
            SpecMode.DRAFT: [(self.draft, True)],
            SpecMode.HYBRID: [(lookup, False), (self.draft, True)],
        }
        wanted = table[mode]
        if any(p is None for p, _ in wanted):
            needs = {
                SpecMode.NGRAM: "an n-gram proposer (Engine(ngram=...))",
            }.get(mode, "a draft model (Engine(draft=...); Runtime loads RuntimeSettings.draft)")
            raise UsageError(f"speculation mode {mode.value!r} needs {needs}")
        return FixedDrafts(
            [(p, is_model) for p, is_model in wanted if p is not None],
            [lookup] if lookup is not None else [],
        )

    def generate(
        self,
        request: GenerationRequest,
        should_stop: Callable[[], bool] | None = None,
        *,
        policy: DraftPolicy | None = None,
        ties: TieGuard | EngineTies | None = ENGINE_TIES,
    ) -> Generator[Event, None, None]:
        """Yield a `TextChunk` per target step, then one `Finished` with the statistics.

        Closing the iterator early cancels the generation after the current step. A caller
        that wants the statistics of a cut-short generation passes `should_stop` instead: it
        is asked after every step, and True ends the generation with reason "cancelled".
        `policy` replaces the request's mode's (a recorded run's, replayed); `ties` the
        engine's tie guard (a runtime's per request: sampling has none).
        """
        yield from without_pauses(
            self.generate_pausable(request, should_stop, policy=policy, ties=ties)
        )

    def generate_pausable(
        self,
        request: GenerationRequest,
        should_stop: Callable[[], bool] | None = None,
        *,
        policy: DraftPolicy | None = None,
        ties: TieGuard | EngineTies | None = ENGINE_TIES,
        pause: Callable[[], bool] | None = None,
    ) -> Generator[Event | Paused, None, None]:
        """`generate`, whose prompt processing stops between or within llama.cpp calls
        whenever `pause` says so (a server's worker: an editor's request waits) and yields
        `Paused`; the next `next()` goes on where it stopped, with the calls it would have
        decoded anyway, so a paused generation's answer is the one it gives unpaused. Between
        two events the caller may run other generations, provided the context holds this
        one's cache again (`localspec.server.slots`) before it asks for the next."""
        chosen = policy or self.policy(request.spec.mode)
        guard = self.ties if isinstance(ties, EngineTies) else ties
        begun = self._begin(request)
        head = self._prefill(request, begun.tally, begun.started, pause)
        while isinstance(head, Paused):
            yield head
            head = self._prefill(request, begun.tally, begun.started, pause, resumed=True)
        if head is None:  # the prompt budget ran out first
            tally = begun.tally
            tally.prefill_s = self.now() - begun.started
            yield Finished("", [], "prompt_time", tally.freeze("prompt_time", tally.prefill_s))
            return
        gen = self._start(request, chosen, guard, begun, head)
        finish: FinishReason | None = None
        while finish is None:
            finish = self._ends(gen, should_stop)
            if finish is not None:
                break
            step = self.step(gen)
            finish = step.finish
            if step.chunk is not None:
                yield step.chunk
        yield from self._finish(gen, finish)

    def _begin(self, request: GenerationRequest) -> Begun:
        """Check the request and build its constraint's guide, before any prompt work."""
        prompt = request.prompt
        if not prompt:
            raise UsageError("the prompt is empty: give some text to continue")
        if len(prompt) >= self.target.n_ctx:
            raise PromptTooLongError(len(prompt), self.target.n_ctx)
        if request.max_tokens < 1:
            raise InvalidSettingsError("max_tokens must be at least 1")
        check_reuse(request)
        guide = self._guide(request.constraint)
        tally = StatsTally(mode=request.spec.mode.value, prompt_tokens=len(prompt))
        return Begun(guide, tally, self.now())

    def _start(
        self,
        request: GenerationRequest,
        policy: DraftPolicy,
        ties: TieGuard | None,
        begun: Begun,
        head: Logits,
    ) -> Generation:
        """Start the policy on the processed prompt: the generation's first state."""
        prompt = list(request.prompt)
        policy.start(prompt, request.regions)
        tally = begun.tally
        tally.prefill_s = self.now() - begun.started
        target_sampler, draft_sampler = samplers(request.sampling, self.infill)
        return Generation(
            request,
            policy,
            begun.guide,
            target_sampler,
            draft_sampler,
            tally,
            TokenTextStream(request.stop),
            prompt,
            head,
            begun.started,
            begun.started + tally.prefill_s,
            ties,
        )

    def _ends(self, gen: Generation, should_stop: Callable[[], bool] | None) -> FinishReason | None:
        """Why the generation ends before its next step, if it does."""
        if gen.tally.generated_tokens >= gen.request.max_tokens:
            return "length"
        if len(gen.history) > self.target.n_ctx:
            return "context"
        if should_stop is not None and should_stop():
            return "cancelled"
        return None

    def step(self, gen: Generation) -> StepResult:
        """One target step: the policy proposes, the target verifies `[pending] + draft` in
        one batch, the accepted tokens are committed (to the cache, the history, the
        constraint, the text) and the policy observes the outcome."""
        request, tally, clock = gen.request, gen.tally, StepClock()
        started = self.now()
        remaining = request.max_tokens - tally.generated_tokens
        # decoding [pending] + draft must fit the context; each step emits len(draft) + 1
        max_draft = min(remaining - 1, self.target.n_ctx - len(gen.history), budget_left(gen))
        state = DraftState(
            gen.history, max_draft, request.spec, gen.draft_sampler, gen.guide, remaining
        )
        proposal = gen.policy.propose(state)
        draft = proposal.draft
        model_draft = draft.source in (DRAFT_SOURCE, MTP_SOURCE)
        clock.lap("pricing")
        clock.take("draft_model" if model_draft else "lookup", int(draft.seconds * 1e9), "pricing")
        priced = self.now()
        tally.draft_s += draft.seconds
        tally.draft_cut += draft.cut
        verify_before = tally.verify_s
        verdict, decoded = verify_step(self.target, gen, draft, clock, self.now)
        # the first step decodes the draft without its pending token: not the batch the
        # tuner priced, so its time teaches the cost model nothing
        timed, gen.head = gen.head is None, None
        emitted, text, finish = self._emit(verdict.tokens, gen)
        clock.lap("emit")
        tally.record_step(draft.source, len(draft), verdict.accepted)
        decode_s = tally.verify_s - verify_before
        learning = self.now()
        verify_s = decode_s if timed else 0.0
        gen.policy.observe(StepOutcome(proposal, verdict, verify_s, tuple(decoded), gen.history))
        if proposal.choice is not None:
            tally.record_choice(proposal.choice.label, proposal.choice.predicted_tokens_per_s)
        clock.lap("learning")
        learned = self.now()
        chunk = self._chunk(gen, emitted, text, draft, verdict.accepted)
        clock.lap("emit")
        ended = self.now()
        # plain decoding would have verified and emitted as this step did, without pricing,
        # drafting or learning: what a step that drafted nothing says of plain decoding
        plain_s = ended - priced - (learned - learning)
        tally.record_timing(len(draft), decoded, decode_s, ended - started, plain_s)
        gen.profile.add(step_kind(len(draft), model_draft), clock)
        return StepResult(proposal, verdict, emitted, finish, chunk)

    def _chunk(
        self, gen: Generation, emitted: list[int], text: str, draft: Draft, accepted: int
    ) -> TextChunk | None:
        """The step's event (None when it produced nothing to show), timing the first token."""
        if emitted and gen.tally.ttft_s == 0.0:
            gen.tally.ttft_s = self.now() - gen.started
        if not emitted and not text:
            return None
        since = self.now() - gen.generating
        return TextChunk(
            text, emitted, draft.source, min(accepted, len(emitted)), len(draft), since
        )

    def _finish(self, gen: Generation, finish: FinishReason) -> Iterator[Event]:
        """The tail of the text and the `Finished` event with the statistics, built here
        once and frozen."""
        guide = gen.guide
        tail = gen.stream.flush()
        stats = gen.tally.freeze(
            finish,
            self.now() - gen.started,
            stop_word=gen.stream.matched or "",
            step_profile=gen.profile.to_dict(),
            constraint=guide.kind if guide is not None else "",
            mask_s=guide.seconds if guide is not None else 0.0,
            masks=guide.masks if guide is not None else 0,
        )
        if gen.request.spec.learn:
            gen.policy.finish(gen.history)
        if tail:
            yield TextChunk(tail, [], TARGET, 0, generated_s=self.now() - gen.generating)
        output = gen.history[len(gen.request.prompt) :]
        yield Finished(gen.stream.text, output, finish, stats)

    def process_prompt(
        self,
        prompt: Sequence[int],
        *,
        cache_reuse: int | None,
        cache_prompt: bool,
        max_prompt_s: float | None,
        started: float,
    ) -> PrefillRecord:
        """Process `prompt` into the cache as an editor's warm-up does (`Runtime.cache_prompt`),
        with this reuse (None: the engine's default; see `prompt_work.process_prompt`),
        within the budget counted from `started`; returns what was reused."""
        prefilled, _ = process_prompt(
            self.target,
            prompt,
            reuse=self.cache_reuse if cache_reuse is None else cache_reuse,
            cache_prompt=cache_prompt,
            deadline=started + max_prompt_s if max_prompt_s else None,
        )
        return prefilled

    def _prefill(
        self,
        request: GenerationRequest,
        tally: StatsTally,
        started: float,
        pause: Callable[[], bool] | None = None,
        *,
        resumed: bool = False,
    ) -> Logits | Paused | None:
        """The request's prompt processed (`prompt_work.prefill_request`)."""
        reuse = self.cache_reuse if request.cache_reuse is None else request.cache_reuse
        return prefill_request(
            self.target,
            request,
            tally,
            reuse=reuse,
            started=started,
            now=self.now,
            pause=pause,
            resumed=resumed,
        )

    def _guide(self, constraint: Constraint | None) -> Guide | None:
        """The generation's constraint guide; its errors were the caller's to check first
        (`Runtime.check_constraint`), and are raised here otherwise, before any work."""
        if constraint is None:
            return None
        if self.guides is None:
            raise UsageError("constrained generation needs Engine(guides=...); Runtime sets it")
        return self.guides(constraint)

    def _emit(
        self, tokens: list[int], gen: Generation
    ) -> tuple[list[int], str, FinishReason | None]:
        """Append verified tokens to the history until EOS, a stop string or max_tokens, and
        commit them to the constraint.

        Returns the tokens appended, the text they completed, and why generation ends (None
        when it goes on). Under a constraint an end token always ends: the constraint allows
        one only where the output is complete, and a complete constraint ends it too.
        """
        request, tally = gen.request, gen.tally
        emitted: list[int] = []
        parts: list[str] = []
        finish: FinishReason | None = None
        ends = not request.ignore_eos or request.constraint is not None
        for token in tokens:
            if ends and self.vocabulary.is_end_of_generation(token):
                finish = "stop"
                break
            gen.history.append(token)
            emitted.append(token)
            tally.generated_tokens += 1
            text, stopped = gen.stream.push(self.vocabulary.piece(token))
            parts.append(text)
            if stopped:
                finish = "stop"
                break
            if tally.generated_tokens >= request.max_tokens:
                finish = "length"
                break
        if gen.guide is not None:
            gen.guide.commit(emitted)
            if gen.guide.stopped and finish in (None, "length"):
                finish = "stop"  # the constraint is complete: nothing else may follow
        return emitted, "".join(parts), finish
