"""The prompt bench's table and JSON document (`localspec.bench.prompt_speed`)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from localspec.bench.contender import Skipped
from localspec.bench.prompt_speed import PromptRun, Summary, ratios


def _spread(values: Sequence[float], digits: int = 1) -> str:
    """`median (min-max)`, or the one value."""
    if not values:
        return "-"
    middle = statistics.median(values)
    if len(values) == 1:
        return f"{middle:.{digits}f}"
    return f"{middle:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def format_prompt_report(
    summaries: Sequence[Summary],
    runs: Sequence[PromptRun],
    skipped: Sequence[Skipped],
    *,
    base: str,
    heading: str,
) -> str:
    """One line per size, phase and contender: its round trips, tokens/s and processed
    tokens; then, per size and phase, each other contender's time over `base`'s, per
    repeat."""
    lines = [
        heading,
        f"{'tokens':>6} {'phase':<11} {'server':<13} {'round trip s':>20} {'tok/s':>6} "
        f"{'processed':>9} {'completions s':>20}",
    ]
    for summary in summaries:
        processed = min(summary.processed) if summary.processed else 0
        completions = (
            f"{len(summary.completion_s)}: {_spread(summary.completion_s, 2)}"
            if summary.completion_s
            else "-"
        )
        lines.append(
            f"{summary.size:>6} {summary.phase:<11} {summary.name[:13]:<13} "
            f"{_spread(summary.seconds):>20} {summary.tokens_per_s:>6.1f} {processed:>9} "
            f"{completions:>20}"
        )
    names = [n for n in dict.fromkeys(s.name for s in summaries) if n != base]
    for size, phase in dict.fromkeys((s.size, s.phase) for s in summaries):
        for name in names:
            each = ratios(runs, name, base, size, phase)
            if each:
                per_repeat = ", ".join(f"{value:.3f}" for value in each)
                lines.append(
                    f"{size} tokens, {phase}: {name} / {base} median "
                    f"{statistics.median(each):.3f} (repeats: {per_repeat})"
                )
    lines += [f"skipped {item.name}: {item.reason}" for item in skipped]
    return "\n".join(lines)


def prompt_document(
    summaries: Sequence[Summary],
    runs: Sequence[PromptRun],
    settings: dict[str, Any],
    *,
    base: str,
) -> dict[str, Any]:
    return {
        "settings": settings,
        "runs": [
            {
                "server": run.name,
                "size": run.size,
                "repeat": run.repeat,
                "phase": run.phase,
                "seconds": run.seconds,
                "prompt_n": run.reply.prompt_n,
                "prompt_ms": run.reply.prompt_ms,
                "completion_s": [reply.seconds for reply in run.completions],
            }
            for run in runs
        ],
        "ratios": [
            {
                "server": s.name,
                "base": base,
                "size": s.size,
                "phase": s.phase,
                "each": (each := ratios(runs, s.name, base, s.size, s.phase)),
                "median": statistics.median(each) if each else None,
            }
            for s in summaries
            if s.name != base
        ],
    }
