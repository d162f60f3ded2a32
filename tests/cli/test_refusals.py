"""Options a command cannot honour are refused in one line before any work, never dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_cli import localspec


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["bench", "--llama-server", "/usr/bin/true"],
            "--llama-server is used only by the server-* modes",
        ),
        (["bench", "--json", "/nonexistent/dir/bench.json"], "the folder /nonexistent/dir"),
        (["bench", "--repeats", "0"], "--repeats and --max-tokens must be at least 1"),
        (
            ["bench", "--quick", "--max-tokens", "0"],
            "--repeats and --max-tokens must be at least 1",
        ),
        (["bench", "--quick", "--chart", "/nonexistent/c.png"], "cannot write /nonexistent/c"),
        (["whatif", "results.json", "--json", "/nonexistent/w.json"], "the folder /nonexistent"),
    ],
)
def test_refused_before_any_work(
    tiny_target: Path, argv: list[str], words: str, tmp_path: Path
) -> None:
    model = [] if argv[0] == "whatif" else ["--target", str(tiny_target)]
    result = localspec(*argv, *model)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert words in line
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["complete", "chat", "serve", "bench"])
def test_m_and_target_together_are_refused(tiny_target: Path, command: str) -> None:
    """--target would silently replace -m's pair: say so instead of dropping -m."""
    prompt = ["hi"] if command == "complete" else []
    result = localspec(command, "-m", "qwen2.5-coder-1.5b", "--target", str(tiny_target), *prompt)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "both name the target" in line
