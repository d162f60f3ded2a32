"""`localspec bench` as the installed command: its benchmarks, each with only its own options;
stdout holds the report and nothing else."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from localspec.bench import chart
from localspec.cli import main
from localspec.cli.bench import ENGINE_REPEATS, _budget
from localspec.cli.bench_parser import default_bench
from localspec.cli.parser import build_parser
from localspec.errors import UsageError
from tests.test_cli import localspec


def test_quick_run_writes_report_json_and_chart(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    args: list[str | Path] = ["--target", tiny_target, "--draft", tiny_draft_noisy]
    args += ["--ctx-size", "2048"]
    args += ["--quick", "--modes", "off,ngram,server-ngram-mod", "--json", out, "--chart", png]
    args += ["--profile", "--seed", "5"]
    result = localspec("bench", *args, env={"PATH": ""})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| category | mode | tok/s")
    for category in ("edit", "generate", "explain", "json", "fim", "json-schema", "all"):
        assert f"| {category} | ngram |" in result.stdout
    assert "skipped server-ngram-mod: llama-server is not on PATH" in result.stdout
    assert "| x off 95% CI | verdict |" in lines[0]
    # the step profile follows the table: the engine records it for localspec's modes
    profile = result.stdout.split("skipped server-ngram-mod")[1]
    assert "\n| mode | step kind |" in profile
    # progress went to stderr, one plain line per run (stderr is a pipe here)
    assert "[12/12]" in result.stderr and "\r" not in result.stderr
    doc = json.loads(out.read_text())
    assert doc["settings"]["max_tokens"] == 48 and doc["settings"]["repeats"] == 1
    assert doc["settings"]["seed"] == 5
    assert set(doc["step_profile"]) == {"off", "ngram"}  # the server mode records none
    assert doc["settings"]["workloads"] == [
        "edit-rename",
        "gen-lru",
        "explain-closure",
        "json-extract",
        "fim-body",
        "schema-extract",
    ]
    assert len(doc["runs"]) == 12
    assert doc["report"]["all"]["off"]["peak_rss_mib"] > 1
    assert doc["skipped"][0]["name"] == "server-ngram-mod"
    assert png.read_bytes().startswith(b"\x89PNG")  # matplotlib is in the test extra


def test_engine_bench_repeats_three_times_by_default() -> None:
    """Three runs per mode and prompt unless asked otherwise; --quick keeps its one."""
    parser = build_parser()
    engine = ["bench", "engine"]
    assert _budget(parser.parse_args(engine), ENGINE_REPEATS) == (3, 128)
    assert _budget(parser.parse_args([*engine, "--quick"]), ENGINE_REPEATS) == (1, 48)
    assert _budget(parser.parse_args([*engine, "--repeats", "5"]), ENGINE_REPEATS) == (5, 128)
    assert parser.parse_args(engine).seed == 0


BENCHMARKS = [
    "engine",
    "chat",
    "editor",
    "concurrency",
    "prompt",
    "agent",
    "processes",
    "edits",
    "watch-cost",
]


def test_bench_lists_its_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out.split("benchmarks:")[1]
    names = [line.split()[0] for line in listed.splitlines() if re.match(r"    \S", line)]
    assert names == BENCHMARKS


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["bench"], ["bench", "engine"]),
        (["-v", "bench", "--quick"], ["-v", "bench", "engine", "--quick"]),
        (["bench", "agent", "t.jsonl"], ["bench", "agent", "t.jsonl"]),
        (["bench", "--help"], ["bench", "--help"]),
        (["complete", "bench"], ["complete", "bench"]),
    ],
)
def test_bench_without_a_benchmark_runs_the_engine_bench(
    argv: list[str], parsed: list[str]
) -> None:
    """`localspec bench --quick`, as before `bench` had subcommands."""
    assert default_bench(argv) == parsed


@pytest.mark.parametrize(
    ("bench", "option"),
    [
        ("chat", ["--profile"]),
        ("chat", ["--seed", "2"]),
        ("chat", ["--llama-server", "x"]),
        ("editor", ["--seed", "2"]),
        ("editor", ["--profile"]),
        ("editor", ["--repeats", "2"]),
        ("editor", ["--compare-ubatch", "512"]),
        ("concurrency", ["--numerics"]),
        ("concurrency", ["--chart", "x.png"]),
        ("prompt", ["--fim-requests", "2"]),
        ("prompt", ["--max-tokens", "2"]),
        ("agent", ["--profile"]),
        ("agent", ["--quick"]),
        ("processes", ["--chart", "x.png"]),
        ("processes", ["--llama-server", "x"]),
        ("watch-cost", ["--profile"]),
        ("watch-cost", ["--seed", "2"]),
        ("edits", ["--repeats", "2"]),
        ("edits", ["--category", "python"]),
        ("engine", ["--watch", "m.txt"]),
        ("engine", ["--parallel", "2"]),
    ],
)
def test_each_benchmark_takes_only_its_own_options(
    bench: str, option: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", bench, *option])
    assert exited.value.code == 2
    assert f"unrecognized arguments: {' '.join(option)}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "new"),
    [
        (["bench", "--editor"], "`localspec bench editor`"),
        (["bench", "--quick", "--editor", "--fim-requests", "4"], "`localspec bench editor`"),
        (["bench", "--concurrency", "--parallel", "2"], "`localspec bench concurrency`"),
        (["bench", "--agent", "t.jsonl"], "`localspec bench agent [TRACE ...]`"),
        (["bench", "--processes"], "`localspec bench processes`"),
        (["bench", "--watch-cost"], "`localspec bench watch-cost`"),
        (["bench", "--surface", "chat"], "`localspec bench chat`"),
        (["bench", "--surface=chat"], "`localspec bench chat`"),
        (["bench", "concurrency", "--concurrency-fim", "4"], "concurrency --fim-requests N`"),
        (["bench", "concurrency", "--concurrency-delay=2"], "concurrency --delay S`"),
    ],
)
def test_the_flags_bench_had_before_its_subcommands_name_the_new_form(
    argv: list[str], new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("localspec bench: error: ") and new in error
    assert "unrecognized arguments" not in error


def test_bad_modes_are_one_line_usage_errors(tiny_target: Path) -> None:
    result = localspec("bench", "--target", tiny_target, "--modes", "ngram")
    assert result.returncode == 2
    assert "must include off" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_chart_without_matplotlib_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UsageError, match=r"pip install 'localspec\[bench\]'"):
        chart.ensure_available()


@pytest.mark.parametrize("modes", ["off,auto:3", "off,server-off", "off,off+no-suffix", "off,x"])
def test_agent_modes_are_localspec_modes_without_lengths(
    modes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "agent", "--modes", modes]) == 2
    err = capsys.readouterr().err
    assert "--modes of `bench agent` are localspec's --spec modes" in err
    assert "+no-suffix" in err and "Traceback" not in err
