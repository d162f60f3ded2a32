"""Editor-first scheduling over slots: a real `GenerationWorker` on the tiny models.

An editor's request sent while an answer streams starts at the answer's next step boundary
instead of after its end, and each request's answer is the one it gets alone. The tests
hold the running answer at a known step with a stop rule that blocks the worker thread (no
clock): the editor's request is submitted meanwhile, and the events' order says who ran when.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from localspec import GenerationRequest, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.llama.pieces import PROMPT_HOLD_S
from localspec.observe.observation import Observation
from localspec.server.worker import Cached, Caching, GenerationWorker, Job, JobEvent
from localspec.speculative.engine import Event, Finished, TextChunk
from localspec.speculative.sampling import SamplingSettings

HANG_GUARD_S = 120.0

CHAT = "def parse(text):\n    lines = text.splitlines()\n    result = {}\n"
EDITOR = "class Stack:\n    def __init__(self):\n        self.items = []\n"
AGENT = "import os\n\ndef walk(root):\n    for name in os.listdir(root):\n"


@pytest.fixture(scope="module")
def runtime(tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Runtime]:
    settings = RuntimeSettings(tiny_target, tiny_draft_exact, n_ctx=1024, n_threads=1)
    with Runtime(settings) as loaded:
        loaded.hardware_profile()  # calibrated now: it would leave its probe in the cache later
        yield loaded


class HoldAt:
    """A stop rule that never stops: at its `step`-th chunk it tells the test (`reached`)
    and blocks the worker thread until the test `release`s it."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.fed = 0
        self.reached = threading.Event()
        self.released = threading.Event()
        self.done = False

    def feed(self, piece: str, generated_s: float) -> str:
        self.fed += 1
        if self.fed == self.step:
            self.reached.set()
            if not self.released.wait(HANG_GUARD_S):
                raise TimeoutError("the test never released the held generation")
        return piece


def _request(
    runtime: Runtime, text: str, mode: SpecMode, route: str, **fields: object
) -> GenerationRequest:
    request = GenerationRequest(
        runtime.prompts.tokenize(text),
        max_tokens=48,
        ignore_eos=True,
        spec=SpecSettings(mode),
        route=route,
    )
    return replace(request, **fields)  # type: ignore[arg-type]


def _empty(runtime: Runtime) -> None:
    runtime.models.target_context.truncate(0)
    if runtime.models.draft_context is not None:
        runtime.models.draft_context.truncate(0)


def _alone(runtime: Runtime, request: GenerationRequest) -> list[int]:
    """The request's tokens from an empty cache, nothing else running."""
    _empty(runtime)
    finished = list(runtime.generate(request))[-1]
    assert isinstance(finished, Finished)
    return finished.tokens


Arrival = tuple[str, Event | Cached]


@dataclass(eq=False)
class Tagged(Job):
    """A job whose events are logged as the worker hands them over, tagged with its name:
    the order they were produced in. (The event loop's order is not that: a consumer that
    wakes to a full queue drains it before another consumer runs.)"""

    name: str = ""
    log: list[Arrival] = field(default_factory=list)

    def deliver(self, event: JobEvent) -> None:
        if isinstance(event, TextChunk | Finished | Cached):
            self.log.append((self.name, event))
        super().deliver(event)


def _job(
    name: str,
    log: list[Arrival],
    request: GenerationRequest,
    loop: asyncio.AbstractEventLoop,
    **fields: object,
) -> Tagged:
    """`request` as a job (`fields`: `rule`, or `caching` with `request` ignored: a warm-up)."""
    warm_up = "caching" in fields
    job = Tagged(list(request.prompt), None if warm_up else request, loop, **fields)  # type: ignore[arg-type]
    job.name, job.log = name, log
    return job


async def _collect(job: Job) -> None:
    async for _event in job.stream():
        pass


Meanwhile = Callable[[asyncio.AbstractEventLoop, GenerationWorker, list[Arrival]], Awaitable[None]]


