"""`localspec bench chat`: the chat app's decode speed against `complete`'s.

The real app runs headless under Textual's Pilot and answers each prompt in a fresh
conversation; `complete`'s path (`Runtime.generate` on the same rendered chat prompt, no UI)
answers it too. Both run on the ONE loaded runtime, with the same speculation and sampling
settings and token budget, taking turns at going first, so that the surface is the only
difference. The figure on both sides is the engine's own `GenerationStats.tokens_per_second`:
whatever the app does on its thread while the engine decodes (holding the GIL, taking a core
from llama.cpp's threads) lengthens the engine's generation time and shows up there.

The `complete` side runs on the app's event loop, blocking it: the app draws nothing meanwhile,
as `localspec complete` has no UI at all. Both sides use the route "chat", so that auto mode
uses one tuner for both; the caller's runtime must have the n-gram session cache off, or the
side going second would find the first side's answer in it. Before each answer the draft model
(when loaded) is given the prompt, untimed, as `localspec bench` does: the draft's catch-up on
a new prompt must not land on whichever side happens to run first.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from localspec import (
    Finished,
    GenerationRequest,
    GenerationStats,
    LocalspecError,
    Message,
    Runtime,
    SpecSettings,
)
from localspec.bench.modes import Mode, parse_mode
from localspec.bench.workloads import Workload
from localspec.errors import UsageError
from tui.app import ChatApp
from tui.screens.chat import ChatScreen
from tui.settings import ChatSettings, Launch
from tui.store import ChatStore
from tui.widgets.message import MessageView

SIZE = (120, 40)  # a common terminal: what the app lays out and draws per frame
WARMUP_TOKENS = 16
HANG_S = 1800.0  # a hang guard for one answer, never a speed limit
POLL_S = 0.05
ROUTE = "chat"
Progress = Callable[[str, str, str, float], None]  # workload, mode, surface, tok/s


class ChatBenchError(LocalspecError):
    """An answer inside the app did not finish normally: the benchmark has no figure for it."""


@dataclass(frozen=True)
class ChatBenchOptions:
    repeats: int
    max_tokens: int
    size: tuple[int, int] = SIZE


@dataclass(frozen=True)
class SurfaceRun:
    """One answer on one surface; `text` is compared across surfaces (greedy: the same)."""

    workload: str
    mode: str
    repeat: int
    surface: str  # "chat" or "complete"
    prompt_tokens: int
    tokens: int
    tokens_per_second: float
    finish_reason: str
    text: str
    # the app thread's CPU time per token from the first streamed token on (0: complete)
    app_ms_per_token: float = 0.0


@dataclass(frozen=True)
class ChatBenchResult:
    runs: list[SurfaceRun]
    plain: list[SurfaceRun]  # `complete` in mode off, once per prompt: the machine's plain speed
    threads: int


def chat_modes(modes: Sequence[Mode]) -> list[Mode]:
    """The modes a conversation can be set to (its settings keep a mode and a draft length);
    others are refused with what to use instead."""
    for mode in modes:
        spec = mode.spec
        settable = spec is not None and spec == _conversation(mode, 1).spec(SpecSettings())
        if not settable:
            raise UsageError(
                f"mode {mode.name!r} cannot be set in a chat conversation: the chat surface "
                f"takes off, auto, ngram, draft:K or hybrid[:K]"
            )
    return list(modes)


def _conversation(mode: Mode, max_tokens: int) -> ChatSettings:
    """The conversation settings that give `mode`: greedy, no system prompt."""
    assert mode.spec is not None
    return ChatSettings(
        spec_mode=mode.spec.mode, draft_max=mode.spec.draft_max, max_tokens=max_tokens
    )


def run_chat_bench(
    runtime: Runtime,
    workloads: Sequence[Workload],
    modes: Sequence[Mode],
    options: ChatBenchOptions,
    progress: Progress,
) -> ChatBenchResult:
    """Every prompt on both surfaces, in every mode, `options.repeats` times."""
    bench = _ChatBench(runtime, options, progress)
    runs, plain = asyncio.run(bench.drive(list(workloads), list(modes)))
    return ChatBenchResult(runs, plain, runtime.models.target_context.n_threads)


@dataclass(frozen=True)
class _Ask:
    """One answer to get: `repeat` -1 is a warm-up, neither reported nor kept."""

    workload: Workload
    mode: Mode
    repeat: int
    max_tokens: int


class _ChatBench:
    """The app on the shared runtime, and the `complete` path beside it."""

    def __init__(self, runtime: Runtime, options: ChatBenchOptions, progress: Progress) -> None:
        self.runtime = runtime
        self.options = options
        self.progress = progress
        self.launch = Launch(runtime=runtime.settings, model_label="bench")

    async def drive(
        self, workloads: list[Workload], modes: list[Mode]
    ) -> tuple[list[SurfaceRun], list[SurfaceRun]]:
        runtime = self.runtime
        with tempfile.TemporaryDirectory() as folder:
            store = ChatStore(Path(folder) / "bench.sqlite3")
            app = ChatApp(self.launch, lambda _settings, _notify: runtime, store)
            async with app.run_test(size=self.options.size) as pilot:
                try:
                    return await self._all(pilot, app.chat, workloads, modes)
                finally:
                    # the bench owns the runtime and closes it once, after the app
                    app.host.runtime = None

    async def _all(
        self, pilot: Pilot[None], screen: ChatScreen, workloads: list[Workload], modes: list[Mode]
    ) -> tuple[list[SurfaceRun], list[SurfaceRun]]:
        await _wait(lambda: not screen.model_loading, "the app to take the model")
        for mode in modes:  # calibration, the draft's first load, the first allocations
            warmup = _Ask(workloads[0], mode, -1, WARMUP_TOKENS)
            for surface in ("complete", "chat"):
                await self._answer(pilot, screen, surface, warmup)
        runs: list[SurfaceRun] = []
        tokens = self.options.max_tokens
        for repeat in range(self.options.repeats):
            for workload in workloads:
                for mode in modes:
                    # each surface goes first in every other pair: neither always runs right
                    # after a long prefill, or on a machine warmed up by the other
                    first = len(runs) // 2 % 2 == 0
                    for surface in ("chat", "complete") if first else ("complete", "chat"):
                        ask = _Ask(workload, mode, repeat, tokens)
                        runs.append(await self._answer(pilot, screen, surface, ask))
        plain = [r for r in runs if r.surface == "complete" and r.mode == "off" and r.repeat == 0]
        if not plain:
            off = parse_mode("off")
            for workload in workloads:
                ask = _Ask(workload, off, 0, tokens)
                plain.append(await self._answer(pilot, screen, "complete", ask))
        return runs, plain

    async def _answer(
        self, pilot: Pilot[None], screen: ChatScreen, surface: str, ask: _Ask
    ) -> SurfaceRun:
        settings = _conversation(ask.mode, ask.max_tokens)
        prompt = self._primed(ask.workload.prompt, screen)
        app_ms_per_token = 0.0
        if surface == "chat":
            stats, text, app_ms_per_token = await _chat_answer(
                pilot, screen, ask.workload.prompt, settings
            )
        else:
            stats, text = self._complete_answer(prompt, settings, screen)
        if ask.repeat >= 0:
            self.progress(ask.workload.id, ask.mode.name, surface, stats.tokens_per_second)
        return SurfaceRun(
            ask.workload.id,
            ask.mode.name,
            ask.repeat,
            surface,
            stats.prompt_tokens,
            stats.generated_tokens,
            stats.tokens_per_second,
            stats.finish_reason,
            text,
            app_ms_per_token,
        )

    def _primed(self, prompt: str, screen: ChatScreen) -> list[int]:
        """The rendered chat prompt, with the draft model (if loaded) caught up on it."""
        with screen.host.lock:
            tokens = self.runtime.prompts.chat_prompt([Message("user", prompt)])
            draft = self.runtime.models.draft_context
            if draft is not None:
                draft.prefill(tokens[:-1])
        return tokens

    def _complete_answer(
        self, prompt: list[int], settings: ChatSettings, screen: ChatScreen
    ) -> tuple[GenerationStats, str]:
        """What `localspec complete` does in-process, with the conversation's settings."""
        request = GenerationRequest(
            prompt=prompt,
            max_tokens=settings.max_tokens,
            sampling=settings.sampling(self.launch.sampling),
            spec=settings.spec(self.launch.spec),
            route=ROUTE,
        )
        with screen.host.lock:
            for event in self.runtime.generate(request):
                if isinstance(event, Finished):
                    return event.stats, event.text
        raise ChatBenchError("the engine ended without finishing the answer")


