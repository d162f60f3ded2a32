"""The report from samples: medians, paired ratios and their intervals, divergence, memory,
skipped modes, progress lines."""

from __future__ import annotations

import io
import json

import pytest

from localspec.bench.contender import Sample, Skipped
from localspec.bench.progress import Progress
from localspec.bench.report import (
    bootstrap_ci,
    document,
    first_difference,
    format_report,
    paired_ratios,
    summarise,
    verdict,
)

MIB = 1024 * 1024


def _sample(
    mode: str, workload: str, category: str, speed: float, tokens: list[int], *, repeat: int = 0
) -> Sample:
    return Sample(
        mode=mode,
        workload=workload,
        category=category,
        repeat=repeat,
        position=0,
        tokens=tokens,
        tokens_per_second=speed,
        drafted=4,
        accepted=2,
        target_steps=len(tokens) - 2,
        peak_rss_bytes=100 * MIB if mode == "off" else 300 * MIB,
    )


SAMPLES = [
    _sample("off", "e1", "edit", 10.0, [1, 2, 3, 4]),
    _sample("off", "g1", "generate", 20.0, [5, 6, 7, 8]),
    _sample("ngram", "e1", "edit", 30.0, [1, 2, 3, 4]),
    _sample("ngram", "g1", "generate", 20.0, [5, 6, 9, 8]),  # differs at position 2
]


def test_first_difference_counts_length_too() -> None:
    assert first_difference([1, 2], [1, 2]) is None
    assert first_difference([1, 2], [1, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_summary_per_category_and_all() -> None:
    report = summarise(SAMPLES, ["off", "ngram"])
    assert list(report) == ["edit", "generate", "all"]
    edit = report["edit"]["ngram"]
    assert edit["ratio_to_off"] == pytest.approx(3.0)
    assert edit["outputs_differing_from_off"] == 0
    assert edit["acceptance_rate"] == pytest.approx(0.5)
    assert edit["mean_acceptance_length"] == pytest.approx(2.0)  # 1 + 2 accepted / 2 steps
    assert edit["peak_rss_mib"] == pytest.approx(300)
    everything = report["all"]["ngram"]
    assert everything["ratio_to_off"] == pytest.approx(2.0)  # median of 3.0 and 1.0
    assert everything["outputs_differing_from_off"] == 1
    assert everything["first_differences"] == [2]
    assert report["all"]["off"]["ratio_to_off"] == 1.0
    assert report["all"]["off"]["ratio_ci"] is None and report["all"]["off"]["verdict"] is None
    assert edit["ratio_ci"] is None  # one pair: no interval
    # one pair per prompt: the two prompts' pairs (3.0 and 1.0) are resampled together
    assert everything["ratio_ci"] == [1.0, 3.0]
    assert everything["verdict"] == "no difference"


def test_ratios_pair_each_run_with_off_in_the_same_repeat() -> None:
    samples = [
        _sample("off", "e1", "edit", 10.0, [1], repeat=0),
        _sample("off", "e1", "edit", 20.0, [1], repeat=1),
        _sample("ngram", "e1", "edit", 20.0, [1], repeat=1),
        _sample("ngram", "e1", "edit", 20.0, [1], repeat=0),
        _sample("ngram", "e2", "edit", 30.0, [1], repeat=0),  # no off run on e2: no pair
    ]
    off_runs = {(s.workload, s.repeat): s for s in samples if s.mode == "off"}
    assert paired_ratios(samples[2:], off_runs) == {"e1": [2.0, 1.0]}
    row = summarise(samples[:4], ["off", "ngram"])["edit"]["ngram"]
    assert row["ratio_to_off"] == 1.5  # against off's median (15) it would be 1.33


def test_identical_ratios_have_a_point_interval() -> None:
    assert bootstrap_ci({"a": [1.25] * 3, "b": [1.25] * 3}) == (1.25, 1.25)
    assert bootstrap_ci({"a": [1.25]}) is None
    assert verdict((1.25, 1.25)) == "faster"


def test_verdicts_follow_the_interval_not_the_median() -> None:
    around_one = {"a": [0.9, 1.1, 1.05], "b": [0.95, 1.08, 0.97]}
    ci = bootstrap_ci(around_one)
    assert ci is not None and ci[0] < 1.0 < ci[1]
    assert verdict(ci) == "no difference"
    assert verdict(bootstrap_ci({"a": [0.8, 0.85, 0.9], "b": [0.7, 0.75, 0.72]})) == "slower"
    assert verdict((0.93, 1.08)) == "no difference" and verdict(None) is None
    assert bootstrap_ci(around_one) == ci  # seeded: the same interval every time


def test_resampling_stays_within_each_prompt() -> None:
    """Two prompts far apart, each steady across repeats: the median of a stratified resample
    always takes one value from each, so the interval is their midpoint, not their spread."""
    ci = bootstrap_ci({"a": [2.0, 2.0], "b": [1.0, 1.0]})
    assert ci == (1.5, 1.5)


def test_table_lists_rows_and_every_skip_with_its_reason() -> None:
    report = summarise(SAMPLES, ["off", "ngram"])
    skipped = [Skipped("server-ngram-mod", "llama-server is not on PATH")]
    table = format_report(report, ["off", "ngram"], skipped, "per-run VmHWM")
    assert (
        "| all | ngram | 25.0 | 2.00 | 1.00-3.00 | no difference | 0.50 | 2.00 | 300 | 1/2 |"
        in table
    )
    assert "| edit | ngram | 30.0 | 3.00 | - | - |" in table
    assert "faster if the CI's low end is above 1.0" in table
    assert "skipped server-ngram-mod: llama-server is not on PATH" in table
    assert "per-run VmHWM" in table


def test_json_document_shape() -> None:
    report = summarise(SAMPLES, ["off", "ngram"])
    doc = document(report, SAMPLES, [Skipped("x", "why")], {"max_tokens": 4})
    text = json.loads(json.dumps(doc))  # must be JSON-ready as it is
    assert set(text) == {"settings", "report", "skipped", "runs"}
    assert text["skipped"] == [{"name": "x", "reason": "why"}]
    run = text["runs"][0]
    for key in ("mode", "workload", "category", "tokens", "tokens_per_second", "peak_rss_bytes"):
        assert key in run
    assert run["generated_tokens"] == 4 and run["acceptance_rate"] == pytest.approx(0.5)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_on_a_terminal_and_plain_lines_elsewhere() -> None:
    for stream in (io.StringIO(), _Terminal()):
        progress = Progress(stream)
        progress.start(2)
        progress.run_done("e1", "off", 10.0)
        progress.run_done("e1", "ngram", 12.0)
        progress.finish()
        progress.note("done")
        out = stream.getvalue()
        assert "[1/2] e1" in out and "[2/2] e1" in out and "eta" in out
        if isinstance(stream, _Terminal):
            assert out.count("\r\x1b[K") == 2 and out.count("\n") == 2
        else:
            assert "\r" not in out and out.count("\n") == 3
