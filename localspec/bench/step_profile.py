"""`bench --profile`: where each mode's generation steps spend their time, by kind of step.

The engine sums every step's phases per step kind ("plain", "ngram:K", "draft:K" with K tokens
drafted) into its statistics' `step_profile`: `{kind: {"steps": n, "step": s, phase: s, ...}}`,
seconds, with a phase left out where it took nothing. This module adds those sums up per mode
over all of a mode's runs and prints them per step. Its point is the column "outside
llama_decode": what a step costs beyond the model's own forward passes (the target's decodes
and the draft model's), which is the engine's overhead, against `off`'s plain step, which is
what speculation has to beat. Baselines (llama-cpp-python, llama-server) record no profile and
are left out.
"""

from __future__ import annotations

from localspec.bench.contender import Sample
from localspec.speculative.steptime import PHASES as ENGINE_PHASES

Profile = dict[str, dict[str, dict[str, float]]]  # {mode: {step kind: {"steps", "step", phase}}}

# the engine's phases in its own order, then what no phase claimed; a phase this list lacks
# is shown after them
PHASES = (*ENGINE_PHASES, "other")
_MODEL = ("llama_decode", "draft_model")  # the models' forward passes, not the engine's overhead
BETWEEN = "between steps"  # the profile's row of the time outside every step


def aggregate(samples: list[Sample], modes: list[str]) -> Profile:
    """Each mode's profile summed over its runs: `off` first, then the modes as given; within
    a mode plain steps first, then by kind and number drafted."""
    summed: Profile = {}
    for sample in samples:
        kinds = sample.details.get("step_profile")
        for kind, sums in (kinds or {}).items():
            row = summed.setdefault(sample.mode, {}).setdefault(kind, {})
            for name, value in sums.items():
                row[name] = row.get(name, 0.0) + value
        if kinds and sample.details.get("target_steps"):
            # the generation's time that no step holds (the caller taking each token, the
            # loop between steps), per step: every step kind pays it on top of its own row
            row = summed[sample.mode].setdefault(BETWEEN, {"steps": 0.0, "step": 0.0})
            row["steps"] += sample.details["target_steps"]
            row["step"] += max(sample.details["generation_s"] - sample.details["steps_s"], 0.0)
    order = [mode for mode in ["off", *modes] if mode in summed]
    return {
        mode: {kind: summed[mode][kind] for kind in sorted(summed[mode], key=_kind_order)}
        for mode in dict.fromkeys(order)
    }


def _kind_order(kind: str) -> tuple[bool, str, int]:
    """plain first, then by kind and number drafted: draft:2, ngram:2, ngram:10 (not as text),
    the time between steps last."""
    name, _, drafted = kind.partition(":")
    return (
        kind != "plain",
        "~" if kind == BETWEEN else name,
        int(drafted) if drafted.isdigit() else 0,
    )


def _phases(profile: Profile) -> list[str]:
    """The phases any row recorded, in the engine's order."""
    seen = {name for kinds in profile.values() for row in kinds.values() for name in row}
    seen -= {"steps", "step"}
    return [p for p in PHASES if p in seen] + sorted(seen - set(PHASES))


def per_step(row: dict[str, float], phases: list[str]) -> dict[str, float]:
    """Milliseconds per step: the whole step, each phase, and what falls outside the models'
    forward passes (`outside`)."""
    steps = row["steps"]
    model = sum(row.get(name, 0.0) for name in _MODEL)
    ms = {name: row.get(name, 0.0) * 1e3 / steps for name in ["step", *phases]}
    ms["outside"] = (row["step"] - model) * 1e3 / steps
    return ms


def format_profile(profile: Profile) -> str:
    """A Markdown table, a row per mode and step kind, or a line saying there is none."""
    if not profile:
        return "no step profile recorded"
    phases = _phases(profile)
    off_plain = profile.get("off", {}).get("plain")
    off_ms = per_step(off_plain, phases)["step"] if off_plain else None
    lines = [
        "| mode | step kind | steps | ms/step | "
        + " | ".join(f"{name} ms" for name in phases)
        + " | outside llama_decode ms/step | outside / off's plain step |",
        "| --- | --- | ---: | ---: | " + "---: | " * len(phases) + "---: | ---: |",
    ]
    for mode, kinds in profile.items():
        for kind, row in kinds.items():
            ms = per_step(row, phases)
            share = "-" if not off_ms else f"{ms['outside'] / off_ms:.1%}"
            cells = [f"{ms[name]:.2f}" for name in ["step", *phases]]
            lines.append(
                f"| {mode} | {kind} | {row['steps']:.0f} | {' | '.join(cells)} | "
                f"{ms['outside']:.2f} | {share} |"
            )
    lines.append("")
    lines.append(
        "step profile: per step, summed over each mode's runs in every category; outside "
        "llama_decode = the step less the target's decodes (llama_decode) and the draft "
        "model's (draft_model); its share is of off's plain step; 'between steps' is the "
        "generation's time outside every step, per step (each step's host time is its "
        "outside plus that)"
    )
    return "\n".join(lines)
