"""The report from samples: medians, ratios, divergence, memory, skipped modes, progress lines."""

from __future__ import annotations

import io
import json

import pytest

from localspec.bench.contender import Sample, Skipped
from localspec.bench.progress import Progress
from localspec.bench.report import document, first_difference, format_report, summarise

MIB = 1024 * 1024


def _sample(mode: str, workload: str, category: str, speed: float, tokens: list[int]) -> Sample:
    return Sample(
        mode=mode,
        workload=workload,
        category=category,
        repeat=0,
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
    assert report["all"]["off"]["ratio_to_off"] == pytest.approx(1.0)


def test_table_lists_rows_and_every_skip_with_its_reason() -> None:
    report = summarise(SAMPLES, ["off", "ngram"])
    skipped = [Skipped("server-ngram-mod", "llama-server is not on PATH")]
    table = format_report(report, ["off", "ngram"], skipped, "per-run VmHWM")
    assert "| all | ngram | 25.0 | 2.00 | 0.50 | 2.00 | 300 | 1/2 |" in table
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
