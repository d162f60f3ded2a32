"""Loading the models a `Runtime` runs: the target with its context, and the draft on demand.

Loading is slow, fallible and owns native memory; generation only needs what it produced.
So the settings, the load (with flash attention and the prompt caches chosen for the
machine) and the draft's lazy load and unload live here, apart from the engine: the
runtime and the calibration (`localspec.calibration`) share one `Models`, and the engine
hears of the draft through `on_draft` rather than this module knowing the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.constraints.limits import ConstraintLimits
from localspec.errors import LocalspecError, UsageError
from localspec.lifetime import Closing
from localspec.llama.context import LlamaContext
from localspec.llama.devices import flash_attention, shared_piece
from localspec.llama.model import LlamaModel, ModelSettings, ensure_same_vocabulary
from localspec.llama.mtp import MtpHead
from localspec.llama.params import VALUE_CACHE_TYPES
from localspec.llama.pieces import MAX_PIECE, MIN_PIECE
from localspec.llama.prompt_cache import SavedState, limit_bytes
from localspec.llama.prompt_store import DEFAULT_MIN_TOKENS, PromptStore, store_folder
from localspec.model_digest import model_digest
from localspec.observe.guard import GuardSettings
from localspec.paths import cache_dir, private_folder
from localspec.speculative.draft_model import DRAFT_ROOM, DraftModelProposer, PairVocab
from localspec.speculative.mtp import MtpProposer

_log = logging.getLogger(__name__)

MIN_DRAFT_CTX = 2 * DRAFT_ROOM
"""The smallest draft context: a window of the text and room for the longest draft, each 64
tokens (`draft_model.window_start`); the calibration's catch-up probe (96 tokens) fits too."""


def check_draft_ctx(draft_n_ctx: int | None, n_ctx: int) -> None:
    """Refuse a draft context the draft cannot work in, or larger than the target's."""
    if draft_n_ctx is not None and not MIN_DRAFT_CTX <= draft_n_ctx <= n_ctx:
        raise UsageError(
            f"--draft-ctx-size must be between {MIN_DRAFT_CTX} and the target's --ctx-size "
            f"({n_ctx}), not {draft_n_ctx}: the draft needs room for a window of the text and "
            f"its longest draft, and never sees more than the target"
        )


@dataclass(frozen=True)
class RuntimeSettings:
    """Which models to run and how (GPU layers are set per model: drafts often fit entirely)."""

    target: Path
    draft: Path | None = None
    n_ctx: int = 4096
    # the draft's context in tokens (llama-server's --ctx-size-draft; None: the target's):
    # its KV memory is a budget, and a longer sequence is drafted from its last tokens
    draft_n_ctx: int | None = None
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
    # llama-server's --cache-type-v for the target: llama.cpp's "f16", or "bf16", with which
    # llama.cpp's CPU flash attention decoded batches of up to 3 tokens bit-identically to one
    # token in every probe, so greedy drafts are verified 3 at a time, not 1, for 5-8% slower
    # decoding and 15-35% slower prompts; no real long-prompt run yet (docs/exactness.md)
    cache_type_v: str = "f16"
    # disk for the target's states of long prompts (an agent's system prompt and tools), so a
    # restarted process does not process them again (`localspec.llama.prompt_store`; 0: off)
    cache_disk_mib: int = 0
    cache_disk_min_tokens: int = DEFAULT_MIN_TOKENS
    # how large a grammar or schema may be (`serve --max-grammar-bytes` and its siblings)
    constraint_limits: ConstraintLimits = field(default_factory=ConstraintLimits)
    # the p95 guard (`localspec.observe.guard`): a route whose speculation is slower than
    # plain decoding falls back for a while. None: off, as benchmarks comparing modes need
    guard: GuardSettings | None = None
    # the history file every generation is recorded in (`localspec stats`; None: none)
    history: Path | None = None
    # the file the suffix store (earlier requests' prompts and answers, for suffix drafts)
    # lives in across processes (`localspec.suffix_file`; None: in memory only)
    suffix_store: Path | None = None
    # draft with the target's own MTP (NextN) layers instead of a draft model: a GGUF that
    # carries them (`localspec models` says which); the draft modes use its head
    mtp: bool = False
    # the target's prompt tokens per llama_decode call (`--ubatch-size`;
    # `localspec.llama.pieces`): what a server throws away when it stops one for an editor's
    # request. None: the batch, and 128 on a CPU while editors' requests stop prompts
    ubatch: int | None = None

    def __post_init__(self) -> None:
        check_draft_ctx(self.draft_n_ctx, self.n_ctx)
        if self.ubatch is not None and not MIN_PIECE <= self.ubatch <= MAX_PIECE:
            raise UsageError(
                f"--ubatch-size must be between {MIN_PIECE} and {MAX_PIECE} prompt tokens, "
                f"not {self.ubatch}"
            )
        if self.cache_type_v not in VALUE_CACHE_TYPES:
            raise UsageError(
                f"--cache-type-v is one of {', '.join(VALUE_CACHE_TYPES)}, "
                f"not {self.cache_type_v!r}"
            )
        if self.mtp and self.draft is not None:
            raise UsageError(
                "MTP drafting uses the target's own MTP layers: give no draft model with it"
            )

    @property
    def draft_ctx_size(self) -> int:
        """The draft's context as asked: `draft_n_ctx`, else the target's `n_ctx`."""
        return self.n_ctx if self.draft_n_ctx is None else self.draft_n_ctx