async def _chat_answer(
    pilot: Pilot[None], screen: ChatScreen, prompt: str, settings: ChatSettings
) -> tuple[GenerationStats, str, float]:
    """Type `prompt` into a new conversation, press Enter, and wait for the whole answer;
    also the app thread's CPU milliseconds per token while the answer streamed (this
    coroutine runs on that thread)."""
    await screen.start_new()
    screen.settings = settings
    box = screen.prompt
    box.focus()
    box.insert(prompt)
    earlier = screen.stats
    await pilot.press("enter")

    def streaming() -> bool:  # this turn's figures, once its first token is in (or it ended)
        stats = screen.stats
        if stats is None or stats is earlier:
            return False
        return stats.tokens > 0 or screen.turn is None

    def answered() -> bool:
        if screen.turn is not None:  # checked first: querying the widgets costs UI time
            return False
        answers = screen.query(MessageView).filter(".assistant")
        return bool(answers) and answers.last().status != "streaming"

    await _wait(streaming, "the answer's first token in the app")
    cpu, tokens = time.thread_time(), screen.stats.tokens if screen.stats else 0
    await _wait(answered, "the answer in the app")
    cpu = time.thread_time() - cpu
    answer = screen.query(MessageView).filter(".assistant").last()
    final = screen.stats.final if screen.stats is not None else None
    if final is None or answer.status != "complete":
        notes = [str(n.message) for n in pilot.app._notifications]
        raise ChatBenchError(f"the app's answer ended {answer.status}: {'; '.join(notes)}")
    return final, answer.content, 1000 * cpu / max(final.generated_tokens - tokens, 1)


