"""A surface's stop rule runs on the worker, so the step that fires it is the generation's last.

Run on the event loop, a rule saw each chunk only after the worker had started the next
target step, and every editor answer it ended cost one step more than llama-server's. These
tests drive a real `GenerationWorker` over the tiny target in this process; the editor rules
over HTTP are in test_llamacpp_api.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.server.worker import Cached, GenerationWorker, Job
from localspec.speculative.engine import Event, Finished, TextChunk

HANG_GUARD_S = 120.0


@pytest.fixture(scope="module")
def runtime(tiny_target: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)
    with Runtime(settings) as loaded:
        yield loaded


class StopAfter:
    """Fires on the `pieces`-th chunk; records what it was fed."""

    def __init__(self, pieces: int) -> None:
        self.pieces = pieces
        self.fed: list[tuple[str, float]] = []
        self.done = False

    def feed(self, piece: str, generated_s: float) -> str:
        self.fed.append((piece, generated_s))
        self.done = len(self.fed) >= self.pieces
        return piece.upper()


def _run_job(runtime: Runtime, request: GenerationRequest, rule: object) -> list[Event | Cached]:
    worker = GenerationWorker(runtime, max_waiting=4)
    worker.start()

    async def collect() -> list[Event | Cached]:
        job = Job(list(request.prompt), request, asyncio.get_running_loop(), rule=rule)  # type: ignore[arg-type]
        worker.submit(job)
        return [event async for event in job.stream()]

    try:
        return asyncio.run(asyncio.wait_for(collect(), HANG_GUARD_S))
    finally:
        worker.stop()


def _request(runtime: Runtime, max_tokens: int = 40) -> GenerationRequest:
    return GenerationRequest(
        runtime.prompts.tokenize("def add(a, b):\n    return a + b\n"),
        max_tokens=max_tokens,
        ignore_eos=True,
        spec=SpecSettings(SpecMode.OFF),
    )


def test_the_step_that_fires_the_rule_is_the_last_one(runtime: Runtime) -> None:
    rule = StopAfter(pieces=5)
    events = _run_job(runtime, _request(runtime), rule)
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.finish_reason == "cancelled"
    # plain decoding: one token a step, and not one step more after the fifth
    assert finished.stats.generated_tokens == 5
    assert finished.stats.target_steps == 5
    chunks = [event for event in events if isinstance(event, TextChunk)]
    assert [chunk.text for chunk in chunks] == [piece.upper() for piece, _ in rule.fed]


def test_the_rules_clock_is_the_steps_time_since_the_prompt(runtime: Runtime) -> None:
    rule = StopAfter(pieces=1000)
    events = _run_job(runtime, _request(runtime, max_tokens=12), rule)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "length"
    times = [generated_s for _, generated_s in rule.fed]
    assert len(times) == 12
    assert times == sorted(times) and times[0] >= 0.0
    generation_s = finished.stats.total_s - finished.stats.prefill_s
    assert times[-1] <= generation_s
