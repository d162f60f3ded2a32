"""Turning samples into the per-category table, the JSON document and their numbers.

Speeds are medians; the ratio to `off` is the median of per-run ratios against `off`'s median
speed on the same prompt, so a fast prompt cannot flatter a slow mode. Every output is compared
with `off`'s tokens: greedy speculation should reproduce them, and where batched verification
flips a near-tie the run is counted as differing, with where it first differs, never hidden.
Constrained runs also report what the constraint's masks cost per generated token.
"""

from __future__ import annotations

import statistics
from typing import Any

from localspec.bench.contender import Sample, Skipped

ALL = "all"
_MIB = 1024 * 1024


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a length difference counts)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _row(mine: list[Sample], off_speed: dict[str, float], off_tokens: dict[str, list[int]]) -> Any:
    differences = [first_difference(s.tokens, off_tokens[s.workload]) for s in mine]
    peaks = [s.peak_rss_bytes for s in mine if s.peak_rss_bytes is not None]
    masked = [s.details["mask_s_per_token"] for s in mine if s.details.get("constraint")]
    return {
        "tokens_per_second": statistics.median(s.tokens_per_second for s in mine),
        "ratio_to_off": statistics.median(
            s.tokens_per_second / off_speed[s.workload] if off_speed[s.workload] else 0.0
            for s in mine
        ),
        "acceptance_rate": statistics.median(s.acceptance_rate for s in mine),
        "mean_acceptance_length": statistics.median(s.mean_acceptance_length for s in mine),
        "peak_rss_mib": max(peaks) / _MIB if peaks else None,
        # the constraint's guide (masks, validating drafts, rollback), median over its runs
        "mask_ms_per_token": statistics.median(masked) * 1e3 if masked else None,
        "runs": len(mine),
        "outputs_differing_from_off": sum(d is not None for d in differences),
        "first_differences": sorted(d for d in differences if d is not None),
        # plain decoding's top-2 gap where each differing run parts from it
        "divergence_gaps": sorted(
            s.details["divergence"]["off_top2_gap"] for s in mine if "divergence" in s.details
        ),
    }


def summarise(samples: list[Sample], modes: list[str]) -> dict[str, dict[str, Any]]:
    """{category (and "all"): {mode: row}} for the modes that have samples."""
    off_runs: dict[str, list[Sample]] = {}
    for sample in samples:
        if sample.mode == "off":
            off_runs.setdefault(sample.workload, []).append(sample)
    off_speed = {w: statistics.median(s.tokens_per_second for s in r) for w, r in off_runs.items()}
    off_tokens = {w: r[-1].tokens for w, r in off_runs.items()}
    categories = sorted({s.category for s in samples})
    report: dict[str, dict[str, Any]] = {}
    for category in [*categories, ALL]:
        rows: dict[str, Any] = {}
        for mode in modes:
            mine = [s for s in samples if s.mode == mode and category in (s.category, ALL)]
            if mine:
                rows[mode] = _row(mine, off_speed, off_tokens)
        report[category] = rows
    return report


def _gaps(row: dict[str, Any]) -> str:
    gaps = row.get("divergence_gaps") or []
    return f" (gaps {', '.join(f'{g:.2f}' for g in gaps)})" if gaps else ""


def _mask_costs(report: dict[str, dict[str, Any]], modes: list[str]) -> list[str]:
    """One line per category with constrained runs: the masks' cost per token in each mode."""
    lines = []
    for category, rows in report.items():
        costs = [
            f"{mode} {rows[mode]['mask_ms_per_token']:.3f}"
            for mode in modes
            if mode in rows and rows[mode]["mask_ms_per_token"] is not None
        ]
        if costs and category != ALL:
            lines.append(f"constraint masks, ms per token ({category}): {', '.join(costs)}")
    return lines


def format_report(
    report: dict[str, dict[str, Any]], modes: list[str], skipped: list[Skipped], rss_method: str
) -> str:
    """A Markdown table (pastes into issues and READMEs as it is), then what was skipped."""
    lines = [
        "| category | mode | tok/s (median) | x off (median) | acceptance | mean accepted len "
        "| peak RSS MiB | runs differing from off |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for category, rows in report.items():
        for mode in modes:
            if mode not in rows:
                continue
            row = rows[mode]
            rss = "-" if row["peak_rss_mib"] is None else f"{row['peak_rss_mib']:.0f}"
            lines.append(
                f"| {category} | {mode} | {row['tokens_per_second']:.1f} | "
                f"{row['ratio_to_off']:.2f} | {row['acceptance_rate']:.2f} | "
                f"{row['mean_acceptance_length']:.2f} | {rss} | "
                f"{row['outputs_differing_from_off']}/{row['runs']}{_gaps(row)} |"
            )
    lines.append("")
    lines.extend(_mask_costs(report, modes))
    lines.append(
        f"peak RSS: {rss_method} of this process (target and draft) for localspec's modes; "
        f"the baseline's own process for lcp-lookup and server modes"
    )
    lines.extend(f"skipped {item.name}: {item.reason}" for item in skipped)
    return "\n".join(lines)


def document(
    report: dict[str, dict[str, Any]],
    samples: list[Sample],
    skipped: list[Skipped],
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The `--json` document: settings, the summary, what was skipped, and every run."""
    return {
        "settings": settings,
        "report": report,
        "skipped": [{"name": s.name, "reason": s.reason} for s in skipped],
        "runs": [s.to_dict() for s in samples],
    }