async def _wait(condition: Callable[[], bool], what: str) -> None:
    """Poll with a plain sleep: `Pilot.pause` queues a callback on every widget each time,
    work on the UI thread that would be counted against the app's speed."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if time.monotonic() > deadline:
            raise ChatBenchError(f"gave up after {HANG_S:.0f}s waiting for {what}")
        await asyncio.sleep(POLL_S)


# -- the report ---------------------------------------------------------------------------


def summarise(result: ChatBenchResult) -> dict[str, Any]:
    """Per mode and prompt: median tok/s of each surface over the repeats, their ratio, and
    the app thread's CPU time per token; per mode: the median of the ratios."""
    report: dict[str, Any] = {}
    for mode in dict.fromkeys(r.mode for r in result.runs):
        rows: dict[str, Any] = {}
        for workload in dict.fromkeys(r.workload for r in result.runs):
            runs = [r for r in result.runs if r.mode == mode and r.workload == workload]
            complete = _median(r for r in runs if r.surface == "complete")
            chat = _median(r for r in runs if r.surface == "chat")
            chats = [r for r in runs if r.surface == "chat"]
            rows[workload] = {
                "complete_tokens_per_second": complete,
                "chat_tokens_per_second": chat,
                "ratio": chat / complete if complete > 0 else 0.0,
                "app_ms_per_token": statistics.median(r.app_ms_per_token for r in chats),
                "same_answers": _same_answers(runs),
                "runs": len(runs),
            }
        ratios = [row["ratio"] for row in rows.values()]
        report[mode] = {"prompts": rows, "median_ratio": statistics.median(ratios)}
    return report


def _median(runs: Iterable[SurfaceRun]) -> float:
    speeds = [r.tokens_per_second for r in runs]
    return statistics.median(speeds) if speeds else 0.0


def _same_answers(runs: list[SurfaceRun]) -> bool:
    """Whether each repeat's chat answer is the `complete` answer (greedy decoding)."""
    by_repeat: dict[int, set[str]] = {}
    for run in runs:
        by_repeat.setdefault(run.repeat, set()).add(run.text)
    return all(len(texts) == 1 for texts in by_repeat.values())


def plain_speed(result: ChatBenchResult) -> float:
    return _median(result.plain)


def format_chat_report(result: ChatBenchResult, report: dict[str, Any]) -> str:
    """A Markdown table per prompt and mode, the median ratios, and the plain speed."""
    lines = [
        "| prompt | mode | complete tok/s | chat tok/s | chat/complete | app CPU ms/token "
        "| same answer |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for mode, summary in report.items():
        for workload, row in summary["prompts"].items():
            lines.append(
                f"| {workload} | {mode} | {row['complete_tokens_per_second']:.1f} | "
                f"{row['chat_tokens_per_second']:.1f} | {row['ratio']:.2f} | "
                f"{row['app_ms_per_token']:.1f} | {'yes' if row['same_answers'] else 'no'} |"
            )
    lines.append("")
    lines.extend(
        f"median chat/complete ({mode}): {summary['median_ratio']:.2f}"
        for mode, summary in report.items()
    )
    lines.append(
        f"plain decoding here (complete, off, median of {len(result.plain)} prompts): "
        f"{plain_speed(result):.1f} tok/s, llama.cpp threads: {result.threads}"
    )
    lines.append(
        "app CPU: the app thread's CPU time per token while the answer streams (Textual's "
        "layout and drawing, Markdown, the status bar): what the app takes from the decode"
    )
    return "\n".join(lines)


def chat_document(
    result: ChatBenchResult, report: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Any]:
    """The `--json` document: settings, the summary, the plain speed and every run."""
    return {
        "settings": {**settings, "threads": result.threads},
        "report": report,
        "plain_tokens_per_second": plain_speed(result),
        "runs": [asdict(run) for run in result.runs],
        "plain_runs": [asdict(run) for run in result.plain],
    }
