"""llama-cpp-python's own speculative decoding as a baseline, in a child process.

`LlamaPromptLookupDecoding` is what llama-cpp-python users get for speculation: prompt lookup
plugged into the high-level `Llama` as its `draft_model`. That needs `logits_all`, whose score
buffer is n_ctx x n_vocab floats (~2.5 GB at 4k context for a 152k vocabulary). Running it in
its own process gives it its own peak RSS, measured like a llama-server's, instead of adding
to localspec's, and frees all of it when the bench ends. `Llama` reports no speculation
statistics; a counting wrapper around the drafter records target steps and drafted tokens.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding
from numpy.typing import NDArray

from localspec.bench import memory
from localspec.bench.contender import ContenderError, Measured, Prompt
from localspec.bench.modes import LCP_LOOKUP_DEFAULT_K, Mode
from localspec.runtime import Runtime

_CLOSE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class _LookupConfig:
    """What the child needs to load the same model the same way (picklable)."""

    model: Path
    n_ctx: int
    threads: int
    gpu_layers: int
    use_mmap: bool
    num_pred_tokens: int
    end_tokens: frozenset[int]


class _CountingDraft(LlamaDraftModel):
    """Delegates to the real drafter; `Llama.generate` calls it once per target step."""

    def __init__(self, drafter: LlamaDraftModel) -> None:
        self._drafter = drafter
        self.calls = 0
        self.drafted = 0

    def reset(self) -> None:
        self.calls = self.drafted = 0

    def __call__(self, input_ids: NDArray[np.intc], /, **kwargs: Any) -> NDArray[np.intc]:
        draft: NDArray[np.intc] = self._drafter(input_ids, **kwargs)
        self.calls += 1
        self.drafted += len(draft)
        return draft


class _LookupGenerator:
    """The child's side: greedy `Llama.generate` with prompt lookup."""

    def __init__(self, config: _LookupConfig) -> None:
        self._config = config
        self._draft = _CountingDraft(LlamaPromptLookupDecoding(config.num_pred_tokens))
        self._llama = Llama(
            model_path=str(config.model),
            draft_model=self._draft,
            # draft_model implies logits_all internally, but the score buffer is sized from
            # this argument: without it prompts longer than n_batch fail (0.3.36)
            logits_all=True,
            n_ctx=config.n_ctx,
            n_threads=config.threads,
            n_threads_batch=config.threads,
            n_gpu_layers=config.gpu_layers,
            use_mmap=config.use_mmap,
            verbose=False,
        )

    def run(self, prompt: list[int], max_tokens: int) -> Measured:
        """Generate until an end-of-generation token or `max_tokens`, like localspec's `off`.

        The first token comes out of the prompt's own forward pass, so speed is counted over
        the tokens after it (localspec's `off` likewise excludes prompt processing).
        """
        self._draft.reset()
        tokens: list[int] = []
        first = end = 0.0
        generator = self._llama.generate(prompt, temp=0.0)
        try:
            for token in generator:
                if token in self._config.end_tokens:
                    break
                end = time.perf_counter()
                first = first or end
                tokens.append(int(token))
                if len(tokens) >= max_tokens:
                    break
        finally:
            generator.close()
        steps = self._draft.calls
        speed = (len(tokens) - 1) / (end - first) if end > first else 0.0
        return Measured(
            tokens,
            speed,
            drafted=self._draft.drafted,
            accepted=max(len(tokens) - 1 - steps, 0),
            target_steps=steps,
            details={"num_pred_tokens": self._config.num_pred_tokens, "draft_calls": steps},
        )


def _serve(connection: Connection, config: _LookupConfig) -> None:
    """The child's loop: (prompt, max_tokens) in, ("ok", Measured) or ("error", why) out.

    Any failure is sent back as text: an exception cannot cross the process boundary, and the
    parent turns it into a skipped baseline rather than a crashed bench.
    """
    try:
        generator = _LookupGenerator(config)
    except Exception as exc:  # sent to the parent, which reports it
        connection.send(("error", f"llama-cpp-python could not load the model: {exc}"))
        return
    connection.send(("ok", None))
    while (request := connection.recv()) is not None:
        try:
            connection.send(("ok", generator.run(*request)))
        except Exception as exc:  # likewise
            connection.send(("error", repr(exc)))


class PromptLookupBaseline:
    """`lcp-lookup:K`: llama-cpp-python's `LlamaPromptLookupDecoding(K)` in a child process."""

    in_process = False
    constrains = False

    def __init__(self, mode: Mode, runtime: Runtime) -> None:
        """Starts the child and waits until its model is loaded; raises ContenderError."""
        self.mode = mode
        model = runtime.models.target_model
        settings = runtime.settings
        config = _LookupConfig(
            model=settings.target,
            n_ctx=settings.n_ctx,
            threads=runtime.models.target_context.n_threads,
            gpu_layers=settings.target_gpu_layers,
            use_mmap=settings.use_mmap,
            num_pred_tokens=mode.k or LCP_LOOKUP_DEFAULT_K,
            end_tokens=frozenset(t for t in range(model.n_vocab) if model.is_end_of_generation(t)),
        )
        # spawn, not fork: llama.cpp's threads and this process's loaded models must not be
        # copied into the child
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, config), daemon=True)
        self._process.start()
        child.close()
        try:
            self._receive()
        except ContenderError:
            self.close()
            raise

    def _receive(self) -> Any:
        try:
            status, payload = self._connection.recv()
        except EOFError:
            self._process.join(_CLOSE_TIMEOUT_S)
            raise ContenderError(
                f"the llama-cpp-python process exited with code {self._process.exitcode}"
            ) from None
        if status == "error":
            raise ContenderError(payload)
        return payload

    def run(self, prompt: Prompt, max_tokens: int) -> Measured:
        self._connection.send((prompt.tokens, max_tokens))
        measured: Measured = self._receive()
        if self._process.pid is not None:
            measured.peak_rss_bytes = memory.child_peak_bytes(self._process.pid)
        return measured

    def close(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(OSError):  # a child already gone needs no goodbye
                self._connection.send(None)
            self._process.join(_CLOSE_TIMEOUT_S)
            if self._process.is_alive():
                self._process.kill()
                self._process.join()
        self._connection.close()
