"""The llama-server baseline: its command line from the binary's --help, and a real server on
tiny models when a llama-server binary is available (LLAMA_SERVER or PATH)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from localspec.bench.editor import localspec_command
from localspec.bench.llama_server import server_command
from localspec.bench.modes import parse_mode, parse_modes
from localspec.bench.progress import Progress
from localspec.bench.runner import BenchOptions, BenchResult, run_bench
from localspec.bench.workloads import Workload
from localspec.loading import RuntimeSettings
from localspec.runtime import Runtime

NEW_HELP = (
    "--spec-type none,draft-simple,ngram-simple,ngram-mod --spec-draft-n-max N 'all' --load-mode"
)
OLD_HELP = "--draft-max N --no-mmap"
SETTINGS = RuntimeSettings(target=Path("t.gguf"), draft=Path("d.gguf"), n_ctx=1024)


def _command(mode: str, help_text: str, settings: RuntimeSettings = SETTINGS) -> list[str] | str:
    return server_command(
        parse_mode(mode), Path("llama-server"), settings, threads=2, help_text=help_text, port=8
    )


def test_command_uses_the_same_models_context_and_threads() -> None:
    command = _command("server-off", NEW_HELP)
    assert isinstance(command, list)
    joined = " ".join(command)
    assert "-m t.gguf -c 1024 -t 2 -tb 2 -ngl all" in joined
    assert "--host 127.0.0.1 --port 8" in joined and "-md" not in command
    assert "--load-mode none" in joined  # localspec does not map model files by default


def test_draft_mode_flags_follow_the_build() -> None:
    new = _command("server-draft:3", NEW_HELP)
    assert isinstance(new, list)
    assert new[new.index("-md") + 1] == "d.gguf"
    assert new[new.index("--spec-draft-n-max") + 1] == "3"
    assert new[new.index("--spec-type") + 1] == "draft-simple"
    old = _command("server-draft:3", OLD_HELP)
    assert isinstance(old, list)
    assert old[old.index("--draft-max") + 1] == "3" and "--no-mmap" in old
    assert "-ngl" in old and old[old.index("-ngl") + 1] == "999"


def test_unsupported_or_impossible_modes_say_why() -> None:
    assert (
        _command("server-ngram-mod", OLD_HELP) == "this llama-server has no --spec-type ngram-mod"
    )
    no_draft = RuntimeSettings(target=Path("t.gguf"))
    assert "no draft model" in str(_command("server-draft", NEW_HELP, no_draft))
    ngram = _command("server-ngram-simple", NEW_HELP)
    assert isinstance(ngram, list) and ngram[ngram.index("--spec-type") + 1] == "ngram-simple"
    assert _command("server-spec-default", NEW_HELP) == "this llama-server has no --spec-default"


def test_llama_servers_best_ngram_settings_are_modes() -> None:
    """ngram-cache (static and dynamic caches) and --spec-default (ngram-mod at llama.cpp's
    recommended lengths), what suffix drafts are compared with."""
    help_text = NEW_HELP + ",ngram-cache --spec-default"
    cache = _command("server-ngram-cache", help_text)
    assert isinstance(cache, list) and cache[cache.index("--spec-type") + 1] == "ngram-cache"
    default = _command("server-spec-default", help_text)
    assert isinstance(default, list) and "--spec-default" in default
    assert "--spec-type" not in default


def _llama_server() -> Path | None:
    found = os.environ.get("LLAMA_SERVER") or shutil.which("llama-server")
    return Path(found) if found else None


@pytest.mark.skipif(
    _llama_server() is None, reason="no llama-server binary (set LLAMA_SERVER or put it on PATH)"
)
def test_real_llama_server_on_tiny_models(tiny_target: Path, tiny_draft_exact: Path) -> None:
    settings = RuntimeSettings(target=tiny_target, draft=tiny_draft_exact, n_ctx=512, n_threads=1)
    workloads = [Workload("chat", "edit", prompt="Rename x to y: x = 1; print(x)")]
    modes = parse_modes("off,server-off,server-draft:3,server-ngram-simple")
    with Runtime(settings) as runtime:
        result = run_bench(
            runtime,
            workloads,
            modes,
            BenchOptions(repeats=1, max_tokens=16, llama_server=_llama_server()),
            Progress(io.StringIO()),
        )
    assert result.skipped == []
    by_mode = {s.mode: s for s in result.samples}
    for name in ("server-off", "server-draft:3", "server-ngram-simple"):
        sample = by_mode[name]
        assert sample.tokens and sample.tokens_per_second > 0
        assert sample.peak_rss_bytes is not None and sample.peak_rss_bytes > 1024 * 1024
    # a draft with the target's exact weights: the server drafts and accepts
    assert by_mode["server-draft:3"].drafted > 0 and by_mode["server-draft:3"].accepted > 0


def _fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    script = tmp_path / "llama-server"
    fake = Path(__file__).with_name("fake_llama_server.py")
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{fake}" "$@"\n')
    script.chmod(0o755)
    record = tmp_path / "args.jsonl"
    monkeypatch.setenv("FAKE_SERVER_ARGS", str(record))
    return script, record


def _run_with(binary: Path, target: Path, draft: Path, modes: str) -> BenchResult:
    settings = RuntimeSettings(target=target, draft=draft, n_ctx=512, n_threads=1)
    workloads = [
        Workload("a", "edit", prompt="Rename x to y: x = 1"),
        Workload("b", "json", prompt="Reply {}"),
    ]
    with Runtime(settings) as runtime:
        return run_bench(
            runtime,
            workloads,
            parse_modes(modes),
            BenchOptions(repeats=2, max_tokens=8, llama_server=binary),
            Progress(io.StringIO()),
        )


def test_server_protocol_against_a_fake_server(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary, record = _fake_server(tmp_path, monkeypatch)
    result = _run_with(binary, tiny_target, tiny_draft_noisy, "off,server-off,server-draft:2")
    assert result.skipped == []
    started = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(started) == 2 and "-md" in started[1] and str(tiny_draft_noisy) in started[1]
    draft = [s for s in result.samples if s.mode == "server-draft:2"]
    assert len(draft) == 4
    for sample in draft:
        assert sample.tokens_per_second == 42.0 and len(sample.tokens) == 8
        assert (sample.drafted, sample.accepted, sample.target_steps) == (6, 3, 5)
        assert sample.peak_rss_bytes is not None and sample.peak_rss_bytes > 0
    plain = [s for s in result.samples if s.mode == "server-off"]
    assert len(plain) == 4
    assert all(s.drafted == 0 and s.mean_acceptance_length == 1.0 for s in plain)


def test_a_server_dying_midway_is_reported_and_its_runs_dropped(
    tiny_target: Path, tiny_draft_noisy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary, _ = _fake_server(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_SERVER_DIE_AFTER", "2")  # the warm-up and one timed run
    result = _run_with(binary, tiny_target, tiny_draft_noisy, "off,server-ngram-mod")
    assert [s.name for s in result.skipped] == ["server-ngram-mod"]
    assert result.skipped[0].reason.startswith("failed on ")
    assert result.modes == ["off"] and {s.mode for s in result.samples} == {"off"}


def test_a_draft_context_size_reaches_both_servers() -> None:
    """`bench --draft-ctx-size`: llama-server's draft gets `-cd`, localspec's server the option."""
    settings = replace(SETTINGS, draft_n_ctx=256)
    command = _command("server-draft:3", NEW_HELP, settings)
    assert isinstance(command, list) and command[command.index("-cd") + 1] == "256"
    assert "-cd" not in _command("server-draft:3", NEW_HELP)  # unset: the target's context
    served = localspec_command(settings, "draft", 1, 8)
    assert served[served.index("--draft-ctx-size") + 1] == "256"
    assert "--draft-ctx-size" not in localspec_command(SETTINGS, "draft", 1, 8)
