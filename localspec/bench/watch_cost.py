"""What watching speculation costs: generations with the watchers listening (`/metrics`'
counters and histograms, the history file) against the same generations without, in one run.

Both arms share the loaded runtime and run each prompt back to back, in ABBA order over the
repeats (so neither arm always runs first, after a prefill, or on a warmer machine); the
guard stays off in both, since it changes what runs. Beside the tokens per second, the time
spent inside the watchers is measured directly, per request: the ratio of speeds is bounded
by run-to-run noise (up to 15% here), the direct time is not.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from localspec.messages import Message
from localspec.observe.history import History
from localspec.observe.observation import Observation
from localspec.runtime import Runtime
from localspec.server.metrics import ServerMetrics
from localspec.speculative.engine import Finished, GenerationRequest
from localspec.speculative.settings import SpecSettings


@dataclass
class WatchCostResult:
    """Tokens per second per arm ("off", "on"), in run order, and the seconds each watched
    request spent in the watchers."""

    speeds: dict[str, list[float]] = field(default_factory=lambda: {"off": [], "on": []})
    watcher_s: list[float] = field(default_factory=list)
    generation_s: list[float] = field(default_factory=list)

    @property
    def ratios(self) -> list[float]:
        """on / off per pair of runs of one prompt."""
        return [on / off for on, off in zip(self.speeds["on"], self.speeds["off"], strict=True)]


class _Timed:
    """The watchers of the `on` arm, each call timed."""

    def __init__(self, metrics: ServerMetrics, history: History, spent: list[float]) -> None:
        self.metrics, self.history, self.spent = metrics, history, spent

    def __call__(self, observation: Observation) -> None:
        started = time.perf_counter()
        self.metrics.observe(observation)
        self.history.record(observation)
        self.spent.append(time.perf_counter() - started)


def run_watch_cost(
    runtime: Runtime,
    questions: Sequence[str],
    spec: SpecSettings,
    *,
    repeats: int,
    max_tokens: int,
    history_file: Path,
    progress: Callable[[str], None] = lambda _line: None,
) -> WatchCostResult:
    """Each question `repeats` times in each arm, ABBA."""
    result = WatchCostResult()
    requests = [
        GenerationRequest(
            runtime.prompts.chat_prompt([Message("user", question)]),
            max_tokens=max_tokens,
            spec=spec,
            route="chat",
        )
        for question in questions
    ]
    with History(history_file) as history:
        timed = _Timed(ServerMetrics(), history, result.watcher_s)
        for repeat in range(repeats):
            order = ("off", "on") if repeat % 2 == 0 else ("on", "off")
            for request, arm in ((r, a) for r in requests for a in order):
                finished = _generate(runtime, request, timed if arm == "on" else None)
                result.speeds[arm].append(finished.stats.tokens_per_second)
                if arm == "on":
                    result.generation_s.append(finished.stats.total_s)
                progress(f"{arm} {finished.stats.tokens_per_second:.1f} tok/s")
    return result


def _generate(runtime: Runtime, request: GenerationRequest, watcher: _Timed | None) -> Finished:
    """One generation, with `watcher` listening to the runtime's watch while it runs."""
    if watcher is not None:
        runtime.watch.listeners.append(watcher)
    try:
        finished = list(runtime.generate(request))[-1]
    finally:
        if watcher is not None:
            runtime.watch.listeners.remove(watcher)
    assert isinstance(finished, Finished)
    return finished


def format_watch_cost(result: WatchCostResult) -> str:
    """The report: speeds per arm, the ratio with its spread, and the watchers' own time."""
    ratios = sorted(result.ratios)
    share = sum(result.watcher_s) / sum(result.generation_s) if result.generation_s else 0.0
    per_request = statistics.median(result.watcher_s) if result.watcher_s else 0.0
    return "\n".join(
        [
            "| arm | median tok/s | runs |",
            "| --- | --- | --- |",
            *(
                f"| watchers {arm} | {statistics.median(speeds):.2f} | {len(speeds)} |"
                for arm, speeds in result.speeds.items()
            ),
            "",
            f"on/off: median {statistics.median(ratios):.3f}x "
            f"(min {ratios[0]:.3f}, max {ratios[-1]:.3f}, {len(ratios)} pairs)",
            f"time inside the watchers: median {per_request * 1e6:.0f} us per request, "
            f"{share:.4%} of the watched requests' time",
        ]
    )
