"""The what-if replay runs the engine's own step: replaying a live run's answer reproduces
that run's steps and accepted tokens exactly (real llama.cpp inference on the tiny models).

Under greedy decoding which draft tokens are accepted follows from the answer alone, so a
replay of the recorded answer under the same policy must take the same steps; any
difference would be a replay loop that drifted from the engine's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from localspec import (
    Finished,
    GenerationRequest,
    Runtime,
    RuntimeSettings,
    SpecMode,
    SpecSettings,
    TextChunk,
)
from localspec.speculative.draft_model import DRAFT_SOURCE
from localspec.speculative.policy import RecordedStep
from localspec.speculative.simulate import FixedPolicy, Rerun, Trace, replay
from localspec.speculative.tuner import NGRAM, HardwareProfile

PROMPTS = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef add(a, b):\n",
    "hello hello hello hello hello",
]
# any costs do: the steps a replay takes do not depend on them for these policies
PROFILE = HardwareProfile(verify_s=tuple(1.0 + 0.1 * b for b in range(70)), draft_s=0.1)


def ticks(step: float = 1e-3) -> Callable[[], float]:
    """A clock that moves `step` seconds each time it is read."""
    readings = itertools.count()
    return lambda: next(readings) * step


def live(
    runtime: Runtime, prompt: list[int], spec: SpecSettings
) -> tuple[Finished, list[TextChunk]]:
    """A greedy generation, and the event of each step that emitted something."""
    request = GenerationRequest(prompt=prompt, max_tokens=40, spec=spec)
    events = list(runtime.generate(request))
    done = events[-1]
    assert isinstance(done, Finished)
    return done, [e for e in events if isinstance(e, TextChunk) and e.tokens]


def trace_of(prompt: list[int], done: Finished, steps: Sequence[TextChunk] = ()) -> Trace:
    """The run's answer as a trace: it ended by itself unless max_tokens cut it. The draft
    model agreed where its drafts in `steps` were accepted, and not where they were not
    (elsewhere it was not asked)."""
    output = tuple(done.tokens)
    agrees = [False] * len(output)
    t = 0
    for step in steps:
        if step.source == DRAFT_SOURCE:
            agrees[t : t + step.from_draft] = [True] * step.from_draft
        t += len(step.tokens)
    ended = done.finish_reason == "stop"
    return Trace(tuple(prompt), output, tuple(agrees), ended=ended)


@pytest.mark.parametrize("text", PROMPTS)
def test_replaying_an_ngram_run_reproduces_its_steps(exact: Runtime, text: str) -> None:
    prompt = exact.prompts.tokenize(text)
    spec = SpecSettings(SpecMode.NGRAM, ngram_draft_max=4, ngram_min_match=2)
    done, _ = live(exact, prompt, spec)
    assert done.stats.drafted > 0, "the run drafted nothing: the test would prove nothing"
    replayed = replay(trace_of(prompt, done), FixedPolicy(NGRAM, 4, min_match=2), PROFILE)
    assert replayed.tokens == len(done.tokens)
    assert replayed.steps == done.stats.target_steps
    assert (replayed.drafted, replayed.accepted) == (done.stats.drafted, done.stats.accepted)


def test_replaying_an_auto_run_step_by_step_reproduces_it(
    tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """`auto` learns from this machine's timings, so its choices are recorded and replayed
    (`Rerun`): the recorded steps, verified against the recorded answer, accept the same.
    A fresh runtime: no session n-gram cache from earlier answers, which a replay lacks."""
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        # what auto chooses must not depend on this machine's speed: a calibration where
        # lookups pay and the draft never does (as on the tiny pair), and a clock that moves
        # 1 ms a reading, so the costs it measures are the same on any machine, however busy
        runtime.calibration._profile = HardwareProfile(
            verify_s=tuple(1e-3 * (1.0 + 0.02 * b) for b in range(9)), draft_s=None
        )
        runtime.engine.now = ticks()
        prompt = runtime.prompts.tokenize(PROMPTS[0])
        spec = SpecSettings(SpecMode.AUTO, ngram_min_match=2)
        done, events = live(runtime, prompt, spec)
    steps = [RecordedStep(e.source, e.drafted) for e in events]
    assert done.stats.drafted > 0, "the run drafted nothing: the test would prove nothing"
    replayed = replay(trace_of(prompt, done, events), Rerun(steps), PROFILE)
    assert replayed.steps == done.stats.target_steps
    assert (replayed.drafted, replayed.accepted) == (done.stats.drafted, done.stats.accepted)
