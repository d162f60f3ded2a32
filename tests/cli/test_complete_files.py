"""`localspec complete --file`: files in the prompt, in process and through a server alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec import Message, Runtime, RuntimeSettings
from localspec.context_files import files_block, system_prompt
from tests.cli.test_complete import run
from tests.server.conftest import start_server

CODE = "def add(a, b):\n    return a + b\n"


def _prompt_tokens(target: Path, messages: list[Message]) -> int:
    with Runtime(RuntimeSettings(target=target, n_ctx=512, n_threads=1)) as runtime:
        return len(runtime.prompts.chat_prompt(messages))


def _stats(stderr: str) -> dict[str, object]:
    stats: dict[str, object] = json.loads(stderr.strip().splitlines()[-1])
    return stats


def test_files_follow_the_system_prompt_in_process_and_through_a_server(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("calc.py").write_text(CODE, encoding="utf-8")
    Path("notes.md").write_text("# Notes\n", encoding="utf-8")
    args = ("--target", tiny_target, "--max-tokens", "8", "--spec", "off", "--stats")
    files = ("--file", "calc.py", "--file", "notes.md", "-s", "Be brief.")
    local = run(*args, *files, "--no-server", "explain")
    assert local.returncode == 0, local.stderr
    system = system_prompt("Be brief.", files_block([Path("calc.py"), Path("notes.md")]))
    assert "calc.py:\n```python\n" + CODE + "```" in system
    expected = _prompt_tokens(tiny_target, [Message("system", system), Message("user", "explain")])
    assert _stats(local.stderr)["prompt_tokens"] == expected
    server = start_server(tiny_target, None, auth=False)
    try:
        served = run(*args, *files, "--server", server.socket_path, "explain")
    finally:
        assert server.stop() == 0
    assert served.returncode == 0, served.stderr
    assert served.stdout == local.stdout
    assert _stats(served.stderr)["prompt_tokens"] == expected


def test_raw_prompts_get_the_files_before_the_text(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("calc.py").write_text(CODE, encoding="utf-8")
    result = run(
        "--target", tiny_target, "--raw", "--max-tokens", "4", "--stats", "--file", "calc.py", "go"
    )
    assert result.returncode == 0, result.stderr
    with Runtime(RuntimeSettings(target=tiny_target, n_ctx=512, n_threads=1)) as runtime:
        expected = len(runtime.prompts.tokenize(files_block([Path("calc.py")]) + "\n\ngo"))
    assert _stats(result.stderr)["prompt_tokens"] == expected


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("missing.py", "missing.py: no such file"),
        ("logo.png", "logo.png is a binary file"),
        ("latin.txt", "latin.txt is not UTF-8 text"),
    ],
)
def test_a_file_that_cannot_be_sent_is_one_line_and_exit_2(
    tiny_target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, words: str
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    Path("latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    result = run("--target", tiny_target, "--file", name, "hi")
    assert result.returncode == 2
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_files_do_not_go_with_fim(tiny_target: Path, tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(CODE, encoding="utf-8")
    result = run(
        "--target", tiny_target, "--fim", "--suffix", "x", "--file", tmp_path / "calc.py", "p"
    )
    assert result.returncode == 2 and "not to --fim" in result.stderr
