"""`localspec complete --server URL` against any OpenAI-compatible endpoint: a real `localspec
serve` over TCP, taken for what it is, for llama-server (`--server-kind llama.cpp`) and for a
generic OpenAI server (`--server-kind openai`). The text is the same every way; options a
kind of server cannot honour are refused in one line before anything is sent."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.conftest import LOCALSPEC, Server, server_env, start_server

__all__ = ["server_env"]  # the module-scoped user folders the server below runs in


@pytest.fixture(scope="module")
def served(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    running = start_server(tiny_target, tiny_draft_exact, "--ctx-size", "1024")
    yield running
    assert running.stop() == 0


def complete(
    server: Server, *args: str, key: str | None = None
) -> subprocess.CompletedProcess[str]:
    where = ["--server", server.url, "--api-key", key or server.token or ""]
    return subprocess.run(
        [LOCALSPEC, "complete", *where, *args, "--max-tokens", "16", "--stats", "def add(a, b):"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def stats(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    record: dict[str, object] = json.loads(result.stderr.strip().splitlines()[-1])
    return record


@pytest.mark.parametrize("shape", [(), ("--raw",)], ids=["chat", "raw"])
def test_every_kind_of_server_gives_the_same_greedy_text(served: Server, shape: tuple[str]) -> None:
    ours = complete(served, *shape)
    as_llama = complete(served, *shape, "--server-kind", "llama.cpp")
    as_openai = complete(served, *shape, "--server-kind", "openai")
    assert ours.stdout and ours.stdout == as_llama.stdout == as_openai.stdout
    assert stats(ours)["via"] == stats(as_openai)["via"] == served.url
    assert stats(ours)["mode"] == "auto"
    assert stats(as_openai)["mode"] == "unreported"  # a generic server's figures: unknown
    assert stats(as_openai)["generated_tokens"] == stats(ours)["generated_tokens"]


def test_fim_goes_to_infill_on_llama_cpp_as_on_localspec(served: Server) -> None:
    fim = ("--fim", "--suffix", "\n    return a + b\n")
    assert (
        complete(served, *fim).stdout == complete(served, *fim, "--server-kind", "llama.cpp").stdout
    )


def test_auto_finds_a_localspec_server_behind_a_url(served: Server) -> None:
    result = complete(served, "--spec", "draft", "--draft-max", "3")
    record = stats(result)
    assert record["mode"] == "draft" and record["accepted"] == record["drafted"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--server-kind", "openai", "--fim", "--suffix", "x"), "--fim needs llama.cpp's /infill"),
        (("--server-kind", "openai", "--spec", "ngram"), "--spec cannot apply there"),
        (("--server-kind", "llama.cpp", "--draft-max", "3"), "--draft-max cannot apply there"),
        (("--server-kind", "openai", "--threads", "2"), "does not report its --threads"),
    ],
)
def test_what_a_kind_of_server_cannot_honour_is_refused(
    served: Server, args: tuple[str, ...], words: str
) -> None:
    result = complete(served, *args)
    assert result.returncode == 2
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""


def test_a_wrong_api_key_is_one_line(served: Server) -> None:
    result = complete(served, key="wrong")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "refused the API key" in line and "--api-key" in line