def _while_held(
    runtime: Runtime,
    held: GenerationRequest,
    meanwhile: Meanwhile,
    *,
    parallel: int = 3,
    hold_at: int = 4,
    worker: GenerationWorker | None = None,
) -> tuple[list[Arrival], GenerationWorker]:
    """`held` runs until its `hold_at`-th step, where it waits for `meanwhile` to submit
    other jobs; `meanwhile`'s returned awaitable is started then, and the held generation
    is released. Every event, tagged, in arrival order; the contexts start empty, as
    `_alone`'s runs do. The worker's clock stands still unless a `worker` is given: no
    request ever waits long enough for the editor bound (tested with a `Clock` that moves:
    `test_a_stream_gets_a_step_within_the_editor_bound_however_many_editors_arrive`)."""
    _empty(runtime)
    if worker is None:
        worker = GenerationWorker(runtime, max_waiting=4, parallel=parallel, clock=lambda: 0.0)
    worker.start()
    rule = HoldAt(hold_at)
    log: list[Arrival] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = _job("held", log, held, loop, rule=rule)
        worker.submit(first)
        collecting = asyncio.ensure_future(_collect(first))
        assert await asyncio.to_thread(rule.reached.wait, HANG_GUARD_S)
        others = asyncio.ensure_future(meanwhile(loop, worker, log))
        await asyncio.sleep(0)  # `meanwhile` submits before the held generation goes on
        rule.released.set()
        await asyncio.gather(collecting, others)

    try:
        asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD_S))
    finally:
        rule.released.set()
        worker.stop()
    return log, worker


def _submit(worker: GenerationWorker, job: Job) -> asyncio.Future[None]:
    worker.submit(job)
    return asyncio.ensure_future(_collect(job))


def _interrupted_run(
    runtime: Runtime,
    held: GenerationRequest,
    urgent: GenerationRequest,
    *,
    parallel: int = 3,
    queued: GenerationRequest | None = None,
) -> list[Arrival]:
    """`urgent` (and `queued`, a third request) submitted while `held` is held."""

    async def meanwhile(
        loop: asyncio.AbstractEventLoop, worker: GenerationWorker, log: list[Arrival]
    ) -> None:
        collecting = []
        if queued is not None:
            collecting.append(_submit(worker, _job("queued", log, queued, loop)))
        collecting.append(_submit(worker, _job("urgent", log, urgent, loop)))
        await asyncio.gather(*collecting)

    return _while_held(runtime, held, meanwhile, parallel=parallel)[0]


def _finished(log: list[Arrival], name: str) -> Finished:
    events = [event for who, event in log if who == name and isinstance(event, Finished)]
    assert len(events) == 1, f"{name} did not finish once"
    return events[0]


def _order(log: list[Arrival]) -> list[str]:
    """Who finished, in order."""
    return [who for who, event in log if isinstance(event, Finished)]


@pytest.mark.parametrize("mode", list(SpecMode))
def test_an_editor_request_starts_at_the_next_step_and_both_answers_are_their_own(
    runtime: Runtime, mode: SpecMode
) -> None:
    chat = _request(runtime, CHAT, mode, "chat")
    editor = _request(runtime, EDITOR, mode, "infill", max_tokens=16)
    chat_alone, editor_alone = _alone(runtime, chat), _alone(runtime, editor)
    heard: list[Observation] = []
    runtime.watch.listeners.append(heard.append)
    try:
        log = _interrupted_run(runtime, chat, editor)
    finally:
        runtime.watch.listeners.remove(heard.append)
    # the watchers know the chat's times include the editor's (the guard and the history's
    # speed-up leave it out)
    assert [(o.route, o.interruptions) for o in heard] == [("infill", 0), ("chat", 1)]
    assert _order(log) == ["urgent", "held"]
    chat_done, editor_done = _finished(log, "held"), _finished(log, "urgent")
    # the chat stood still while the editor ran: no chunk of its between the editor's first
    # and last event, and it went on afterwards
    names = [who for who, _ in log]
    first_editor, last_editor = names.index("urgent"), len(names) - 1 - names[::-1].index("urgent")
    assert "held" not in names[first_editor:last_editor]
    assert "held" in names[last_editor:]
    assert chat_done.tokens == chat_alone
    assert editor_done.tokens == editor_alone
    assert chat_done.stats.interruptions == 1 and editor_done.stats.interruptions == 0
    assert chat_done.stats.slot != editor_done.stats.slot
    assert chat_done.stats.generated_tokens == chat.max_tokens


