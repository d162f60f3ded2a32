"""Turning samples into the per-category table, the JSON document and their numbers.

Speeds are medians. The ratio to `off` pairs each run with `off`'s run on the same prompt in the
same repeat (they ran back to back, so they share the machine's state of the moment) and is the
median of those paired ratios: a fast prompt cannot flatter a slow mode, and a slow minute
slows both sides of a pair. Identical work differs by up to 15% between single runs here, so the
median alone decides nothing: each ratio carries a 95% percentile bootstrap interval of that
median, resampling each prompt's pairs within the prompt (every prompt keeps its weight; where a
prompt has a single pair, all pairs are resampled together), and the verdict is "faster" or
"slower" only where the interval leaves 1.0 out. Every output is compared
with `off`'s tokens: greedy speculation should reproduce them, and where batched verification
flips a near-tie the run is counted as differing, with where it first differs, never hidden.
Constrained runs also report what the constraint's masks cost per generated token.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from localspec.bench.contender import Sample, Skipped

ALL = "all"
_MIB = 1024 * 1024
RESAMPLES = 2000
CI_RULE = (
    "x off: median over runs of the run's tok/s / off's tok/s on the same prompt in the same "
    f"repeat; 95% CI: percentile bootstrap of that median ({RESAMPLES} resamples of the pairs "
    "within each prompt, of all pairs where a prompt has only one; none under 2 pairs)",
    "verdict: faster if the CI's low end is above 1.0, slower if its high end is below 1.0, "
    "else no difference",
)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (a length difference counts)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def paired_ratios(
    mine: list[Sample], off_runs: dict[tuple[str, int], Sample]
) -> dict[str, list[float]]:
    """{prompt: [speed / off's speed in the same repeat, by repeat]}; a run without an `off`
    run beside it has no pair and is left out."""
    pairs: dict[str, list[float]] = {}
    for sample in sorted(mine, key=lambda s: s.repeat):
        off = off_runs.get((sample.workload, sample.repeat))
        if off is not None:
            speed = off.tokens_per_second
            ratio = sample.tokens_per_second / speed if speed else 0.0
            pairs.setdefault(sample.workload, []).append(ratio)
    return pairs


def bootstrap_ci(pairs: dict[str, list[float]], seed: int = 0) -> tuple[float, float] | None:
    """The 95% percentile bootstrap interval of the median of all pairs, or None under 2.

    Each prompt's pairs are resampled within the prompt, so a prompt keeps its weight and the
    interval is the repeats' noise on these prompts. Where a prompt has a single pair that
    noise is unseen (resampling one value always gives it back), so all pairs are resampled
    together instead, which makes the spread between prompts the noise."""
    values = [ratios for ratios in pairs.values() if ratios]
    if sum(len(ratios) for ratios in values) < 2:
        return None
    if min(len(ratios) for ratios in values) < 2:
        values = [[ratio for ratios in values for ratio in ratios]]
    rng = np.random.default_rng(seed)
    resampled = np.concatenate(
        [rng.choice(np.array(ratios), size=(RESAMPLES, len(ratios))) for ratios in values], axis=1
    )
    low, high = np.percentile(np.median(resampled, axis=1), [2.5, 97.5])
    return float(low), float(high)


def verdict(ci: Sequence[float] | None) -> str | None:
    """Faster or slower than `off` only where the whole interval says so."""
    if ci is None:
        return None
    if ci[0] > 1.0:
        return "faster"
    if ci[1] < 1.0:
        return "slower"
    return "no difference"


def _row(
    mode: str,
    mine: list[Sample],
    off_runs: dict[tuple[str, int], Sample],
    off_tokens: dict[str, list[int]],
) -> Any:
    differences = [first_difference(s.tokens, off_tokens[s.workload]) for s in mine]
    peaks = [s.peak_rss_bytes for s in mine if s.peak_rss_bytes is not None]
    masked = [s.details["mask_s_per_token"] for s in mine if s.details.get("constraint")]
    pairs = paired_ratios(mine, off_runs)
    ci = None if mode == "off" else bootstrap_ci(pairs)
    return {
        "tokens_per_second": statistics.median(s.tokens_per_second for s in mine),
        "ratio_to_off": statistics.median(r for ratios in pairs.values() for r in ratios),
        "ratio_ci": None if ci is None else list(ci),
        "verdict": verdict(ci),
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
    off_runs = {(s.workload, s.repeat): s for s in samples if s.mode == "off"}
    off_tokens = {s.workload: s.tokens for s in samples if s.mode == "off"}
    categories = sorted({s.category for s in samples})
    report: dict[str, dict[str, Any]] = {}
    for category in [*categories, ALL]:
        rows: dict[str, Any] = {}
        for mode in modes:
            mine = [s for s in samples if s.mode == mode and category in (s.category, ALL)]
            if mine:
                rows[mode] = _row(mode, mine, off_runs, off_tokens)
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
        "| category | mode | tok/s (median) | x off (median) | x off 95% CI | verdict | acceptance "
        "| mean accepted len | peak RSS MiB | runs differing from off |",
        "| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for category, rows in report.items():
        for mode in modes:
            if mode not in rows:
                continue
            row = rows[mode]
            rss = "-" if row["peak_rss_mib"] is None else f"{row['peak_rss_mib']:.0f}"
            ci = "-" if row["ratio_ci"] is None else "-".join(f"{x:.2f}" for x in row["ratio_ci"])
            lines.append(
                f"| {category} | {mode} | {row['tokens_per_second']:.1f} | "
                f"{row['ratio_to_off']:.2f} | {ci} | {row['verdict'] or '-'} | "
                f"{row['acceptance_rate']:.2f} | "
                f"{row['mean_acceptance_length']:.2f} | {rss} | "
                f"{row['outputs_differing_from_off']}/{row['runs']}{_gaps(row)} |"
            )
    lines.append("")
    lines.extend(CI_RULE)
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
