"""The runner on tiny models: every mode through `Runtime.generate`, interleaved, with the
llama-cpp-python baseline for real and the llama-server baseline skipped with its reason."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from localspec.bench.modes import parse_modes
from localspec.bench.progress import Progress
from localspec.bench.runner import BenchOptions, BenchResult, run_bench, schedule
from localspec.bench.workloads import Workload
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime

WORKLOADS = [
    Workload("chat", "edit", prompt="Rename x to y: x = 1; print(x)"),
    Workload("middle", "fim", prefix="def add(a, b):\n", suffix="\n\nprint(add(1, 2))\n"),
]


def _bench(
    target: Path, draft: Path, modes: str, repeats: int = 2, llama_server: Path | None = None
) -> tuple[BenchResult, str]:
    settings = RuntimeSettings(target=target, draft=draft, n_ctx=512, n_threads=1)
    stream = io.StringIO()
    with Runtime(settings) as runtime:
        result = run_bench(
            runtime,
            WORKLOADS,
            parse_modes(modes),
            BenchOptions(repeats=repeats, max_tokens=12, llama_server=llama_server),
            Progress(stream),
        )
    return result, stream.getvalue()


def test_schedule_shuffles_every_prompt_and_repeat_reproducibly() -> None:
    modes = ["off", "ngram", "draft:2", "auto", "lcp-lookup:4"]
    rounds = list(schedule(modes, ["chat", "middle"], repeats=3, seed=0))
    assert [(repeat, prompt) for repeat, prompt, _ in rounds] == [
        (r, p) for r in range(3) for p in ("chat", "middle")
    ]
    assert all(sorted(order) == sorted(modes) for _, _, order in rounds)
    assert rounds == list(schedule(modes, ["chat", "middle"], repeats=3, seed=0))
    orders = {seed: [o for _, _, o in schedule(modes, ["p"], 2, seed)] for seed in range(5)}
    assert any(first != second for first, second in orders.values())  # repeats differ
    assert len({str(o) for o in orders.values()}) > 1  # and so do seeds


def test_schedule_leaves_out_a_mode_removed_meanwhile() -> None:
    modes = ["off", "ngram", "auto"]
    orders = []
    for _, _, order in schedule(modes, ["a", "b"], repeats=1, seed=3):
        orders.append(order)
        if "ngram" in modes:
            modes.remove("ngram")
    assert sorted(orders[0]) == ["auto", "ngram", "off"]
    assert sorted(orders[1]) == ["auto", "off"]


def test_modes_are_interleaved_prompt_by_prompt_in_shuffled_orders(
    tiny_target: Path, tiny_draft_noisy: Path
) -> None:
    modes = "off,ngram,draft:2,auto,lcp-lookup:4,server-ngram-simple"
    result, progress = _bench(tiny_target, tiny_draft_noisy, modes)
    measured = ["off", "ngram", "draft:2", "auto", "lcp-lookup:4"]
    assert result.modes == measured
    assert len(result.samples) == 2 * len(WORKLOADS) * len(measured)
    # runs go prompt by prompt, all modes each, in the seeded order, positions counted from 0
    rounds = [result.samples[i : i + 5] for i in range(0, len(result.samples), 5)]
    planned = schedule(measured, ["chat", "middle"], repeats=2, seed=0)
    for batch, (repeat, workload, order) in zip(rounds, planned, strict=True):
        assert [s.mode for s in batch] == order
        assert {(s.workload, s.repeat) for s in batch} == {(workload, repeat)}
        assert [s.position for s in batch] == list(range(5))
    assert [s.name for s in result.skipped] == ["server-ngram-simple"]
    assert "not on PATH" in result.skipped[0].reason
    assert progress.count("\n") >= len(result.samples)  # plain lines: not a terminal
    for sample in result.samples:
        assert sample.tokens and sample.tokens_per_second > 0
        assert sample.peak_rss_bytes is not None and sample.peak_rss_bytes > 1024 * 1024
    fim = [s for s in result.samples if s.workload == "middle" and s.mode == "auto"]
    assert all(s.details["mode"] == "auto" for s in fim)
    # every mode of localspec's, first on its prompt or not, finds all of the prompt but its
    # last token in the cache: their answers are comparable with off's
    for sample in result.samples:
        if sample.mode != "lcp-lookup:4":
            assert sample.details["cached_tokens"] == sample.details["prompt_tokens"] - 1


def test_prompt_lookup_baseline_drafts_and_counts(
    tiny_target: Path, tiny_draft_noisy: Path
) -> None:
    """Tiny random models loop, so prompt lookup finds matches: drafts must be counted."""
    result, _ = _bench(tiny_target, tiny_draft_noisy, "off,lcp-lookup:4", repeats=1)
    lookup = [s for s in result.samples if s.mode == "lcp-lookup:4"]
    assert lookup and all(s.details["draft_calls"] == s.target_steps for s in lookup)
    assert sum(s.drafted for s in lookup) > 0
    assert all(len(s.tokens) <= 12 for s in lookup)


def test_a_server_that_fails_to_start_is_skipped_with_its_log(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path
) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --help ]; then echo "--spec-type ngram-simple --no-mmap"; exit 0; fi\n'
        "echo 'error: this build cannot load models' >&2\nexit 3\n"
    )
    fake.chmod(0o755)
    modes = "off,server-off,server-ngram-simple,server-ngram-mod,server-draft"
    result, _ = _bench(tiny_target, tiny_draft_noisy, modes, repeats=1, llama_server=fake)
    reasons = {s.name: s.reason for s in result.skipped}
    assert "exited with code 3" in reasons["server-off"]
    assert "cannot load models" in reasons["server-ngram-simple"]
    assert reasons["server-ngram-mod"] == "this llama-server has no --spec-type ngram-mod"
    assert "exited with code 3" in reasons["server-draft"]
    assert result.modes == ["off"]


def test_a_prompt_that_leaves_no_room_fails_before_running(tiny_target: Path) -> None:
    settings = RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime, pytest.raises(UsageError, match="raise --ctx-size"):
        run_bench(
            runtime,
            WORKLOADS,
            parse_modes("off"),
            BenchOptions(repeats=1, max_tokens=500),
            Progress(io.StringIO()),
        )


def test_each_repeat_is_a_session_and_no_mode_drafts_anothers_answer_to_its_prompt(
    tiny_target: Path, tiny_draft_noisy: Path
) -> None:
    """Two workloads with one prompt: the second may draft the first's answer from the
    suffix store, the first never (not from the other mode's run of it, not from the last
    repeat's)."""
    prompt = "Rename x to y: x = 1; print(x)"
    twins = [Workload("first", "edit", prompt=prompt), Workload("again", "edit", prompt=prompt)]
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_noisy, n_ctx=512, n_threads=1)
    with Runtime(settings) as runtime:
        result = run_bench(
            runtime,
            twins,
            parse_modes("off,ngram"),
            BenchOptions(repeats=2, max_tokens=24),
            Progress(io.StringIO()),
        )
    stored: dict[tuple[str, int], int] = {}
    for sample in result.samples:
        if sample.mode == "ngram":
            by_source = sample.details["by_proposer"]
            stored[sample.workload, sample.repeat] = by_source.get("ngram-store", {}).get(
                "drafted", 0
            )
    assert stored[("first", 0)] == stored[("first", 1)] == 0
    assert stored[("again", 0)] > 0 and stored[("again", 1)] > 0
