"""Each command's `--help` shows its options under named headings, the shared ones under the
same heading on every command that takes them (declared once, in `cli.arguments`)."""

from __future__ import annotations

import re

import pytest

from localspec.cli import main
from tests.bench.test_cli_bench import BENCHMARKS

SHARED = ["model", "speculation", "sampling", "limits", "server"]
HEADINGS = {
    "complete": ["positional arguments", "options", *SHARED],
    "chat": ["options", *SHARED],
    "serve": ["options", *SHARED, "prompt cache"],
    "tune": ["options", "model"],
    "bench": ["options", "benchmarks"],
    **{f"bench {name}": ["options", "model", "benchmark"] for name in BENCHMARKS},
}
# one option of each shared heading, where every command that has the heading shows it
UNDER = {
    "model": "--ctx-size",
    "speculation": "--spec",
    "sampling": "--temperature",
    "limits": "--max-tokens",
    "server": "--server",
}


def sections(command: str, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """`localspec COMMAND --help`, as its text under each heading."""
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--help"])
    assert exited.value.code == 0
    parts = re.split(r"(?m)^(\S[^\n]*):\n", capsys.readouterr().out)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.parametrize("command", list(HEADINGS))
def test_each_command_shows_its_options_under_these_headings(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert list(sections(command, capsys)) == HEADINGS[command]


@pytest.mark.parametrize("command", ["complete", "chat", "serve"])
def test_a_shared_option_is_under_the_same_heading_everywhere(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = sections(command, capsys)
    option = {**UNDER, "server": "--server" if command != "serve" else "--port"}
    for heading, name in option.items():
        assert re.search(rf"^  {name}\b", shown[heading], re.MULTILINE), (heading, name)