def _prompt_store(settings: RuntimeSettings, flash_attn: bool | None) -> PromptStore | None:
    """The target's on-disk prompt states (`cache_disk_mib` 0: none), in the cache folder.
    A folder that cannot be ours (another user's, a file in its place) is one warning and no
    store: the states only spare work, and the server must start without them."""
    if settings.cache_disk_mib <= 0:
        return None
    try:
        base = private_folder(private_folder(cache_dir()) / "prompts")
        digest = model_digest(settings.target)
        folder = store_folder(base, digest, flash_attn, settings.cache_type_v)
        return PromptStore(folder, settings.cache_disk_mib * 2**20, settings.cache_disk_min_tokens)
    except (OSError, LocalspecError) as exc:
        _log.warning("prompt states are not kept on disk: %s", exc)
        return None


def pair_label(settings: RuntimeSettings) -> str:
    """The model pair as metrics and the history name it: the files' names."""
    draft = settings.draft
    if settings.mtp:
        return f"{settings.target.stem}+mtp"
    return settings.target.stem + (f"+{draft.stem}" if draft is not None else "")


def _rollback(settings: RuntimeSettings, model: LlamaModel) -> int:
    """Recurrent-state snapshots for the target's cache: a recurrent or hybrid target (the
    Qwen3.5 family with MTP layers) drops a rejected draft of up to `tune_k_max` tokens with
    them rather than recomputing its whole prefix. Each snapshot holds every recurrent
    layer's state, so only MTP drafting, which needs no other model, asks for them here."""
    return settings.tune_k_max + 1 if settings.mtp and model.recurrent else 0


@dataclass(frozen=True)
class HeldCaches:
    """One sequence's caches in host memory while another sequence has the contexts (a
    server's slots take turns on one pair, `Models.hold` and `Models.resume`): None for a
    cache that was empty, or a draft that was not loaded."""

    target: SavedState | None = None
    draft: SavedState | None = None

    @property
    def tokens(self) -> Sequence[int]:
        """The tokens the target's cache held."""
        return () if self.target is None else self.target.tokens.tolist()

    @property
    def size(self) -> int:
        """The host memory the caches take, in bytes."""
        return sum(state.size for state in (self.target, self.draft) if state is not None)


