"""`bench processes`: `localspec complete` as a user runs it, one new process per answer.

The engine bench (`runner`) measures modes on one warm runtime, with the draft model caught
up on each prompt outside the timed part: fair to the modes, but not what a user meets. A
user runs `localspec complete "..."` in a shell: a new process loads the models, reads the
tuner's saved statistics and costs, and answers once. Whatever `auto` spends learning, loading
the draft model or catching it up on the prompt is paid inside that one answer. So here each
(prompt, mode) pair is a separate `localspec complete --no-server --json` process, the modes of
one prompt run back to back in a shuffled order per repeat, and each run reports the
generation speed its statistics give (prompt processing excluded, as in the engine bench) and
the process's wall time (loading included).

Outputs are compared with `off`'s as text: the UTF-8 bytes of each answer stand in for its
tokens in the report's "differing from off" column.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from localspec.bench.contender import Sample, Skipped
from localspec.bench.progress import Progress
from localspec.bench.report import ALL, bootstrap_ci, verdict
from localspec.bench.workloads import Workload

# a process that has not answered in this long is stuck, not slow
PROCESS_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ProcessOptions:
    repeats: int
    max_tokens: int
    seed: int = 0
    model_args: tuple[str, ...] = ()  # -m/--target/--draft/--threads/... passed through


def complete_command(workload: Workload, mode: str, options: ProcessOptions) -> list[str]:
    """The `localspec complete` command line a user would type for this prompt and mode."""
    return [
        sys.executable,
        "-m",
        "localspec",
        "complete",
        "--no-server",
        "--no-history",  # a benchmark is not the user's work
        "--no-suffix-store",  # nor is the user's project's store, or an earlier run's
        "--json",
        "--spec",
        mode,
        "--max-tokens",
        str(options.max_tokens),
        *options.model_args,
        workload.prompt,
    ]


def run_once(
    workload: Workload, mode: str, repeat: int, options: ProcessOptions, position: int = 0
) -> Sample:
    """One answer in a new process; raises RuntimeError with the process's own words."""
    started = time.perf_counter()
    done = subprocess.run(
        complete_command(workload, mode, options),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"localspec complete exited with {done.returncode}: {last}")
    record = json.loads(done.stdout)
    stats = record["stats"]
    return Sample(
        mode=mode,
        workload=workload.id,
        category=workload.category,
        repeat=repeat,
        position=position,
        tokens=list(record["text"].encode()),
        tokens_per_second=float(stats["tokens_per_second"]),
        drafted=int(stats["drafted"]),
        accepted=int(stats["accepted"]),
        target_steps=int(stats["target_steps"]),
        peak_rss_bytes=None,
        details={**stats, "wall_s": wall_s},
    )


def mode_orders(modes: Sequence[str], runs: int, seed: int) -> list[list[str]]:
    """A shuffled order of `modes` for each of `runs` prompt-repeats, reproducible by seed."""
    rng = random.Random(seed)
    orders = []
    for _ in range(runs):
        order = list(modes)
        rng.shuffle(order)
        orders.append(order)
    return orders


def run_processes(
    workloads: Sequence[Workload], modes: Sequence[str], options: ProcessOptions, progress: Progress
) -> tuple[list[Sample], list[Skipped]]:
    """Every workload in every mode, `options.repeats` times, a process each."""
    samples: list[Sample] = []
    skipped: list[Skipped] = []
    failed: set[str] = set()
    orders = iter(mode_orders(modes, options.repeats * len(workloads), options.seed))
    progress.start(options.repeats * len(workloads) * len(modes))
    for repeat in range(options.repeats):
        for workload in workloads:
            for position, mode in enumerate(next(orders)):
                if workload.id in failed:
                    progress.drop(1)
                    continue
                try:
                    sample = run_once(workload, mode, repeat, options, position)
                except (RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
                    failed.add(workload.id)
                    skipped.append(Skipped(workload.id, str(exc)))
                    progress.drop(1)
                    continue
                samples.append(sample)
                progress.run_done(workload.id, mode, sample.tokens_per_second)
    progress.finish()
    kept = [s for s in samples if s.workload not in failed]
    return kept, skipped


def wall_rows(samples: Sequence[Sample], modes: Sequence[str]) -> list[str]:
    """Markdown rows per category and mode: the median over prompts and repeats of off's wall
    time over the mode's (above 1: the mode answered sooner, loading included), with its
    bootstrap interval and verdict (`localspec.bench.report`)."""
    off = {(s.workload, s.repeat): s.details["wall_s"] for s in samples if s.mode == "off"}
    rows = ["| category | mode | wall s (median) | off wall / wall | 95% CI | verdict |"]
    rows.append("| --- | --- | ---: | ---: | ---: | --- |")
    for category in [*sorted({s.category for s in samples}), ALL]:
        for mode in modes:
            mine = [s for s in samples if s.mode == mode and category in (s.category, ALL)]
            pairs: dict[str, list[float]] = {}
            for s in sorted(mine, key=lambda s: s.repeat):
                paired = off.get((s.workload, s.repeat))
                if paired:
                    pairs.setdefault(s.workload, []).append(paired / s.details["wall_s"])
            if not mine or not pairs:
                continue
            ci = None if mode == "off" else bootstrap_ci(pairs)
            shown = "-" if ci is None else f"{ci[0]:.2f}-{ci[1]:.2f}"
            median_wall = statistics.median(s.details["wall_s"] for s in mine)
            ratio = statistics.median(r for ratios in pairs.values() for r in ratios)
            rows.append(
                f"| {category} | {mode} | {median_wall:.1f} | {ratio:.2f} | {shown} "
                f"| {verdict(ci) or '-'} |"
            )
    return rows
