"""Speed-up on the same clock, on the tiny models: a competing load that starts between two
requests is not booked as speculation's loss, and the guard does not act on it.

No wall clock: the engine measures on a virtual clock that the target's decodes advance
(`tests.observe.scripted.VirtualClock`); the load makes every decode from the second request
on 1.5 times as long, as a busy loop beside the server would.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.observe.guard import GuardSettings
from localspec.observe.history import History
from localspec.observe.observation import Observation
from localspec.observe.watch import WatchEvent
from localspec.server.metrics import ServerMetrics
from localspec.speculative.engine import Finished
from tests.observe.scripted import Scripted, VirtualClock, costly, finish
from tests.observe.test_guard_runtime import samples

GUARD = GuardSettings(min_requests=1, cooldown=2, max_waste=math.inf)  # judges every request


@pytest.fixture
def runtime(tiny_target: Path, tmp_path: Path) -> Iterator[Runtime]:
    history = tmp_path / "history.sqlite3"
    settings = RuntimeSettings(
        tiny_target, n_ctx=512, n_threads=1, cache_ram_mib=0, guard=GUARD, history=history
    )
    with Runtime(settings) as loaded:
        yield loaded


def undrafted_auto(runtime: Runtime) -> Finished:
    """An `auto` request with no drafting budget: it prices every step and drafts nothing."""
    prompt = runtime.prompts.tokenize("def add(a, b):\n    return a + b\n")
    spec = SpecSettings(SpecMode.AUTO, max_draft_tokens=0)
    request = GenerationRequest(prompt, max_tokens=12, ignore_eos=True, spec=spec, route="chat")
    last = list(runtime.generate_pausable(request))[-1]
    assert isinstance(last, Finished)
    return last


def test_a_load_between_requests_is_not_speculations_loss(runtime: Runtime) -> None:
    runtime.hardware_profile()  # auto's calibration, on the real clock, before the virtual one
    clock: VirtualClock = costly(runtime)
    events: list[WatchEvent] = []
    runtime.watch.event_listeners.append(events.append)
    seen: list[Observation] = []
    runtime.watch.listeners.append(seen.append)
    before = finish(runtime, SpecMode.OFF)
    clock.load = 1.5  # a busy loop starts beside it
    off = finish(runtime, SpecMode.OFF)
    auto = undrafted_auto(runtime)
    assert auto.stats.drafted == 0 and auto.stats.tuner_choices  # auto priced, drafted nothing
    assert auto.tokens == off.tokens == before.tokens
    assert [o.itl_s for o in seen] == [1.0, 1.5, 1.5]  # the load: 1.5x slower from request 2
    for observation in seen[1:]:
        assert observation.plain_basis == "own"
        assert observation.speedup == pytest.approx(1.0, rel=0.05)
    # a speculative request after them compares with plain decoding under the same load
    right = Scripted(off.tokens, runtime.models.target_model.n_vocab, right=True)
    drafted = finish(runtime, SpecMode.NGRAM, right)
    assert drafted.stats.drafted > 0 and drafted.stats.accepted == drafted.stats.drafted
    assert (seen[-1].plain_basis, seen[-1].plain_itl_s) == ("recent", 1.5)
    assert events == [] and runtime.watch.forced_plain("chat") == ""  # the guard did not act
    assert runtime.watch.guard is not None and runtime.watch.guard.states() == {}


def test_the_history_and_metrics_show_the_basis(runtime: Runtime) -> None:
    metrics = ServerMetrics()
    metrics.attach(runtime.watch)
    clock = costly(runtime)
    finish(runtime, SpecMode.OFF)
    clock.load = 1.5
    finish(runtime, SpecMode.OFF)
    speedups = samples(metrics, "localspec_speedup")
    key = (("basis", "same_clock"), ("mode", "off"), ("pair", runtime.watch.pair))
    assert speedups == {(*key, ("route", "chat")): pytest.approx(1.0)}
    estimates = samples(metrics, "localspec_plain_estimates_total")
    assert [dict(labels)["basis"] for labels in estimates] == ["own"]
    assert runtime.settings.history is not None
    with History(runtime.settings.history) as history:
        (row,) = history.summary(days=1)
    assert row.speedup == pytest.approx(1.0)
    assert (row.speedup_basis, row.same_clock) == ("same-clock", 2)