class Models(Closing):
    """The target model and its context, loaded now; the draft, loaded on `load_draft`.

    `on_draft` hears of every change of the draft (its proposer, or None once unloaded), so
    whoever drafts with it (the engine) never holds one that was closed.
    """

    def __init__(
        self,
        settings: RuntimeSettings,
        on_draft: Callable[[DraftModelProposer | MtpProposer | None], None] = lambda _d: None,
    ) -> None:
        self.settings = settings
        self._on_draft = on_draft
        self.target_model = LlamaModel(
            settings.target,
            ModelSettings(settings.target_gpu_layers, settings.use_mmap, load_mtp=settings.mtp),
        )
        self.mtp_head: MtpHead | None = None
        context: LlamaContext | None = None
        try:
            flash_attn = flash_attention(
                settings.flash_attn, self.target_model, settings.target_gpu_layers, settings.n_ctx
            )
            context = LlamaContext(
                self.target_model,
                settings.n_ctx,
                n_threads=settings.n_threads,
                prompt_cache_bytes=limit_bytes(settings.cache_ram_mib),
                flash_attn=flash_attn,
                prompt_store=_prompt_store(settings, flash_attn),
                rollback=_rollback(settings, self.target_model),
                piece=settings.ubatch,
                shared_piece=shared_piece(
                    settings.ubatch, self.target_model, settings.target_gpu_layers
                ),
                value_cache=settings.cache_type_v,
            )
            if settings.mtp:  # from the start: it follows every target decode
                self.mtp_head = MtpHead(context, n_threads=settings.n_threads)
        except BaseException:
            if context is not None:
                context.close()
            self.target_model.close()
            raise
        self.target_context = context
        self.draft_model: LlamaModel | None = None
        self.draft_context: LlamaContext | None = None
        self.draft: DraftModelProposer | MtpProposer | None = None

    def load_draft(self) -> DraftModelProposer | MtpProposer:
        """Load the draft model now (idempotent); refuses a draft with another vocabulary.
        With `mtp`, the target's MTP head drafts: nothing to load."""
        if self.draft is not None:
            return self.draft
        if self.mtp_head is not None:
            self.draft = MtpProposer(self.mtp_head)
            self._on_draft(self.draft)
            return self.draft
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
            n_ctx = self.settings.draft_ctx_size
            flash_attn = flash_attention(
                self.settings.flash_attn, model, self.settings.draft_gpu_layers, n_ctx
            )
            # whole batches: the draft's prompt work is never paused for an editor, so pieces
            # would only cost it their calls
            context = LlamaContext(
                model, n_ctx, n_threads=self.settings.n_threads, flash_attn=flash_attn
            )
        except BaseException:
            model.close()
            raise
        self.draft_model, self.draft_context = model, context
        vocab = None
        if model.n_vocab != self.target_model.n_vocab:  # padded apart (ensure_same_vocabulary)
            vocab = PairVocab(draft=model.n_vocab, target=self.target_model.n_vocab)
        self.draft = DraftModelProposer(context, self.settings.cache_reuse, vocab)
        self._on_draft(self.draft)
        _log.debug("draft model %s loaded", model.path)
        return self.draft

    def hold(self) -> HeldCaches:
        """The caches as they are, for another sequence to take the contexts (`resume`)."""
        draft = _held(self.draft_context) if self.draft_context is not None else None
        return HeldCaches(_held(self.target_context), draft)

    def resume(self, held: HeldCaches) -> None:
        """Make the caches `held`'s, whatever they held. Parked tokens stay with the
        context, where any sequence's reuse walk may take them back; a state that does not
        restore raises `DecodeError` and leaves that cache empty (`restore_state`)."""
        for context, state in (
            (self.target_context, held.target),
            (self.draft_context, held.draft),
        ):
            if context is None:
                continue
            if state is None:
                context.truncate(0)
            else:
                context.restore_state(state)

    def unload_draft(self) -> None:
        for closable in (self.draft_context, self.draft_model):
            if closable is not None:
                closable.close()
        self.draft_model = self.draft_context = self.draft = None
        self._on_draft(None)

    def close(self) -> None:
        self.unload_draft()
        if self.mtp_head is not None:
            self.mtp_head.close()
        self.target_context.close()
        self.target_model.close()


def _held(context: LlamaContext) -> SavedState | None:
    """`context`'s cache in host memory (None: empty). A pending shift is settled first, as
    for any saved state: llama.cpp re-rotates shifted keys only at the next decode."""
    if not context.tokens:
        return None
    if context.shift_pending:
        context.settle_shift()
    return context.save_state()
