"""The guard on the tiny models: a route whose speculation is slower than plain decoding
falls back, exports it, answers plainly (the same tokens) for the cool-down, then probes.

No wall clock: the engine measures on a virtual clock (`Engine(now=...)`) that each target
decode advances by what a batch of its size costs (a plain step 1 unit, each more token half
a unit), and the proposer drafts, at every position, a token the target's greedy answer
does not have there, so every draft is rejected and every speculative step costs more.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localspec import GenerationRequest, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.observe.guard import GuardSettings
from localspec.server.metrics import ServerMetrics
from localspec.speculative.engine import Finished
from localspec.speculative.ngram import NGramProposer
from localspec.speculative.proposer import Draft, DraftLimits
from localspec.speculative.sampling import Sampler

GUARD = GuardSettings(min_requests=3, cooldown=2, max_waste=math.inf)  # latency alone


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class CostlyTarget:
    """The real target context, whose decodes also spend time on the virtual clock."""

    def __init__(self, inner: Any, clock: VirtualClock) -> None:
        self.inner, self.clock = inner, clock

    def decode(self, tokens: Sequence[int], *args: Any, **kwargs: Any) -> Any:
        self.clock.now += 1.0 + 0.5 * (len(tokens) - 1)
        return self.inner.decode(tokens, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class Contrary:
    """Drafts what the greedy answer is not: each drafted token is rejected."""

    name = "ngram"

    def __init__(self, answer: list[int], n_vocab: int) -> None:
        self.answer, self.n_vocab, self.n_prompt = answer, n_vocab, 0

    def reset(self, prompt: Sequence[int]) -> None:
        self.n_prompt = len(prompt)

    def propose(self, tokens: Sequence[int], limits: DraftLimits, sampler: Sampler) -> Draft:
        at = len(tokens) - self.n_prompt
        wanted = self.answer[at : at + min(limits.max_len, 4)]
        return Draft([(token + 1) % self.n_vocab for token in wanted], "ngram")

    def finish(self, tokens: Sequence[int]) -> None:
        pass


@pytest.fixture
def runtime(tiny_target: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(tiny_target, n_ctx=512, n_threads=1, cache_ram_mib=0, guard=GUARD)
    with Runtime(settings) as loaded:
        clock = VirtualClock()
        loaded.engine.now = clock
        loaded.engine.target = CostlyTarget(loaded.engine.target, clock)
        yield loaded


def request(runtime: Runtime, mode: SpecMode) -> GenerationRequest:
    prompt = runtime.prompts.tokenize("def add(a, b):\n    return a + b\n")
    spec = SpecSettings(mode, ngram_draft_max=4, redecode_ties=False)
    return GenerationRequest(prompt, max_tokens=12, ignore_eos=True, spec=spec, route="chat")


def finish(runtime: Runtime, mode: SpecMode, ngram: Contrary | None = None) -> Finished:
    # a fixed mode drafts with any `Proposer` in the n-gram proposer's place (auto needs an
    # `NGramProposer`'s index, hence run's narrower type)
    lookup = cast("NGramProposer | None", ngram)
    last = list(runtime.run(request(runtime, mode), ngram=lookup))[-1]
    assert isinstance(last, Finished)
    return last


def samples(metrics: ServerMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.exposition().decode()
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_slower_speculation_falls_back_exports_it_and_probes_again(runtime: Runtime) -> None:
    metrics = ServerMetrics()
    metrics.attach(runtime.watch)
    plain = finish(runtime, SpecMode.OFF)
    finish(runtime, SpecMode.OFF)
    contrary = Contrary(plain.tokens, runtime.models.target_model.n_vocab)
    for _ in range(GUARD.min_requests):
        slow = finish(runtime, SpecMode.NGRAM, contrary)
        assert slow.stats.drafted > 0 and slow.stats.accepted == 0 and not slow.stats.guard
        assert slow.tokens == plain.tokens
    assert runtime.watch.forced_plain("chat") == "latency"
    key = (("pair", runtime.watch.pair), ("reason", "latency"), ("route", "chat"))
    assert samples(metrics, "localspec_guard_fallbacks_total") == {key: 1.0}
    assert samples(metrics, "localspec_guard_fallback") == {key: 1.0}
    for _ in range(GUARD.cooldown):
        guarded = finish(runtime, SpecMode.NGRAM, contrary)
        assert guarded.stats.guard == "latency" and guarded.stats.drafted == 0
        assert guarded.tokens == plain.tokens  # plain decoding: the same answer
    assert runtime.watch.forced_plain("chat") == ""
    assert samples(metrics, "localspec_guard_fallback") == {}
    probe = finish(runtime, SpecMode.NGRAM, contrary)
    assert probe.stats.drafted > 0 and not probe.stats.guard
    plain_requests = (("constraint", "none"), ("mode", "ngram"), ("pair", runtime.watch.pair))
    assert samples(metrics, "localspec_guard_plain_requests_total") == {
        (*plain_requests[:3], ("reason", "latency"), ("route", "chat")): 2.0
    }


def test_without_the_guard_a_slow_route_keeps_speculating(tiny_target: Path) -> None:
    settings = RuntimeSettings(tiny_target, n_ctx=512, n_threads=1, cache_ram_mib=0)
    with Runtime(settings) as runtime:
        assert runtime.watch.guard is None
        plain = finish(runtime, SpecMode.OFF)
        contrary = Contrary(plain.tokens, runtime.models.target_model.n_vocab)
        for _ in range(GUARD.min_requests + 1):
            assert finish(runtime, SpecMode.NGRAM, contrary).stats.drafted > 0
