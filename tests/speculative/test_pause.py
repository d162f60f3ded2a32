"""A generation whose prompt processing pauses for an editor's request answers as unpaused.

`Engine.generate_pausable`'s `pause` stops the prefill between two of its pieces
(`localspec.llama.pieces`); going on decodes the pieces it would have decoded anyway, so the
answer (greedy or seeded) and the prompt's figures are those of an unpaused run. On the tiny
target in this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.model import LlamaModel
from localspec.llama.pieces import CPU_PIECE, MIDWAY_STOPS
from localspec.speculative.engine import Finished
from localspec.speculative.events import Paused
from localspec.speculative.prompt_work import process_prompt
from localspec.speculative.sampling import SamplingSettings
from tests.llama.helpers import random_tokens

# a generating prefill with chunk reuse, as a request with `--cache-reuse 16` makes
_ARGS: dict[str, Any] = {"reuse": 16, "cache_prompt": True, "deadline": None, "generating": True}


@pytest.fixture(scope="module")
def runtime(tiny_target: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(
        tiny_target, n_ctx=2048, n_threads=1, cache_ram_mib=0, target_gpu_layers=0
    )
    with Runtime(settings) as loaded:
        loaded.hardware_profile()  # calibrated now: it would leave its probe in the cache later
        yield loaded


def _long_request(runtime: Runtime, sampling: SamplingSettings) -> GenerationRequest:
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(50))
    prompt = runtime.prompts.tokenize(text)
    batch = runtime.models.target_context.n_batch
    assert 2 * batch < len(prompt) < 2000  # three batches at least
    return GenerationRequest(
        prompt, max_tokens=24, ignore_eos=True, spec=SpecSettings(SpecMode.NGRAM), sampling=sampling
    )


@pytest.mark.parametrize("sampling", [SamplingSettings(), SamplingSettings(1.0, seed=5)])
def test_a_paused_prefill_goes_on_and_answers_as_unpaused(
    runtime: Runtime, sampling: SamplingSettings
) -> None:
    request = _long_request(runtime, sampling)
    runtime.models.target_context.truncate(0)
    unpaused = list(runtime.generate(request))[-1]
    runtime.models.target_context.truncate(0)
    events = list(runtime.generate_pausable(request, pause=lambda: True))
    paused = [event for event in events if isinstance(event, Paused)]
    context = runtime.models.target_context
    # a prompt takes the whole batch until stopped, then pieces: pauses between pieces
    assert context.shared_piece == CPU_PIECE < context.n_batch == context.piece
    # a pause that asks always: the first call (a batch) is stopped within itself, and from
    # then on each piece is stopped within itself MIDWAY_STOPS times in all, then decoded
    # whole, and the prompt pauses after it; the last piece takes a tail under half a
    # piece, and nothing pauses after it
    ends = list(range(CPU_PIECE, len(request.prompt) - CPU_PIECE // 2 + 1, CPU_PIECE))
    within = [0] * MIDWAY_STOPS + [end for end in ends for _ in range(MIDWAY_STOPS + 1)]
    assert [event.processed for event in paused] == within
    assert all(event.total == len(request.prompt) for event in paused)
    finished = events[-1]
    assert isinstance(finished, Finished) and isinstance(unpaused, Finished)
    assert finished.tokens == unpaused.tokens
    assert finished.stats.cached_tokens == unpaused.stats.cached_tokens == 0
    assert not finished.stats.prompt_cut


def test_without_pause_nothing_pauses_and_generate_never_shows_it(runtime: Runtime) -> None:
    request = _long_request(runtime, SamplingSettings())
    runtime.models.target_context.truncate(0)
    events = list(runtime.generate_pausable(request))
    assert not any(isinstance(event, Paused) for event in events)
    runtime.models.target_context.truncate(0)
    assert isinstance(list(runtime.generate(request))[-1], Finished)


def test_a_budget_still_ends_the_request_where_pause_would_not(runtime: Runtime) -> None:
    """A prompt budget (`t_max_prompt_ms`) ends the generation with `prompt_time` even when
    a pause is asked for too: the budget is the client's, the pause the server's."""
    request = _long_request(runtime, SamplingSettings())
    runtime.models.target_context.truncate(0)
    budgeted = GenerationRequest(request.prompt, max_tokens=4, spec=request.spec, max_prompt_s=1e-9)
    events = list(runtime.generate_pausable(budgeted, pause=lambda: False))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "prompt_time"
    assert finished.stats.prompt_cut


def test_a_resumed_prompt_takes_back_nothing_the_uncut_one_would_not(model: LlamaModel) -> None:
    """Cut after its first piece, a prompt goes on from there with prefix reuse only: the old
    cache's tokens, parked when the prompt began, hold a chunk of the prompt that begins where
    the cut fell, and taking it back would make the answer differ from the uncut prompt's."""
    prompt = random_tokens(5, 200)
    old = [*random_tokens(6, 20), *prompt[64:104]]  # the chunk the cut could take back

    def head(cut: bool) -> Logits:
        with LlamaContext(model, 512, n_batch=256, n_threads=1, piece=64) as context:
            context.prefill(old)
            if cut:  # after the first call, not during it
                ended: list[int] = []
                context.decode_hooks.append(lambda base, chunk: ended.append(base))
                _, row = process_prompt(context, prompt, interrupt=lambda: bool(ended), **_ARGS)
                assert row is None and context.n_past == 64 and len(context.parked) == len(old)
            prefilled, row = process_prompt(context, prompt, resumed=cut, **_ARGS)
            assert prefilled.shifted == 0 and row is not None
            return row

    np.testing.assert_array_equal(head(cut=True), head(cut=False))