def test_three_requests_each_answer_as_alone_and_the_others_keep_arrival_order(
    runtime: Runtime,
) -> None:
    chat = _request(runtime, CHAT, SpecMode.NGRAM, "chat")
    # another route: the agent gets a slot of its own, empty as its run alone starts
    agent = _request(runtime, AGENT, SpecMode.HYBRID, "agent", max_tokens=24)
    editor = _request(runtime, EDITOR, SpecMode.DRAFT, "infill", max_tokens=16)
    alone = {name: _alone(runtime, r) for name, r in (("held", chat), ("queued", agent))}
    alone["urgent"] = _alone(runtime, editor)
    log = _interrupted_run(runtime, chat, editor, queued=agent)
    assert _order(log) == ["urgent", "held", "queued"]
    for name, tokens in alone.items():
        assert _finished(log, name).tokens == tokens, name


def test_sampling_with_a_seed_answers_the_same_interrupted(runtime: Runtime) -> None:
    sampled = SamplingSettings(temperature=1.2, seed=11)
    chat = _request(runtime, CHAT, SpecMode.OFF, "chat", sampling=sampled)
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=16, sampling=sampled)
    chat_alone, editor_alone = _alone(runtime, chat), _alone(runtime, editor)
    log = _interrupted_run(runtime, chat, editor)
    assert _finished(log, "held").tokens == chat_alone
    assert _finished(log, "urgent").tokens == editor_alone


def test_with_one_slot_requests_run_in_arrival_order(runtime: Runtime) -> None:
    chat = _request(runtime, CHAT, SpecMode.OFF, "chat")
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=16)
    log = _interrupted_run(runtime, chat, editor, parallel=1)
    assert _order(log) == ["held", "urgent"]
    names = [who for who, _ in log]
    assert names.index("urgent") > max(i for i, who in enumerate(names) if who == "held")
    assert _finished(log, "held").stats.interruptions == 0


def test_cancelling_the_editor_request_leaves_the_answer_whole(runtime: Runtime) -> None:
    chat = _request(runtime, CHAT, SpecMode.NGRAM, "chat")
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=400)
    chat_alone = _alone(runtime, chat)

    async def meanwhile(
        loop: asyncio.AbstractEventLoop, worker: GenerationWorker, log: list[Arrival]
    ) -> None:
        second = _job("urgent", log, editor, loop)
        worker.submit(second)
        async for event in second.stream():  # leaving the stream stops the job
            if isinstance(event, TextChunk):
                break

    log, worker = _while_held(runtime, chat, meanwhile, hold_at=3)
    assert _finished(log, "held").tokens == chat_alone
    assert worker.cancelled == 1  # the editor's, at its next step


