"""What steps really cost in this process, learned from the steps the engine times.

The calibration (`HardwareProfile`) is measured once, on a quiet moment or not, and cached
for good; the machine a request meets is busier or quieter, and a stale calibration can be
far off (one seen here priced a draft token at 214 ms, 6x what it costs when measured
again). So the tuner's costs are the calibration corrected by measurements: an exponential
average of measured over calibrated time per verification batch size and over all sizes; the
draft model's extra seconds per step and per token it catches up on; how often a draft-model
choice ends before its first token; what loading the draft model took.

The state outlives the process (`to_dict`, kept by `localspec.auto_io.TunerStore` beside the
calibration): `localspec complete` is a new process per prompt, and a tuner that relearned
its costs each time paid for a dozen losing drafts in every answer before it knew them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# weight of the newest measurement in the running cost corrections: a handful of steps
# outweigh the calibration, single noisy steps do not
COST_SMOOTHING = 0.2
# steps after which a batch size no step has measured follows the overall measured ratio
STALE_STEPS = 16
# empty draft-model steps: a prior of 1 in 10, worth a few steps; forgotten like acceptance
EMPTY_PRIOR = (0.5, 5.0)
EMPTY_DECAY = 0.99
# seconds to load the draft model before a load was measured (a 0.5B Q4 GGUF from the page
# cache on a CPU: ~1 s; from disk, more)
DRAFT_LOAD_PRIOR_S = 1.0
# a ratio read back from disk is trusted within these bounds (a corrupt file prices nothing out)
_RATIO_BOUNDS = (0.05, 20.0)

# what exploring may cost a request: this share of its expected decoding time (its token
# budget, at most DEFAULT_HORIZON, at plain decoding's speed)
EXPLORE_SHARE = 0.01


class ExplorationBudget:
    """Seconds one request may still lose to exploration (`Tuner.choose`).

    Exploring keeps the estimates of options not chosen fresh, but every exploration is a
    step the tuner expects to be slower than its best, and exploring the draft model can
    mean catching it up on a whole prompt: seconds on a CPU, for a request whose answer
    takes a few. So each request gets a budget, and an exploration whose expected loss
    does not fit what is left is not made."""

    def __init__(self, seconds: float) -> None:
        self.left = seconds
        self.spent = 0.0

    def spend(self, seconds: float) -> bool:
        """Take `seconds` from the budget if they fit (True), else leave it as it is."""
        if seconds > self.left:
            return False
        self.left -= seconds
        self.spent += seconds
        return True


def _ratio(value: Any) -> float:
    low, high = _RATIO_BOUNDS
    return min(max(float(value), low), high)


@dataclass
class LiveCosts:
    """The measured corrections to a calibration (see the module docstring)."""

    verify_ratio: dict[int, float] = field(default_factory=dict)  # batch size -> ratio
    measured_at: dict[int, int] = field(default_factory=dict)  # batch size -> step
    steps: int = 0
    overall_ratio: float = 1.0
    draft_overhead_s: float = 0.0  # measured draft seconds per step beyond k * draft_s
    catchup_s: float = 0.0  # per caught-up token
    draft_load_s: float = DRAFT_LOAD_PRIOR_S  # the last measured load of the draft model
    draft_empty: list[float] = field(default_factory=lambda: list(EMPTY_PRIOR))

    def ratio(self, batch: int) -> float:
        """Measured over calibrated verification time for `batch` tokens."""
        return self.verify_ratio.get(batch, self.overall_ratio)

    def observe_verify(self, sizes: Sequence[int], seconds: float, calibrated: float) -> None:
        """One step's verification decodes (`sizes`) took `seconds`; `calibrated` predicted."""
        if seconds <= 0 or calibrated <= 0:
            return
        ratio = seconds / calibrated
        for batch in set(sizes):
            previous = self.verify_ratio.get(batch, ratio)
            self.verify_ratio[batch] = previous + COST_SMOOTHING * (ratio - previous)
        self.overall_ratio += COST_SMOOTHING * (ratio - self.overall_ratio)
        self.steps += 1
        for batch in sizes:
            self.measured_at[batch] = self.steps
        # a size not measured lately follows the overall ratio: one measured in a slow
        # moment (the first steps after loading) must not price an option out for good
        for batch, previous in self.verify_ratio.items():
            if self.steps - self.measured_at.get(batch, 0) > STALE_STEPS:
                stale = previous + COST_SMOOTHING * (self.overall_ratio - previous)
                self.verify_ratio[batch] = stale

    def observe_draft_overhead(self, extra_s: float) -> None:
        self.draft_overhead_s += COST_SMOOTHING * (extra_s - self.draft_overhead_s)

    def observe_catchup(self, per_token_s: float) -> None:
        self.catchup_s += COST_SMOOTHING * (per_token_s - self.catchup_s)

    def observe_empty(self, empty: bool) -> None:
        self.draft_empty[0] = self.draft_empty[0] * EMPTY_DECAY + empty
        self.draft_empty[1] = self.draft_empty[1] * EMPTY_DECAY + 1.0

    @property
    def empty_rate(self) -> float:
        return self.draft_empty[0] / self.draft_empty[1]

    def to_dict(self) -> dict[str, Any]:
        """What a later process starts from; the step counters stay behind (a size read back
        counts as measured at step 0, so it follows the overall ratio once stale)."""
        return {
            "verify_ratio": {str(b): r for b, r in self.verify_ratio.items()},
            "overall_ratio": self.overall_ratio,
            "draft_overhead_s": self.draft_overhead_s,
            "catchup_s": self.catchup_s,
            "draft_load_s": self.draft_load_s,
            "draft_empty": list(self.draft_empty),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], catchup_s: float) -> LiveCosts:
        """Read back `to_dict`'s record; raises KeyError, TypeError or ValueError when it is
        not one (the caller then starts from the calibration). Older versions also wrote a
        near-tie rate (`ties`), pricing a re-decode verification no longer makes: ignored."""
        ratios = {int(b): _ratio(r) for b, r in dict(data["verify_ratio"]).items()}
        if any(b < 1 for b in ratios):
            raise ValueError("batch sizes start at 1")
        empty = [max(float(x), 0.0) for x in data["draft_empty"]][:2]
        if len(empty) != 2 or empty[1] <= 0:
            raise ValueError("rates need a count and a total")
        return cls(
            verify_ratio=ratios,
            measured_at=dict.fromkeys(ratios, 0),
            overall_ratio=_ratio(data["overall_ratio"]),
            draft_overhead_s=max(float(data["draft_overhead_s"]), 0.0),
            catchup_s=max(float(data.get("catchup_s", catchup_s)), 0.0),
            draft_load_s=max(float(data.get("draft_load_s", DRAFT_LOAD_PRIOR_S)), 0.0),
            draft_empty=empty,
        )
