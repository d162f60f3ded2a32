"""`bench --profile`'s table from samples carrying the engine's `step_profile` sums."""

from __future__ import annotations

import json
from typing import Any

from localspec.bench.contender import Sample
from localspec.bench.step_profile import aggregate, format_profile


def _sample(mode: str, profile: dict[str, dict[str, float]] | None) -> Sample:
    details: dict[str, Any] = {} if profile is None else {"step_profile": profile}
    return Sample(
        mode=mode,
        workload="w",
        category="edit",
        repeat=0,
        position=0,
        tokens=[1],
        tokens_per_second=1.0,
        drafted=0,
        accepted=0,
        target_steps=1,
        peak_rss_bytes=None,
        details=details,
    )


AUTO_RUN = {
    "plain": {"steps": 2, "step": 0.11, "llama_decode": 0.1, "pricing": 0.004},
    "ngram:10": {"steps": 1, "step": 0.2, "llama_decode": 0.19, "lookup": 0.001},
    "ngram:3": {"steps": 1, "step": 0.08, "llama_decode": 0.07, "lookup": 0.001},
}
SAMPLES = [
    _sample(
        "hybrid", {"draft:2": {"steps": 1, "step": 0.09, "llama_decode": 0.06, "draft_model": 0.02}}
    ),
    _sample("auto", AUTO_RUN),
    _sample("off", {"plain": {"steps": 10, "step": 0.5, "llama_decode": 0.45, "emit": 0.01}}),
    _sample("auto", AUTO_RUN),
    _sample("server-off", None),  # a baseline records no profile
]


def test_sums_per_mode_and_kind_in_order() -> None:
    profile = aggregate(SAMPLES, ["off", "auto", "hybrid", "server-off"])
    assert list(profile) == ["off", "auto", "hybrid"]
    assert list(profile["auto"]) == ["plain", "ngram:3", "ngram:10"]  # by number drafted
    assert profile["auto"]["plain"] == {
        "steps": 4,
        "step": 0.22,
        "llama_decode": 0.2,
        "pricing": 0.008,
    }
    assert AUTO_RUN["plain"]["steps"] == 2  # the samples' own sums are left as they were
    json.dumps(profile)  # JSON-ready as it is, for --json


def test_table_arithmetic() -> None:
    table = format_profile(aggregate(SAMPLES, ["off", "auto", "hybrid"]))
    lines = table.splitlines()
    assert lines[0] == (
        "| mode | step kind | steps | ms/step | llama_decode ms | lookup ms | draft_model ms "
        "| pricing ms | emit ms | outside llama_decode ms/step | outside / off's plain step |"
    )
    # off: 500 ms over 10 steps, 450 of them decoding: 5 ms outside, 10% of its own step
    assert (
        lines[2]
        == "| off | plain | 10 | 50.00 | 45.00 | 0.00 | 0.00 | 0.00 | 1.00 | 5.00 | 10.0% |"
    )
    assert (
        lines[3]
        == "| auto | plain | 4 | 55.00 | 50.00 | 0.00 | 0.00 | 2.00 | 0.00 | 5.00 | 10.0% |"
    )
    assert lines[4].startswith("| auto | ngram:3 | 2 | 80.00 | 70.00 | 1.00 | 0.00 | 0.00 |")
    assert lines[5].startswith("| auto | ngram:10 | 2 | 200.00 |")
    # the draft model's forward passes are not the engine's overhead either: 90 - 60 - 20
    hybrid = "| hybrid | draft:2 | 1 | 90.00 | 60.00 | 0.00 | 20.00 | 0.00 | 0.00 | 10.00 | 20.0% |"
    assert lines[6] == hybrid
    assert "its share is of off's plain step" in table


def test_without_off_plain_steps_the_share_is_a_dash() -> None:
    table = format_profile(aggregate(SAMPLES[:1], ["off", "auto", "hybrid"]))
    assert table.splitlines()[2].endswith("| 10.00 | - |")


def test_no_profile_says_so() -> None:
    assert format_profile(aggregate([_sample("server-off", None)], ["server-off"])) == (
        "no step profile recorded"
    )


def test_the_time_between_steps_is_a_row_of_its_own_last() -> None:
    """What no step holds (the caller taking each token, the loop between steps) is part of
    every step's host time: 520 ms of generation, 500 of them in 10 steps, is 2 ms a step."""
    plain = {"plain": {"steps": 10, "step": 0.5, "llama_decode": 0.45, "emit": 0.01}}
    sample = _sample("off", plain)
    sample.details.update(target_steps=10, generation_s=0.52, steps_s=0.5)
    profile = aggregate([sample, _sample("auto", AUTO_RUN)], ["off", "auto"])
    assert list(profile["off"]) == ["plain", "between steps"]
    assert "between steps" not in profile["auto"]  # samples without the counts add no row
    row = format_profile(profile).splitlines()[3]
    assert row.startswith("| off | between steps | 10 | 2.00 |")
    assert row.endswith("| 2.00 | 4.0% |")