def test_a_warm_up_runs_in_its_own_slot_and_the_next_completion_reuses_it(
    runtime: Runtime,
) -> None:
    chat = _request(runtime, CHAT, SpecMode.OFF, "chat")
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=8)
    chat_alone = _alone(runtime, chat)

    async def meanwhile(
        loop: asyncio.AbstractEventLoop, worker: GenerationWorker, log: list[Arrival]
    ) -> None:
        await _submit(worker, _job("warm", log, editor, loop, caching=Caching()))
        await _submit(worker, _job("urgent", log, editor, loop))

    log, _worker = _while_held(runtime, chat, meanwhile, parallel=2, hold_at=3)
    cached = next(event for who, event in log if who == "warm")
    assert isinstance(cached, Cached) and cached.processed == len(editor.prompt) - 1
    completion = _finished(log, "urgent")
    # the warm-up's slot kept its cache while the chat's came back and went on
    assert completion.stats.cached_tokens == len(editor.prompt) - 1
    assert completion.stats.slot == cached.slot
    assert _finished(log, "held").tokens == chat_alone


class PauseGate(GenerationWorker):
    """A worker whose first question "does an editor's request wait?" (asked within the first
    llama.cpp call of a prompt) waits until the test has submitted one."""

    def __init__(self, runtime: Runtime, prompt_hold: float = PROMPT_HOLD_S) -> None:
        super().__init__(
            runtime, max_waiting=4, parallel=2, prompt_hold=prompt_hold, clock=lambda: 0.0
        )
        self.asked = threading.Event()
        self.answer = threading.Event()

    def _urgent_waits(self) -> bool:
        if not self.asked.is_set():
            self.asked.set()
            if not self.answer.wait(HANG_GUARD_S):
                raise TimeoutError("the test never submitted the editor's request")
        return super()._urgent_waits()


def _editor_during_a_long_prompt(
    runtime: Runtime, prompt_hold: float = PROMPT_HOLD_S
) -> tuple[list[Arrival], list[int], list[int]]:
    """An editor's request sent while a long prompt's first call runs: the log, and the two
    answers alone."""
    text = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30))
    long = _request(runtime, text, SpecMode.NGRAM, "chat", max_tokens=16)
    piece = runtime.models.target_context.piece
    assert piece < len(long.prompt) < runtime.n_ctx - long.max_tokens
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=8)
    long_alone, editor_alone = _alone(runtime, long), _alone(runtime, editor)
    _empty(runtime)
    worker = PauseGate(runtime, prompt_hold)
    worker.start()
    log: list[Arrival] = []

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        held = _submit(worker, _job("held", log, long, loop))
        assert await asyncio.to_thread(worker.asked.wait, HANG_GUARD_S)
        urgent = _submit(worker, _job("urgent", log, editor, loop))
        worker.answer.set()
        await asyncio.gather(held, urgent)

    try:
        asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD_S))
    finally:
        worker.answer.set()
        worker.stop()
    return log, long_alone, editor_alone


@pytest.mark.parametrize("prompt_hold", [PROMPT_HOLD_S, 0.0], ids=["within-a-call", "between"])
def test_an_editor_request_stops_a_long_prompt_and_both_answers_are_their_own(
    runtime: Runtime, prompt_hold: float, caplog: pytest.LogCaptureFixture
) -> None:
    """With a hold, the editor's request stops the prompt within its first call (llama.cpp
    says so at debug); with --prompt-hold 0, after it."""
    with caplog.at_level(logging.DEBUG, logger="localspec.llama.cpp"):
        log, long_alone, editor_alone = _editor_during_a_long_prompt(runtime, prompt_hold)
    # the editor's answer came whole before the long prompt's first token
    names = [who for who, _ in log]
    assert names.index("held") > max(i for i, who in enumerate(names) if who == "urgent")
    held_done = _finished(log, "held")
    assert held_done.tokens == long_alone and held_done.stats.interruptions == 1
    assert held_done.stats.cached_tokens == 0  # what it processed before the pause is its own
    assert _finished(log, "urgent").tokens == editor_alone
    stopped_within = "failed to decode, ret = 2" in caplog.text
    assert stopped_within == (prompt_hold > 0)


