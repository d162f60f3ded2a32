"""Loaded models wired to the engine: the one generation API every surface calls.

`Runtime` composes the pieces a generation needs and runs it: the models
(`localspec.loading.Models`: the target, and the draft loaded on the first request that may
use it, so a draft that is never used costs no memory), the prompts for the target
(`localspec.prompting.Prompter`), `auto` mode's calibration and tuners
(`localspec.calibration`), the n-gram proposer with its session cache, and the engine.
Surfaces build a prompt with `prompts`, a `GenerationRequest`, and iterate `generate`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import replace

from localspec.calibration import Calibration
from localspec.constraints.compile import ConstraintCompiler, TokenTable
from localspec.constraints.constraint import Constraint
from localspec.constraints.guide import Guide
from localspec.constraints.limits import ConstraintLimits
from localspec.errors import PromptTooLongError
from localspec.lifetime import Closing
from localspec.llama.model import LlamaModel
from localspec.llama.vocab import end_of_generation_tokens, token_bytes, tokenize_bytes
from localspec.loading import HeldCaches, Models, RuntimeSettings, pair_label
from localspec.observe.drift import DriftWatch
from localspec.observe.guard import GuardSettings, LatencyGuard
from localspec.observe.history import History
from localspec.observe.plain import PlainReference
from localspec.observe.watch import Watch
from localspec.prompting import Prompter
from localspec.runtime_status import RuntimeStatus
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.engine import Engine, Event, GenerationRequest, SpecMode
from localspec.speculative.events import Finished, Paused, TextChunk, without_pauses
from localspec.speculative.mtp import MtpProposer
from localspec.speculative.ngram import NGramCache, NGramProposer
from localspec.speculative.policy import DraftPolicy
from localspec.speculative.protocols import PrefillRecord
from localspec.speculative.suffix import SuffixStore
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import HardwareProfile
from localspec.suffix_file import open_store


def constraint_compiler(
    model: LlamaModel, limits: ConstraintLimits | None = None
) -> ConstraintCompiler:
    """`model`'s vocabulary in the constraint library's terms (see `localspec.llama.vocab`)."""
    table = TokenTable(
        token_bytes(model),
        end_of_generation_tokens(model),
        lambda data: tokenize_bytes(model, data),
        model.bos if model.bos >= 0 else None,
    )
    return ConstraintCompiler(table, limits)


def tuner_route(request: GenerationRequest) -> str:
    """What the tuner learns acceptance under (see `route_key`)."""
    return route_key(request.route, request.constraint)


def route_key(route: str, constraint: Constraint | None) -> str:
    """The route, and the constraint's kind if any ("complete+json_schema"): a constraint
    changes what drafts are worth, so `auto` can draft freely on one and fall back to plain
    decoding on another."""
    return route if constraint is None else f"{route}+{constraint.kind}"


class Runtime(Closing):
    """A warm target (and optional draft) ready to generate."""

    def __init__(
        self, settings: RuntimeSettings, notify: Callable[[str], None] | None = None
    ) -> None:
        """`notify` receives one-line notices of slow one-time work (calibration) for the user."""
        self.settings = settings
        self.models = Models(settings, on_draft=self._draft_changed)
        target = self.models.target_context
        self.prompts = Prompter(self.models.target_model, target.n_ctx)
        self.status = RuntimeStatus(target)  # what the server reports of the context
        store = SuffixStore()
        if settings.suffix_store is not None:
            open_store(settings.suffix_store, store, n_vocab=self.models.target_model.n_vocab)
        self.ngram = NGramProposer(
            n_min=2,
            n_max=12,
            cache=NGramCache() if settings.ngram_cache else None,
            store=store,
        )
        self.engine = Engine(
            target,
            self.models.target_model,
            ngram=self.ngram,
            guides=self._guide,
            cache_reuse=settings.cache_reuse,
        )
        self.calibration = Calibration(self.models, self.ngram, notify or (lambda _message: None))
        self._compiler: ConstraintCompiler | None = None
        guard = LatencyGuard(settings.guard or GuardSettings(), acting=settings.guard is not None)
        # what every generation showed, for the guard, drift alarms, metrics and history
        plain = PlainReference(self._calibrated_verify_s)
        self.watch = Watch(pair_label(settings), guard=guard, drift=DriftWatch(), plain=plain)
        self._history = History.open(settings.history) if settings.history else None
        if self._history is not None:
            self._history.attach(self.watch)

    @property
    def n_ctx(self) -> int:
        return self.models.target_context.n_ctx

    def cached_sequence(self) -> Sequence[int]:
        """The tokens the target's KV cache holds, in order."""
        return self.models.target_context.tokens

    def hold_caches(self) -> HeldCaches:
        """The caches in host memory, for another sequence to take the contexts (a server's
        slots, `localspec.server.slots`); `resume_caches` gives them back."""
        return self.models.hold()

    def resume_caches(self, held: HeldCaches) -> None:
        """Make the caches `held`'s (an empty `HeldCaches()`: empty caches)."""
        self.models.resume(held)

    def load_draft(self) -> None:
        """Load the draft model now (idempotent); refuses a draft with another vocabulary."""
        self.models.load_draft()

    def _draft_changed(self, draft: DraftModelProposer | MtpProposer | None) -> None:
        """The engine drafts with the models' draft while it is loaded."""
        self.engine.draft = draft

    def hardware_profile(self, *, recalibrate: bool = False) -> HardwareProfile:
        """This machine's costs for these models (see `Calibration.hardware_profile`)."""
        return self.calibration.hardware_profile(recalibrate=recalibrate)

    def _calibrated_verify_s(self) -> tuple[float, ...] | None:
        """The calibration's seconds to decode b tokens (at b - 1), if there is one."""
        profile = self.calibration.known_profile()
        return profile.verify_s if profile is not None else None

    def _auto_for(self, route: str, ngram: NGramProposer | None = None) -> AutoDrafter:
        return self.calibration.auto_for(route, ngram)

    def _save_learned(self, route: str) -> None:
        self.calibration.save_learned(route)

    # -- constraints ------------------------------------------------------------------------
    def check_constraint(self, constraint: Constraint) -> None:
        """Compile `constraint` for this model now; raises `ConstraintError` (the library's
        message and where it failed) so surfaces can refuse a request before generating."""
        self._constraints().check(constraint)

    def _constraints(self) -> ConstraintCompiler:
        """The target's vocabulary in the constraint library's terms, built on first use
        (about a second for a 152k vocabulary) and kept for the model's lifetime."""
        if self._compiler is None:
            limits = self.settings.constraint_limits
            self._compiler = constraint_compiler(self.models.target_model, limits)
        return self._compiler

    def _guide(self, constraint: Constraint) -> Guide:
        return self._constraints().guide(constraint)

    # -- generation -----------------------------------------------------------------------
    def cache_prompt(
        self,
        prompt: Sequence[int],
        *,
        cache_reuse: int | None = None,
        cache_prompt: bool = True,
        max_prompt_s: float | None = None,
    ) -> PrefillRecord:
        """Process `prompt` into the KV cache without generating (editors' warm-up requests).

        Returns what was reused: the common prefix and shifted chunks, as
        `GenerationRequest`'s fields of the same names decide, and of them the shifted and
        restored tokens. The last token is left pending, as a generation would leave it, so
        the next request with this prefix reuses all of it. With `max_prompt_s` the cache may
        hold only a prefix of it (`status.cached_tokens`) when the time is up.
        """
        if len(prompt) >= self.n_ctx:
            raise PromptTooLongError(len(prompt), self.n_ctx)
        return self.engine.process_prompt(
            list(prompt),
            cache_reuse=cache_reuse,
            cache_prompt=cache_prompt,
            max_prompt_s=max_prompt_s,
            started=time.perf_counter(),
        )

    def generate(
        self, request: GenerationRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        """Stream a generation (see `Engine.generate`); loads the draft model on first need.

        In auto mode the tuner for the request's route is used and what it learned is saved
        when the generation ends, however it ends: `should_stop`, the caller closing the
        stream early (Ctrl-C, a closed pipe, a client gone) or an error.
        """
        yield from without_pauses(self.generate_pausable(request, should_stop))

    def generate_pausable(
        self,
        request: GenerationRequest,
        should_stop: Callable[[], bool] | None = None,
        *,
        pause: Callable[[], bool] | None = None,
        ngram: NGramProposer | None = None,
        queued_s: float = 0.0,
        interruptions: Callable[[], int] = lambda: 0,
        slot: int = 0,
    ) -> Generator[Event | Paused, None, None]:
        """`generate` for a server's slots (`localspec.server.slots`): prompt processing stops
        between or within llama.cpp calls where `pause` says so (see
        `Engine.generate_pausable`), and `ngram` is the slot's own n-gram proposer. Everything
        the generation depends on is its own from here on (policy, tie guard), so generations
        may take turns on the context. `queued_s` is how long the request waited for its turn
        and `interruptions` how often an editor's request has run while it waited (a server's
        slots), for the watchers (`self.watch`) and the statistics, which also name the `slot`
        it ran in.

        A route the guard has put on plain decoding runs plain (the answer is the same: plain
        decoding is what speculation must equal), and its statistics say why (`guard`)."""
        if request.constraint is not None:  # refused before a calibration or a prefill
            self.check_constraint(request.constraint)
        asked = request.spec.mode
        forced = self.watch.forced_plain(request.route) if asked is not SpecMode.OFF else ""
        if forced:
            request = replace(request, spec=replace(request.spec, mode=SpecMode.OFF))
        chunk_times: list[float] = []
        for event in self._run(request, should_stop, pause=pause, ngram=ngram):
            if isinstance(event, TextChunk) and event.text:
                chunk_times.append(event.generated_s)
            if not isinstance(event, Finished):
                yield event
                continue
            # the engine's record is frozen: completed in a new one before anyone sees it
            stats = replace(event.stats, guard=forced, interruptions=interruptions(), slot=slot)
            self.watch.finish(
                stats,
                route=request.route,
                mode=asked.value,
                chunk_times=chunk_times,
                queue_s=queued_s,
                forced=forced,
            )
            yield replace(event, stats=stats)

    def _run(
        self,
        request: GenerationRequest,
        should_stop: Callable[[], bool] | None,
        *,
        pause: Callable[[], bool] | None,
        ngram: NGramProposer | None,
    ) -> Generator[Event | Paused, None, None]:
        guard = self._tie_guard(request)
        auto = request.spec.mode is SpecMode.AUTO
        route = tuner_route(request)
        policy: DraftPolicy
        if auto:
            drafter = self._auto_for(route, ngram)
            drafter.verifies_with(guard)
            policy = drafter
        else:
            if request.spec.uses_draft_model:
                self.load_draft()
            policy = self.engine.policy(request.spec.mode, ngram)
        try:
            yield from self.engine.generate_pausable(
                request, should_stop, policy=policy, ties=guard, pause=pause
            )
        finally:
            if auto:
                self._save_learned(route)

    def _tie_guard(self, request: GenerationRequest) -> TieGuard | None:
        """Greedy verification's exact width from the measured kernel noise (plain decoding
        never batches a verification; sampling keeps the batch's distribution; a profile
        given without noise, as `whatif`'s assumed ones are, has no width to go by)."""
        spec = request.spec
        if spec.mode is SpecMode.OFF or not spec.redecode_ties or not request.sampling.greedy:
            return None
        noise = self.hardware_profile().tie_noise
        return TieGuard(noise) if noise else None

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        try:
            self.models.close()
        finally:
            if self._history is not None:
                self._history.close()
