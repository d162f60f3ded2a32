"""Where a generation step's time goes, by kind of step: the engine's own profiler.

`auto`'s promise is that a step which drafts nothing costs what a plain step costs, and a
draft is chosen only where it pays. Whether it keeps that promise is a question of a few
milliseconds per step beside a 30-70 ms `llama_decode` on a CPU, so every step is split into
phases with `perf_counter_ns` laps (a lap costs well under a microsecond) and summed per step
kind: "plain" (nothing drafted), "ngram:K" and "draft:K" (K tokens drafted). The phases:

- llama_decode: the target's decodes for verification (the context's own counter);
- logits_copy: copying logits rows out of llama.cpp (ditto);
- acceptance: verification's arithmetic (masks, penalties, sampling, the acceptance rule);
- lookup: n-gram lookups; draft_model: the draft model's drafting (its catch-up included);
- pricing: the tuner's choice and the shadow proposals it keeps (`auto` only);
- learning: the tuner's observations and the step's statistics;
- emit: turning verified tokens into text, stop strings, the constraint's commit, the event;
- other: what no phase claims (the loop's own checks).

`bench --profile` prints the sums; `complete --stats` carries them as `step_profile`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

PHASES = (
    "llama_decode",
    "logits_copy",
    "acceptance",
    "lookup",
    "draft_model",
    "pricing",
    "learning",
    "emit",
)
_NS = 1e-9


def step_kind(drafted: int, model_draft: bool) -> str:
    """The profile's name of a step that verified `drafted` proposed tokens."""
    if drafted == 0:
        return "plain"
    return f"{'draft' if model_draft else 'ngram'}:{drafted}"


@dataclass
class StepClock:
    """Laps of one step: `lap(phase)` charges the time since the last lap to `phase`;
    `take(phase, ns)` moves time a phase measured itself out of the lap it fell in."""

    started: int = field(default_factory=time.perf_counter_ns)
    last: int = 0
    ns: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.last = self.started

    def lap(self, phase: str) -> None:
        now = time.perf_counter_ns()
        self.ns[phase] = self.ns.get(phase, 0) + now - self.last
        self.last = now

    def take(self, phase: str, ns: int, out_of: str) -> None:
        """Charge `ns` of the time already lapped as `out_of` to `phase` instead."""
        moved = min(max(ns, 0), self.ns.get(out_of, 0))
        self.ns[out_of] = self.ns.get(out_of, 0) - moved
        self.ns[phase] = self.ns.get(phase, 0) + moved


@dataclass
class StepProfile:
    """Per step kind, the number of steps and the seconds each phase took in them."""

    kinds: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, kind: str, clock: StepClock) -> None:
        """Account one finished step (`clock` lapped up to its end)."""
        row = self.kinds.setdefault(kind, {"steps": 0.0, "step": 0.0})
        row["steps"] += 1
        total = clock.last - clock.started
        row["step"] += total * _NS
        claimed = 0
        for phase, ns in clock.ns.items():
            if ns:
                row[phase] = row.get(phase, 0.0) + ns * _NS
                claimed += ns
        if total > claimed:
            row["other"] = row.get("other", 0.0) + (total - claimed) * _NS

    def to_dict(self) -> dict[str, dict[str, float]]:
        return {kind: dict(row) for kind, row in self.kinds.items()}
