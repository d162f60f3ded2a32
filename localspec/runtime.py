"""Loaded models wired to the engine: the one generation API every surface calls.

`Runtime` owns the target model and context, the n-gram proposer with its session cache, and
the draft model, loaded lazily on the first request that may use it (a draft that is never
used costs no memory). Surfaces build a `GenerationRequest` and iterate `generate`.
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from localspec.errors import UsageError
from localspec.lifetime import Closing
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel, ModelSettings, ensure_same_vocabulary
from localspec.spec.draft_model import DraftModelProposer
from localspec.spec.engine import Engine, Event, GenerationRequest
from localspec.spec.ngram import NGramCache, NGramProposer

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


@dataclass(frozen=True)
class Message:
    role: str
    content: str


class Runtime(Closing):
    """A warm target (and optional draft) ready to generate."""

    def __init__(self, settings: RuntimeSettings) -> None:
        self.settings = settings
        self.target_model = LlamaModel(
            settings.target, ModelSettings(settings.target_gpu_layers, settings.use_mmap)
        )
        try:
            self.target_context = LlamaContext(
                self.target_model, settings.n_ctx, n_threads=settings.n_threads
            )
        except BaseException:
            self.target_model.close()
            raise
        self.ngram = NGramProposer(
            n_min=2, n_max=12, cache=NGramCache() if settings.ngram_cache else None
        )
        self.engine = Engine(self.target_context, self.target_model, ngram=self.ngram)
        self.draft_model: LlamaModel | None = None
        self.draft_context: LlamaContext | None = None

    @property
    def n_ctx(self) -> int:
        return self.target_context.n_ctx

    def load_draft(self) -> None:
        """Load the draft model now (idempotent); refuses a draft with another vocabulary."""
        if self.draft_context is not None:
            return
        if self.settings.draft is None:
            raise UsageError(
                "this speculation mode needs a draft model: pass --draft MODEL "
                "or use --spec ngram / --spec off"
            )
        model = LlamaModel(
            self.settings.draft,
            ModelSettings(self.settings.draft_gpu_layers, self.settings.use_mmap),
        )
        try:
            ensure_same_vocabulary(self.target_model, model)
            context = LlamaContext(model, self.settings.n_ctx, n_threads=self.settings.n_threads)
        except BaseException:
            model.close()
            raise
        self.draft_model, self.draft_context = model, context
        self.engine.draft = DraftModelProposer(context)
        _log.debug("draft model %s loaded", model.path)

    # -- prompts --------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        """Raw text to tokens, with the model's BOS where it wants one."""
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def chat_prompt(self, messages: Sequence[Message]) -> list[int]:
        """Render `messages` with the GGUF's own chat template and tokenize the result."""
        template = self.target_model.chat_template
        if not template:
            raise UsageError(
                f"{self.target_model.path.name} has no chat template: use --raw to send the "
                f"prompt as plain text"
            )
        model = self.target_model
        formatter = Jinja2ChatFormatter(
            template, eos_token=model.token_text(model.eos), bos_token=model.token_text(model.bos)
        )
        # llama-cpp-python types messages as a union of TypedDicts; plain dicts are what it reads
        chat: list[Any] = [{"role": m.role, "content": m.content} for m in messages]
        rendered = formatter(messages=chat)
        text: str = rendered.prompt
        # templates that write the BOS themselves must not get a second one from the tokenizer
        add_bos = not (model.add_bos and text.startswith(model.token_text(model.bos)))
        return model.tokenize(text, add_special=add_bos, parse_special=True)

    # -- generation -----------------------------------------------------------------------
    def generate(self, request: GenerationRequest) -> Generator[Event, None, None]:
        """Stream a generation (see `Engine.generate`); loads the draft model on first need."""
        if request.spec.uses_draft_model:
            self.load_draft()
        return self.engine.generate(request)

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        for closable in (
            self.draft_context,
            self.draft_model,
            self.target_context,
            self.target_model,
        ):
            if closable is not None:
                closable.close()
