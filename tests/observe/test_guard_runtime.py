"""The guard on the tiny models: a route whose speculation is slower than plain decoding
falls back, exports it, answers plainly (the same tokens) for the cool-down, then probes.

No wall clock: the engine measures on a virtual clock (`Engine(now=...)`) that each target
decode advances by what a batch of its size costs (a plain step 1 unit, each more token half
a unit), and the proposer drafts, at every position, a token the target's greedy answer
does not have there, so every draft is rejected and every speculative step costs more.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from localspec import Runtime, RuntimeSettings, SpecMode
from localspec.observe.guard import GuardSettings
from localspec.server.metrics import ServerMetrics
from tests.observe.scripted import Scripted, costly, finish

GUARD = GuardSettings(min_requests=3, cooldown=2, max_waste=math.inf)  # latency alone


@pytest.fixture
def runtime(tiny_target: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(tiny_target, n_ctx=512, n_threads=1, cache_ram_mib=0, guard=GUARD)
    with Runtime(settings) as loaded:
        costly(loaded)
        yield loaded


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
    contrary = Scripted(plain.tokens, runtime.models.target_model.n_vocab, right=False)
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
        costly(runtime)  # the same costs that make the guard fall back above
        assert runtime.watch.guard is not None and not runtime.watch.guard.acting
        plain = finish(runtime, SpecMode.OFF)
        finish(runtime, SpecMode.OFF)
        contrary = Scripted(plain.tokens, runtime.models.target_model.n_vocab, right=False)
        for _ in range(GUARD.min_requests + 2):
            slow = finish(runtime, SpecMode.NGRAM, contrary)
            assert slow.stats.drafted > 0 and not slow.stats.guard
        assert runtime.watch.guard.states() == {}
        # plain decoding is still estimated (the history's speed-up): 1 unit a token here
        assert runtime.watch.plain.recent("chat", runtime.watch.pair) == 1.0
