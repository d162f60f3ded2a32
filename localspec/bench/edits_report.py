"""The edit bench's tables: per variant, how many answers applied and how many were right,
and their generation speed; per language, what was right; then every answer that was not.

Speed is the median of the answers' tokens per second with the lowest and highest beside it:
answers differ between variants (the grammar changes what is written), so speeds compare work
of the same kind, not the same tokens, and a difference inside that spread says nothing.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from localspec.bench.edits import APPLIED, LENIENT, EditRun


def _percent(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def variant_rows(runs: Sequence[EditRun], variants: Sequence[str]) -> list[str]:
    """The summary: answers applied (strictly, and with the lenient readings the chat shows
    before writing), right, cut at the token limit, and tokens per second."""
    rows = [
        "| variant | applied | of them lenient | correct | cut at max tokens "
        "| tok/s median (min-max) | drafted / accepted |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in variants:
        mine = [run for run in runs if run.variant == name]
        if not mine:
            continue
        applied = [run for run in mine if run.outcome in (APPLIED, LENIENT)]
        lenient = sum(run.outcome == LENIENT for run in mine)
        correct = sum(run.correct for run in mine)
        cut = sum(run.finish_reason == "length" for run in mine)
        speeds = [run.tokens_per_second for run in mine if run.tokens]
        speed = (
            f"{statistics.median(speeds):.1f} ({min(speeds):.1f}-{max(speeds):.1f})"
            if speeds
            else "-"
        )
        drafted = sum(run.drafted for run in mine)
        accepted = sum(run.accepted for run in mine)
        rows.append(
            f"| {name} | {_percent(len(applied), len(mine))} | {lenient} "
            f"| {_percent(correct, len(mine))} | {cut} | {speed} | {drafted} / {accepted} |"
        )
    return rows


def language_rows(runs: Sequence[EditRun], variants: Sequence[str]) -> list[str]:
    """Correct answers per language and variant."""
    languages = list(dict.fromkeys(run.language for run in runs))
    rows = [
        "| language | " + " | ".join(variants) + " |",
        "| --- |" + " ---: |" * len(variants),
    ]
    for language in languages:
        cells = []
        for name in variants:
            mine = [r for r in runs if r.language == language and r.variant == name]
            cells.append(f"{sum(r.correct for r in mine)}/{len(mine)}" if mine else "-")
        rows.append(f"| {language} | " + " | ".join(cells) + " |")
    return rows


def failure_rows(runs: Sequence[EditRun]) -> list[str]:
    """Every answer that was not right, with why: a figure a reader can check."""
    return [
        f"- {run.task} ({run.variant}): {run.outcome}; {run.reason or 'wrong'}"
        for run in runs
        if not run.correct
    ]


def format_edit_report(runs: Sequence[EditRun], variants: Sequence[str]) -> str:
    failures = failure_rows(runs)
    parts = [
        "\n".join(variant_rows(runs, variants)),
        "\n".join(language_rows(runs, variants)),
        "not right:\n" + "\n".join(failures) if failures else "every answer was right",
    ]
    return "\n\n".join(parts)
