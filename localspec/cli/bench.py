"""`localspec bench`: plain and speculative decoding side by side, in one process.

Every mode runs on the same loaded models, the same prompts and temperature 0, interleaved
(prompt by prompt, mode order rotated each repeat) so machine noise hits all modes alike.
Speed is reported as medians and as ratios to `off`; each speculative output is compared
with `off`'s output token by token, so any near-tie divergence is counted, not hidden.
The n-gram session cache is disabled here: it would learn the answers across repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from localspec.cli.options import draft_need, runtime_settings
from localspec.errors import UsageError
from localspec.runtime import Message, Runtime
from localspec.spec.engine import Finished, GenerationRequest, SpecMode, SpecSettings, TextChunk


@dataclass(frozen=True)
class Workload:
    id: str
    category: str
    prompt: str


@dataclass
class Run:
    mode: str
    workload: str
    category: str
    tokens: list[int] = field(default_factory=list)
    tokens_per_second: float = 0.0
    acceptance_rate: float = 0.0
    mean_acceptance_length: float = 0.0


def load_workloads(path: Path | None) -> list[Workload]:
    if path is None:
        text = resources.files("localspec").joinpath("workloads/default.jsonl").read_text()
    else:
        text = path.read_text()
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(Workload(**json.loads(line)))
            except (json.JSONDecodeError, TypeError) as exc:
                raise UsageError(f"workloads line {number}: {exc}") from exc
    return rows


def parse_mode(name: str) -> SpecSettings:
    """`off`, `auto`, `ngram`, `ngram:K`, `draft:K`, `hybrid`, `hybrid:K`."""
    base, _, k = name.partition(":")
    try:
        mode = SpecMode(base)
    except ValueError:
        raise UsageError(f"unknown mode {name!r}: use off, ngram, draft:K or hybrid:K") from None
    if not k:
        return SpecSettings(mode=mode)
    if mode is SpecMode.NGRAM:
        return SpecSettings(mode=mode, ngram_draft_max=int(k))
    return SpecSettings(mode=mode, draft_max=int(k))


def _generate(runtime: Runtime, tokens: list[int], spec: SpecSettings, max_tokens: int) -> Finished:
    request = GenerationRequest(prompt=tokens, max_tokens=max_tokens, spec=spec)
    for event in runtime.generate(request):
        if isinstance(event, Finished):
            return event
        assert isinstance(event, TextChunk)
    raise RuntimeError("generation ended without a Finished event")


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run_bench(args: argparse.Namespace) -> int:
    workloads = load_workloads(args.workloads)
    if args.category:
        workloads = [w for w in workloads if w.category in args.category]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    specs = {m: parse_mode(m) for m in modes}
    if "off" not in specs:
        raise UsageError("--modes must include off: ratios are relative to plain decoding")
    needs = [draft_need(s) for s in specs.values()]
    need_draft = True if True in needs else (None if None in needs else False)
    settings = runtime_settings(args, need_draft, ngram_cache=False)
    runs: list[Run] = []
    with Runtime(settings) as runtime:
        prompts = {w.id: runtime.chat_prompt([Message("user", w.prompt)]) for w in workloads}
        if any(s.uses_draft_model for s in specs.values()):
            runtime.load_draft()
        _generate(runtime, prompts[workloads[0].id], SpecSettings(SpecMode.OFF), 16)  # warm-up
        total = args.repeats * len(workloads) * len(modes)
        for repeat in range(args.repeats):
            order = modes[repeat % len(modes) :] + modes[: repeat % len(modes)]
            for workload in workloads:
                for mode in order:
                    done = _generate(runtime, prompts[workload.id], specs[mode], args.max_tokens)
                    stats = done.stats
                    runs.append(
                        Run(
                            mode,
                            workload.id,
                            workload.category,
                            done.tokens,
                            stats.tokens_per_second,
                            stats.acceptance_rate,
                            stats.mean_acceptance_length,
                        )
                    )
                    print(
                        f"\r[{len(runs)}/{total}] {workload.id:<16} {mode:<9} "
                        f"{stats.tokens_per_second:6.1f} tok/s",
                        end="",
                        file=sys.stderr,
                        flush=True,
                    )
        print(file=sys.stderr)
    report = summarise(runs, modes)
    print(format_report(report, modes))
    if args.json:
        args.json.write_text(json.dumps({"report": report, "runs": [r.__dict__ for r in runs]}))
    return 0


def summarise(runs: list[Run], modes: list[str]) -> dict[str, Any]:
    """Per category and mode: median tok/s, median per-prompt ratio to off, acceptance."""
    off_speed: dict[str, list[float]] = {}
    off_tokens: dict[str, list[int]] = {}
    for run in runs:
        if run.mode == "off":
            off_speed.setdefault(run.workload, []).append(run.tokens_per_second)
            off_tokens[run.workload] = run.tokens
    report: dict[str, Any] = {}
    categories = sorted({r.category for r in runs})
    for category in [*categories, "all"]:
        rows: dict[str, Any] = {}
        for mode in modes:
            mine = [r for r in runs if r.mode == mode and category in (r.category, "all")]
            if not mine:
                continue
            ratios = [r.tokens_per_second / statistics.median(off_speed[r.workload]) for r in mine]
            diverged = [
                d
                for r in mine
                if (d := _first_difference(r.tokens, off_tokens[r.workload])) is not None
            ]
            rows[mode] = {
                "tokens_per_second": statistics.median(r.tokens_per_second for r in mine),
                "ratio_to_off": statistics.median(ratios),
                "acceptance_rate": statistics.median(r.acceptance_rate for r in mine),
                "mean_acceptance_length": statistics.median(r.mean_acceptance_length for r in mine),
                "runs": len(mine),
                "outputs_differing_from_off": len(diverged),
            }
        report[category] = rows
    return report


def format_report(report: dict[str, Any], modes: list[str]) -> str:
    lines = [
        "| category | mode | tok/s (median) | x off (median) | acceptance | mean accepted len "
        "| runs differing from off |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for category, rows in report.items():
        for mode in modes:
            if mode in rows:
                row = rows[mode]
                lines.append(
                    f"| {category} | {mode} | {row['tokens_per_second']:.1f} | "
                    f"{row['ratio_to_off']:.2f} | {row['acceptance_rate']:.2f} | "
                    f"{row['mean_acceptance_length']:.2f} | "
                    f"{row['outputs_differing_from_off']}/{row['runs']} |"
                )
    return "\n".join(lines)
