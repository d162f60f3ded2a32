"""Loaded models wired to the engine: the one generation API every surface calls.

`Runtime` owns the target model and context, the n-gram proposer with its session cache, and
the draft model, loaded lazily on the first request that may use it (a draft that is never
used costs no memory). Surfaces build a `GenerationRequest` and iterate `generate`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from localspec.chat_template import render_chat, template_messages
from localspec.constraints.compile import ConstraintCompiler, TokenTable
from localspec.constraints.constraint import Constraint
from localspec.constraints.guide import Guide
from localspec.constraints.limits import ConstraintLimits
from localspec.errors import PromptTooLongError, UsageError
from localspec.fim import ExtraChunk, InfillPrompt, infill_prompt, supports_fim
from localspec.lifetime import Closing
from localspec.llama.context import LlamaContext
from localspec.llama.devices import flash_attention
from localspec.llama.model import LlamaModel, ModelSettings, ensure_same_vocabulary
from localspec.llama.prompt_cache import limit_bytes
from localspec.llama.prompt_store import DEFAULT_MIN_TOKENS, PromptStore, store_folder
from localspec.llama.vocab import end_of_generation_tokens, token_bytes, tokenize_bytes
from localspec.paths import PrivatePathError, cache_dir, private_folder
from localspec.speculative.auto import AutoDrafter
from localspec.speculative.costs import LiveCosts
from localspec.speculative.draft_model import DraftModelProposer
from localspec.speculative.engine import Engine, Event, GenerationRequest, SpecMode
from localspec.speculative.ngram import NGramCache, NGramProposer
from localspec.speculative.proposer import Proposer
from localspec.speculative.ties import TieGuard
from localspec.speculative.tuner import HardwareProfile, Tuner
from localspec.tools.calls import ToolCall
from localspec.tuning import (
    TunerStore,
    calibration_key,
    measure_catchup,
    measure_draft,
    measure_tie_noise,
    measure_verify,
    pair_key,
)

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeSettings:
    """Which models to run and how (GPU layers are set per model: drafts often fit entirely)."""

    target: Path
    draft: Path | None = None
    n_ctx: int = 4096
    n_threads: int | None = None
    target_gpu_layers: int = -1
    draft_gpu_layers: int = -1
    use_mmap: bool = False
    ngram_cache: bool = True
    tune_k_max: int = 8  # longest draft the auto-tuner considers (calibrates k_max + 1 batches)
    # the shortest cached chunk a new prompt reuses by shifting it into place rather than
    # recomputing it (llama-server's --cache-reuse; 0: the common prefix only); requests may
    # ask for their own (`GenerationRequest.cache_reuse`)
    cache_reuse: int = 256
    # host memory for the target's prompt cache, KV states of earlier prompts a later request
    # restores instead of reprocessing (llama-server's --cache-ram; 0: off). Not its 8192: on
    # a single-user laptop 1024 MiB holds ~35k tokens of the default 1.5B target's states
    # (28 KB a token), a few files or conversations to come back to, and the models, editor
    # and browser need the rest; capped at a quarter of RAM (`prompt_cache.limit_bytes`)
    cache_ram_mib: int = 1024
    # llama-server's -fa: "on", "off", or "auto": off where the model runs on the CPU with a
    # long context, where the CPU's flash-attention kernel is the slower path
    # (`localspec.llama.devices.flash_attention`); elsewhere llama.cpp's choice
    flash_attn: str = "auto"
    # disk for the target's states of long prompts (an agent's system prompt and tools), so a
    # restarted process does not process them again (`localspec.llama.prompt_store`; 0: off)
    cache_disk_mib: int = 0
    cache_disk_min_tokens: int = DEFAULT_MIN_TOKENS
    # how large a grammar or schema may be (`serve --max-grammar-bytes` and its siblings)
    constraint_limits: ConstraintLimits = field(default_factory=ConstraintLimits)


@dataclass(frozen=True)
class Message:
    """One turn of a conversation. `tool_calls`: the calls an assistant's turn made;
    `tool_call_id`: which call a `tool` turn (`content`: the call's result) answers."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


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


def _prompt_store(settings: RuntimeSettings, flash_attn: bool | None) -> PromptStore | None:
    """The target's on-disk prompt states (`cache_disk_mib` 0: none), in the cache folder."""
    if settings.cache_disk_mib <= 0:
        return None
    folder = store_folder(private_folder(cache_dir() / "prompts"), settings.target, flash_attn)
    return PromptStore(folder, settings.cache_disk_mib * 2**20, settings.cache_disk_min_tokens)


def tuner_route(request: GenerationRequest) -> str:
    """What the tuner learns acceptance under: the route, and the constraint's kind if any
    ("complete+json_schema"): a constraint changes what drafts are worth, so `auto` can
    draft freely on one and fall back to plain decoding on another."""
    constraint = request.constraint
    return request.route if constraint is None else f"{request.route}+{constraint.kind}"


class Runtime(Closing):
    """A warm target (and optional draft) ready to generate."""

    def __init__(
        self, settings: RuntimeSettings, notify: Callable[[str], None] | None = None
    ) -> None:
        """`notify` receives one-line notices of slow one-time work (calibration) for the user."""
        self.settings = settings
        self._notify = notify or (lambda _message: None)
        self.target_model = LlamaModel(
            settings.target, ModelSettings(settings.target_gpu_layers, settings.use_mmap)
        )
        try:
            flash_attn = flash_attention(
                settings.flash_attn, self.target_model, settings.target_gpu_layers, settings.n_ctx
            )
            self.target_context = LlamaContext(
                self.target_model,
                settings.n_ctx,
                n_threads=settings.n_threads,
                prompt_cache_bytes=limit_bytes(settings.cache_ram_mib),
                flash_attn=flash_attn,
                prompt_store=_prompt_store(settings, flash_attn),
            )
        except BaseException:
            self.target_model.close()
            raise
        self.ngram = NGramProposer(
            n_min=2, n_max=12, cache=NGramCache() if settings.ngram_cache else None
        )
        self.engine = Engine(
            self.target_context,
            self.target_model,
            ngram=self.ngram,
            guides=self._guide,
            cache_reuse=settings.cache_reuse,
        )
        self._compiler: ConstraintCompiler | None = None
        self.draft_model: LlamaModel | None = None
        self.draft_context: LlamaContext | None = None
        self._store = TunerStore()
        self._profile: HardwareProfile | None = None
        self._tuners: dict[str, Tuner] = {}
        self._costs: LiveCosts | None = None  # one machine: every route's tuner shares them

    @property
    def n_ctx(self) -> int:
        return self.target_context.n_ctx

    def load_draft(self) -> None:
        """Load the draft model now (idempotent); refuses a draft with another vocabulary."""
        if self.draft_context is not None:
            return
        if self.settings.draft is None:
            raise UsageError(
                "this speculation mode needs a draft model: give RuntimeSettings(draft=PATH) "
                "(--draft MODEL on the command line), or use SpecSettings(mode='auto'), "
                "'ngram' or 'off', which need none"
            )
        model = LlamaModel(
            self.settings.draft,
            ModelSettings(self.settings.draft_gpu_layers, self.settings.use_mmap),
        )
        try:
            ensure_same_vocabulary(self.target_model, model)
            flash_attn = flash_attention(
                self.settings.flash_attn, model, self.settings.draft_gpu_layers, self.settings.n_ctx
            )
            context = LlamaContext(
                model, self.settings.n_ctx, n_threads=self.settings.n_threads, flash_attn=flash_attn
            )
        except BaseException:
            model.close()
            raise
        self.draft_model, self.draft_context = model, context
        self.engine.draft = DraftModelProposer(context, self.settings.cache_reuse)
        _log.debug("draft model %s loaded", model.path)

    def _unload_draft(self) -> None:
        for closable in (self.draft_context, self.draft_model):
            if closable is not None:
                closable.close()
        self.draft_model = self.draft_context = self.engine.draft = None

    def _draft_proposer(self) -> Proposer:
        self.load_draft()
        assert self.engine.draft is not None
        return self.engine.draft

    # -- auto mode ------------------------------------------------------------------------
    def hardware_profile(self, *, recalibrate: bool = False) -> HardwareProfile:
        """This machine's costs for these models, measured once and then read from the cache.

        Measuring the draft needs it loaded; when even a perfectly accepted draft could not
        beat plain decoding here, it is unloaded again and later runs never load it.
        """
        if self._profile is not None and not recalibrate:
            return self._profile
        settings = self.settings
        key = self._calibration_key()
        profile = None if recalibrate else self._store.profile(key)
        if profile is None:
            self._notify(
                "measuring this machine for speculation (once per model pair and setting; cached)"
            )
            verify = measure_verify(self.target_context, settings.tune_k_max)
            tie_noise = measure_tie_noise(self.target_context, settings.tune_k_max)
            draft_s = catchup_s = None
            was_loaded = self.draft_context is not None
            if settings.draft is not None:
                self.load_draft()
                assert self.draft_context is not None
                draft_s = measure_draft(self.draft_context)
                catchup_s = measure_catchup(self.draft_context)
            profile = HardwareProfile(verify, draft_s, tie_noise, catchup_s)
            never_pays = not profile.draft_can_ever_pay(settings.tune_k_max)
            if draft_s is not None and not was_loaded and never_pays:
                self._unload_draft()
            self._store.save_profile(key, profile)
            # what was learned was measured against the old calibration
            self._store.forget_costs(key)
            self._costs = None
            for tuner in self._tuners.values():
                tuner.costs = LiveCosts(catchup_s=tuner.calibrated_catchup_s)
        self._profile = profile
        return profile

    def _calibration_key(self) -> str:
        """What this machine's calibration and measured costs are kept under: the models,
        threads, offload and k_max they were measured with."""
        settings = self.settings
        return calibration_key(
            settings.target,
            settings.draft,
            self.target_context.n_threads,
            (settings.target_gpu_layers, settings.draft_gpu_layers),
            settings.tune_k_max,
            flash_attn=settings.flash_attn,
        )

    def _auto_for(self, route: str) -> AutoDrafter:
        profile = self.hardware_profile()
        tuner = self._tuners.get(route)
        if tuner is None:
            acceptance = self._store.acceptance(self._acceptance_key(route))
            # AutoDrafter scores every n-gram lookup it does not draft, so no n-gram exploration
            tuner = Tuner(profile, acceptance, k_max=self.settings.tune_k_max, explore_ngram=False)
            if self._costs is None:
                saved = self._store.costs(self._calibration_key(), tuner.calibrated_catchup_s)
                self._costs = saved or tuner.costs
            tuner.costs = self._costs
            self._tuners[route] = tuner
        usable = self.settings.draft is not None and profile.draft_can_ever_pay(tuner.k_max)
        loader = self._draft_proposer if usable else None
        return AutoDrafter(tuner, self.ngram, loader, lambda: self.draft_context is not None)

    def _acceptance_key(self, route: str) -> str:
        return f"{pair_key(self.settings.target, self.settings.draft)}/{route}"

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
            self._compiler = constraint_compiler(self.target_model, limits)
        return self._compiler

    def _guide(self, constraint: Constraint) -> Guide:
        return self._constraints().guide(constraint)

    # -- prompts --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Raw text to tokens, with the model's BOS where it wants one."""
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def chat_prompt(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        """Render `messages` (and `tools`, OpenAI's function definitions) with the GGUF's own
        chat template and tokenize the result."""
        model = self.target_model
        text = self._render_chat(messages, tools)
        # templates that write the BOS themselves must not get a second one from the tokenizer
        add_bos = not (model.add_bos and text.startswith(model.token_text(model.bos)))
        return model.tokenize(text, add_special=add_bos, parse_special=True)

    def chat_text(self, messages: Sequence[Message]) -> str:
        """The rendered conversation without the BOS the tokenizer adds, as llama-server's
        `/apply-template` gives it: tokenized with the BOS, it is `chat_prompt`'s tokens."""
        model = self.target_model
        text = self._render_chat(messages)
        bos = model.token_text(model.bos)
        return text.removeprefix(bos) if model.add_bos else text

    def _render_chat(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> str:
        template = self.target_model.chat_template
        if not template:
            raise UsageError(
                f"{self.target_model.path.name} has no chat template: use --raw to send the "
                f"prompt as plain text"
            )
        model = self.target_model
        return render_chat(
            template,
            template_messages(messages),
            model=model.path.name,
            bos=model.token_text(model.bos),
            eos=model.token_text(model.eos),
            tools=tools,
        )

    def infill_prompt(
        self,
        prefix: str,
        suffix: str,
        *,
        prompt: str = "",
        extra: Sequence[ExtraChunk] = (),
        max_tokens: int = 256,
        filename: str = "",
    ) -> InfillPrompt:
        """A fill-in-the-middle prompt (see `localspec.fim`) leaving room for `max_tokens`.

        Room for at most half the context is reserved, so a large `max_tokens` cannot push
        out a prompt that fits; generation then stops when the context is full.
        """
        reserve = max(1, min(max_tokens, self.n_ctx // 2))
        return infill_prompt(
            self.target_model,
            prefix,
            suffix,
            prompt=prompt,
            extra=extra,
            budget=self.n_ctx - reserve,
            filename=filename,
        )

    @property
    def supports_fim(self) -> bool:
        return supports_fim(self.target_model)

    # -- generation -----------------------------------------------------------------------
    def cache_prompt(
        self,
        prompt: Sequence[int],
        *,
        cache_reuse: int | None = None,
        cache_prompt: bool = True,
        max_prompt_s: float | None = None,
    ) -> int:
        """Process `prompt` into the KV cache without generating (editors' warm-up requests).

        Returns how many tokens were reused (the common prefix and shifted chunks, as
        `GenerationRequest`'s fields of the same names decide; `target_context.last_shifted`
        says how many were shifted). The last token is left pending, as a generation would
        leave it, so the next request with this prefix reuses all of it. With `max_prompt_s`
        the cache may hold only a prefix of it (`target_context.n_past`) when the time is up.
        """
        if len(prompt) >= self.n_ctx:
            raise PromptTooLongError(len(prompt), self.n_ctx)
        reused, _ = self.engine.process_prompt(
            list(prompt),
            cache_reuse=cache_reuse,
            cache_prompt=cache_prompt,
            max_prompt_s=max_prompt_s,
            started=time.perf_counter(),
        )
        return reused

    def generate(
        self, request: GenerationRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        """Stream a generation (see `Engine.generate`); loads the draft model on first need.

        In auto mode the tuner for the request's route is used and what it learned is saved
        when the generation ends, however it ends: `should_stop`, the caller closing the
        stream early (Ctrl-C, a closed pipe, a client gone) or an error.
        """
        if request.constraint is not None:  # refused before a calibration or a prefill
            self.check_constraint(request.constraint)
        guard = self._tie_guard(request)
        self.engine.ties = guard
        auto = request.spec.mode is SpecMode.AUTO
        route = tuner_route(request)
        if auto:
            self.engine.auto = self._auto_for(route)
            self.engine.auto.tuner.verify_chunk = guard.chunk_width if guard else None
        elif request.spec.uses_draft_model:
            self.load_draft()
        try:
            yield from self.engine.generate(request, should_stop)
        finally:
            if auto:
                self._save_learned(route)

    def _tie_guard(self, request: GenerationRequest) -> TieGuard | None:
        """The measured kernel noise, for greedy speculation with tie re-decoding on (plain
        decoding never batches a verification; sampling keeps the batch's distribution)."""
        spec = request.spec
        if spec.mode is SpecMode.OFF or not spec.redecode_ties or not request.sampling.greedy:
            return None
        return TieGuard(self.hardware_profile().tie_noise)

    def _save_learned(self, route: str) -> None:
        """Persist the route's acceptance statistics and the measured costs; a failure costs
        only what was learned."""
        tuner = self._tuners[route]
        try:
            self._store.save_acceptance(self._acceptance_key(route), tuner.acceptance)
            self._store.save_costs(self._calibration_key(), tuner.costs)
        except (OSError, PrivatePathError) as exc:
            _log.warning(
                "could not save the tuner's statistics to %s: %s",
                self._store.acceptance_file,
                (exc.strerror if isinstance(exc, OSError) else None) or exc,
            )

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        self._unload_draft()
        self.target_context.close()
        self.target_model.close()