class Clock:
    """The worker's clock, moved on by the editors' events only (`Ticking`): how long the
    others waited is counted in editors' steps, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass(eq=False)
class Ticking(Tagged):
    """An editor's job: each of its events moves the clock on by `tick` seconds."""

    clock: Clock = field(default_factory=Clock)
    tick: float = 0.0

    def deliver(self, event: JobEvent) -> None:
        if isinstance(event, TextChunk | Finished):
            self.clock.now += self.tick
        super().deliver(event)


BOUND_S, TICK_S = 1.0, 0.25
EDITOR_STEPS_IN_BOUND = round(BOUND_S / TICK_S)  # steps of editors a request may wait


def _flooded(
    runtime: Runtime, held: GenerationRequest, editors: int, *, queued: GenerationRequest | None
) -> list[Arrival]:
    """`editors` editors' requests (and `queued`) submitted while `held` is held, all at
    once: a flood of `/infill`. Each editor's event is `TICK_S` seconds on the worker's clock."""
    clock = Clock()
    worker = GenerationWorker(runtime, max_waiting=8, parallel=3, editor_bound=BOUND_S, clock=clock)
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=16)

    async def meanwhile(
        loop: asyncio.AbstractEventLoop, worker: GenerationWorker, log: list[Arrival]
    ) -> None:
        jobs: list[Job] = []
        for number in range(editors):
            job = Ticking(list(editor.prompt), editor, loop, clock=clock, tick=TICK_S)
            job.name, job.log = f"editor{number}", log
            jobs.append(job)
        if queued is not None:
            jobs.insert(1, _job("queued", log, queued, loop))
        await asyncio.gather(*(_submit(worker, job) for job in jobs))

    return _while_held(runtime, held, meanwhile, worker=worker)[0]


def _longest_wait(log: list[Arrival], name: str) -> int:
    """The most editors' events in a row while `name` had begun (or waited) and not ended."""
    longest = run = 0
    for who, event in log:
        if who == name:
            if isinstance(event, Finished):
                return max(longest, run)
            run = 0
        elif who.startswith("editor"):
            run += 1
            longest = max(longest, run)
    raise AssertionError(f"{name} never finished")


def test_a_stream_gets_a_step_within_the_editor_bound_however_many_editors_arrive(
    runtime: Runtime,
) -> None:
    """Three editors' requests at once used to keep a chat stream silent until all three
    were answered (48 steps here); now it waits at most the bound's worth of their steps,
    and every answer is still the one it gets alone."""
    chat = _request(runtime, CHAT, SpecMode.OFF, "chat")
    editor_alone = _alone(runtime, _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=16))
    chat_alone = _alone(runtime, chat)
    log = _flooded(runtime, chat, 3, queued=None)
    names = [who for who, _ in log]
    first_editor = names.index("editor0")
    assert "held" not in names[first_editor : first_editor + EDITOR_STEPS_IN_BOUND]  # first
    assert _longest_wait(log, "held") == EDITOR_STEPS_IN_BOUND
    assert names.index("held", first_editor) < names.index("editor2")  # before the flood ends
    assert _finished(log, "held").tokens == chat_alone
    for number in range(3):
        assert _finished(log, f"editor{number}").tokens == editor_alone


def test_a_waiting_request_starts_within_the_editor_bound(runtime: Runtime) -> None:
    """An agent's request waiting behind the editors (no other answer started) begins once
    it has waited the bound, its first step before the next editor's."""
    editor = _request(runtime, EDITOR, SpecMode.OFF, "infill", max_tokens=16)
    agent = _request(runtime, AGENT, SpecMode.OFF, "agent", max_tokens=8)
    agent_alone = _alone(runtime, agent)
    log = _flooded(runtime, editor, 3, queued=agent)
    queued = [index for index, (who, _) in enumerate(log) if who == "queued"]
    before = [who for who, _ in log[: queued[0]] if who.startswith("editor")]
    assert len(before) == EDITOR_STEPS_IN_BOUND
    assert _longest_wait(log, "queued") <= EDITOR_STEPS_IN_BOUND
    assert _finished(log, "queued").tokens == agent_alone
