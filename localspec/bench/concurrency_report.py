"""The concurrency bench's report: per contender, the editor's round trips and the chat's speed,
each alone and beside the other, as medians over the repeats with their range.

A repeat's figures come from phases that ran back to back on the same server, so its ratios
(during / alone for the editor, with / alone for the chat) pair like with like; the report
gives the median of those per-repeat ratios, not a ratio of medians. A repeat's p95 is the
nearest rank over its K round trips: with a handful of completions, one of the slowest.
The issue's targets (`TARGETS`) are read off the medians: a line says whether each is met,
and whether localspec's ratios are at or better than llama-server's from the same run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from localspec.bench.concurrency import LLAMA_SLOTS, ConcurrencyResult, Round
from localspec.bench.editor import LLAMA_SERVER, LOCALSPEC, Reply
from localspec.bench.editor_report import nearest_rank

FIM_RATIO_TARGET = 1.5  # the editor's median round trip during a chat, over its own alone
CHAT_RATIO_TARGET = 0.8  # the chat's tokens/s beside the editor, over its own alone


@dataclass(frozen=True)
class Spread:
    """A median over repeats and the range around it."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        kept = [value for value in values if not math.isnan(value)]
        if not kept:
            return cls(math.nan, math.nan, math.nan)
        return cls(statistics.median(kept), min(kept), max(kept))

    def text(self, unit: str, digits: int = 2) -> str:
        if math.isnan(self.median):
            return "-"
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f})"


@dataclass(frozen=True)
class ContenderSummary:
    repeats: int
    fim_alone_median_s: Spread
    fim_during_median_s: Spread
    fim_median_ratio: Spread
    fim_alone_p95_s: Spread
    fim_during_p95_s: Spread
    fim_p95_ratio: Spread
    chat_alone_tokens_per_s: Spread
    chat_during_tokens_per_s: Spread
    chat_ratio: Spread
    chat_first_token_s: Spread  # alone
    chat_during_first_token_s: Spread  # beside the editor (with a context: its prompt's time)
    fim_while_streaming: int  # completions answered before the chat's last chunk
    fim_during: int  # completions sent during the chats


def _median_s(replies: Sequence[Reply]) -> float:
    return statistics.median(reply.seconds for reply in replies) if replies else math.nan


def _p95_s(replies: Sequence[Reply]) -> float:
    return nearest_rank([reply.seconds for reply in replies], 0.95)


