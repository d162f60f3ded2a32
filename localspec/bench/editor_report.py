"""The editor replay's report: per request kind, each server's prompt work and round trips.

"processed" is the sum of `timings.prompt_n` (prompt tokens a server computed), "prompt" the
sum of `prompt_n + cache_n` (the prompts' sizes, so a server that cut a prompt shorter shows
it), round trips are the client's wall time per request. p95 is the nearest-rank percentile:
with a few dozen requests it is one of the slowest, not an interpolation.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from localspec.bench.editor import LLAMA_SERVER, LOCALSPEC, EditorResult
from localspec.bench.llama_vim import FIM, KINDS, SPECULATIVE, WARMUP

ROWS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (FIM, (FIM,)),
    (SPECULATIVE, (SPECULATIVE,)),
    ("completions", (FIM, SPECULATIVE)),
    (WARMUP, (WARMUP,)),
    ("all", KINDS),
)


@dataclass(frozen=True)
class KindSummary:
    requests: int
    processed: int
    prompt: int
    median_s: float
    p95_s: float
    cut: int


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


def summarise(result: EditorResult) -> dict[str, dict[str, KindSummary]]:
    """Per server, per row of `ROWS`."""
    summary: dict[str, dict[str, KindSummary]] = {}
    for name, replies in result.replies.items():
        rows = {}
        for label, kinds in ROWS:
            picked = [
                reply
                for request, reply in zip(result.requests, replies, strict=False)
                if request.kind in kinds
            ]
            seconds = [reply.seconds for reply in picked]
            rows[label] = KindSummary(
                requests=len(picked),
                processed=sum(reply.prompt_n for reply in picked),
                prompt=sum(reply.prompt_n + reply.cache_n for reply in picked),
                median_s=statistics.median(seconds) if seconds else math.nan,
                p95_s=nearest_rank(seconds, 0.95),
                cut=sum(reply.cut for reply in picked),
            )
        summary[name] = rows
    return summary


def total_processed(
    result: EditorResult, summary: dict[str, dict[str, KindSummary]], name: str
) -> int:
    """Every prompt token `name` computed: in its replies' timings and while idle."""
    return summary[name]["all"].processed + result.idle_tokens.get(name, 0)


def agreement(result: EditorResult) -> tuple[int, int] | None:
    """(completions both servers answered alike, completions), when both ran."""
    ours, theirs = result.replies.get(LOCALSPEC), result.replies.get(LLAMA_SERVER)
    if ours is None or theirs is None:
        return None
    pairs = [
        (a.content, b.content)
        for request, a, b in zip(result.requests, ours, theirs, strict=False)
        if request.kind != WARMUP
    ]
    return sum(a == b for a, b in pairs), len(pairs)


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 and not math.isnan(ours + theirs) else "-"


def format_editor_report(
    result: EditorResult, summary: dict[str, dict[str, KindSummary]], *, heading: str
) -> str:
    names = list(summary)
    cells = "{:>10} {:>8} {:>8} {:>8}"
    lines = [heading, ""]
    header = f"{'':<16}{'n':>4}"
    columns = f"{'kind':<16}{'':>4}"
    for name in names:
        header += f" | {name:^37}"
        columns += " | " + cells.format("processed", "prompt", "median", "p95")
    lines += [header, columns]
    for label, _ in ROWS:
        first = summary[names[0]][label] if names else None
        line = f"{label:<16}{first.requests if first else 0:>4}"
        for name in names:
            row = summary[name][label]
            line += " | " + cells.format(
                row.processed, row.prompt, f"{row.median_s:.2f} s", f"{row.p95_s:.2f} s"
            )
        lines.append(line)
    lines.append("")
    if LOCALSPEC in summary and LLAMA_SERVER in summary:
        ours, theirs = summary[LOCALSPEC]["completions"], summary[LLAMA_SERVER]["completions"]
        lines.append(
            f"localspec / llama-server on completions: processed "
            f"{_ratio(ours.processed, theirs.processed)}, median round trip "
            f"{_ratio(ours.median_s, theirs.median_s)}, p95 {_ratio(ours.p95_s, theirs.p95_s)}"
        )
        every = {name: total_processed(result, summary, name) for name in names}
        lines.append(
            f"localspec / llama-server on every request, warm-ups and idle work included: "
            f"processed {_ratio(every[LOCALSPEC], every[LLAMA_SERVER])} "
            f"({every[LOCALSPEC]:,} against {every[LLAMA_SERVER]:,} tokens)"
        )
    for name in names:
        idle = result.idle_tokens.get(name, 0)
        if idle:
            lines.append(f"{name}: {idle:,} prompt tokens processed while idle (cut prompts)")
    lines += [decoding_line(result, name) for name in names]
    agreed = agreement(result)
    if agreed is not None:
        lines.append(f"answers equal on {agreed[0]} of {agreed[1]} completions")
    for name in names:
        cut = summary[name]["all"].cut
        if cut:
            lines.append(f"{name}: {cut} answers cut short by t_max_prompt_ms")
    lines += [f"skipped {s.name}: {s.reason}" for s in result.skipped]
    return "\n".join(lines)


def decoding_line(result: EditorResult, name: str) -> str:
    """How `name` spent the completions' round trips: prompt and decoding time as its
    timings report them, tokens generated, and its drafts (none for llama-server here)."""
    replies = [
        reply
        for request, reply in zip(result.requests, result.replies[name], strict=False)
        if request.kind != WARMUP
    ]
    prompt_s = sum(reply.prompt_ms for reply in replies) / 1000
    decode_s = sum(reply.predicted_ms for reply in replies) / 1000
    generated = sum(reply.predicted_n for reply in replies)
    drafted = sum(reply.draft_n for reply in replies)
    accepted = sum(reply.draft_accepted for reply in replies)
    per_token = f"{1000 * decode_s / generated:.0f} ms/token" if generated else "-"
    return (
        f"{name} on completions: prompt {prompt_s:.1f} s, decoding {decode_s:.1f} s for "
        f"{generated} tokens ({per_token}), drafted {drafted}, accepted {accepted}"
    )


def editor_document(
    result: EditorResult,
    summary: dict[str, dict[str, KindSummary]],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """`--json`: the settings, the summary, and every request with every server's reply."""
    requests = []
    for index, request in enumerate(result.requests):
        replies = {
            name: asdict(replies[index])
            for name, replies in result.replies.items()
            if index < len(replies)
        }
        requests.append(
            {"index": index, "kind": request.kind, "event": request.event, "replies": replies}
        )
    return {
        "settings": settings,
        "summary": {
            name: {label: asdict(row) for label, row in rows.items()}
            for name, rows in summary.items()
        },
        "agreement": agreement(result),
        "idle_tokens": result.idle_tokens,
        "requests": requests,
        "skipped": [asdict(s) for s in result.skipped],
    }