def _over(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def summarise(result: ConcurrencyResult) -> dict[str, ContenderSummary]:
    """Per contender that completed at least one repeat, in the order they first ran."""
    names = list(dict.fromkeys(round_.name for round_ in result.rounds))
    summary = {}
    for name in names:
        rounds = [round_ for round_ in result.rounds if round_.name == name]

        def spread(figure: Callable[[Round], float], rounds: list[Round] = rounds) -> Spread:
            return Spread.of([figure(round_) for round_ in rounds])

        summary[name] = ContenderSummary(
            repeats=len(rounds),
            fim_alone_median_s=spread(lambda r: _median_s(r.fim_alone)),
            fim_during_median_s=spread(lambda r: _median_s(r.fim_during)),
            fim_median_ratio=spread(
                lambda r: _over(_median_s(r.fim_during), _median_s(r.fim_alone))
            ),
            fim_alone_p95_s=spread(lambda r: _p95_s(r.fim_alone)),
            fim_during_p95_s=spread(lambda r: _p95_s(r.fim_during)),
            fim_p95_ratio=spread(lambda r: _over(_p95_s(r.fim_during), _p95_s(r.fim_alone))),
            chat_alone_tokens_per_s=spread(lambda r: r.chat_alone.tokens_per_s),
            chat_during_tokens_per_s=spread(lambda r: r.chat_during.tokens_per_s),
            chat_ratio=spread(
                lambda r: _over(r.chat_during.tokens_per_s, r.chat_alone.tokens_per_s)
            ),
            chat_first_token_s=spread(lambda r: r.chat_alone.first_token_s),
            chat_during_first_token_s=spread(lambda r: r.chat_during.first_token_s),
            fim_while_streaming=sum(sum(r.while_streaming) for r in rounds),
            fim_during=sum(len(r.fim_during) for r in rounds),
        )
    return summary


ROWS: tuple[tuple[str, Callable[[ContenderSummary], str]], ...] = (
    ("FIM median alone", lambda s: s.fim_alone_median_s.text(" s")),
    ("FIM median during chat", lambda s: s.fim_during_median_s.text(" s")),
    ("  during / alone", lambda s: s.fim_median_ratio.text("x")),
    ("FIM p95 alone", lambda s: s.fim_alone_p95_s.text(" s")),
    ("FIM p95 during chat", lambda s: s.fim_during_p95_s.text(" s")),
    ("  during / alone", lambda s: s.fim_p95_ratio.text("x")),
    ("chat tok/s alone", lambda s: s.chat_alone_tokens_per_s.text("", 1)),
    ("chat tok/s with editor", lambda s: s.chat_during_tokens_per_s.text("", 1)),
    ("  with / alone", lambda s: s.chat_ratio.text("x")),
    ("chat first token alone", lambda s: s.chat_first_token_s.text(" s")),
    ("chat first token with editor", lambda s: s.chat_during_first_token_s.text(" s")),
    ("FIM back while chat ran", lambda s: f"{s.fim_while_streaming} of {s.fim_during}"),
    ("repeats", lambda s: str(s.repeats)),
)


def targets(summary: dict[str, ContenderSummary]) -> dict[str, Any]:
    """The issue's targets per contender, and localspec's ratios against llama-server's."""
    met: dict[str, Any] = {
        name: {
            "fim_median_ratio_within": s.fim_median_ratio.median <= FIM_RATIO_TARGET,
            "chat_ratio_at_least": s.chat_ratio.median >= CHAT_RATIO_TARGET,
        }
        for name, s in summary.items()
    }
    if LOCALSPEC in summary and LLAMA_SERVER in summary:
        ours, theirs = summary[LOCALSPEC], summary[LLAMA_SERVER]
        met["localspec_at_or_better"] = {
            "fim_median_ratio": ours.fim_median_ratio.median <= theirs.fim_median_ratio.median,
            "chat_ratio": ours.chat_ratio.median >= theirs.chat_ratio.median,
        }
    return met


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def format_concurrency_report(
    result: ConcurrencyResult, summary: dict[str, ContenderSummary], *, heading: str
) -> str:
    names = list(summary)
    columns = [
        [f"{name} -np {LLAMA_SLOTS}" if name == LLAMA_SERVER else name]
        + [cell(summary[name]) for _, cell in ROWS]
        for name in names
    ]
    widths = [max(len(text) for text in column) for column in columns]
    labels = ["", *(label for label, _ in ROWS)]
    label_width = max(len(label) for label in labels)
    lines = [heading, ""]
    for row, label in enumerate(labels):
        texts = [column[row] for column in columns]
        cells = [
            t.center(w) if row == 0 else t.rjust(w) for t, w in zip(texts, widths, strict=True)
        ]
        lines.append(" | ".join([label.ljust(label_width), *cells]))
    lines.append("")
    met = targets(summary)
    for name in names:
        s = summary[name]
        lines.append(
            f"{name}: FIM during / alone {s.fim_median_ratio.median:.2f}x "
            f"(target <= {FIM_RATIO_TARGET}x: {_yes(met[name]['fim_median_ratio_within'])}), "
            f"chat with / alone {s.chat_ratio.median:.2f}x "
            f"(target >= {CHAT_RATIO_TARGET}x: {_yes(met[name]['chat_ratio_at_least'])})"
        )
    if "localspec_at_or_better" in met:
        better = met["localspec_at_or_better"]
        lines.append(
            "localspec at or better than llama-server: FIM ratio "
            f"{_yes(better['fim_median_ratio'])}, chat ratio {_yes(better['chat_ratio'])}"
        )
    lines += [f"skipped {s.name}: {s.reason}" for s in result.skipped]
    return "\n".join(lines)


def _round_document(round_: Round) -> dict[str, Any]:
    record = asdict(round_)
    for phase in ("chat_alone", "chat_during"):
        record[phase]["tokens_per_s"] = getattr(round_, phase).tokens_per_s
    return record


def concurrency_document(
    result: ConcurrencyResult, summary: dict[str, ContenderSummary], settings: dict[str, Any]
) -> dict[str, Any]:
    """`--json`: the settings, the summary, the targets, and every repeat's replies."""
    return {
        "settings": settings,
        "summary": {name: asdict(s) for name, s in summary.items()},
        "targets": targets(summary),
        "rounds": [_round_document(round_) for round_ in result.rounds],
        "skipped": [asdict(s) for s in result.skipped],
    }
