"""`--draft-ctx-size` (`-cd`, llama-server's `--ctx-size-draft`): one option for every command
that loads models, a value the draft cannot work in refused in one line naming it, and the
settings it becomes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localspec.cli import build_parser, main
from localspec.cli.bench_processes import model_args
from localspec.cli.options import runtime_settings
from localspec.cli.server_choice import requirements
from localspec.errors import UsageError
from localspec.loading import MIN_DRAFT_CTX, RuntimeSettings
from localspec.remote import conflicts
from tests.cli.test_options import user_registry


def default_pair(name: str) -> None:
    """Make the user registry's pair `name` the default one, which doctor reports on."""
    registry = Path(os.environ["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    registry.write_text(f'default_pair = "{name}"\n' + registry.read_text())


COMMANDS = [
    ["complete", "p"],
    ["serve"],
    ["chat"],
    ["bench", "engine"],
    ["bench", "processes"],
    ["tune"],
    ["doctor"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("flag", ["--draft-ctx-size", "-cd"])
def test_every_command_that_sizes_contexts_takes_it(command: list[str], flag: str) -> None:
    parser = build_parser()
    assert parser.parse_args([*command, flag, "512"]).draft_ctx_size == 512
    assert parser.parse_args(command).draft_ctx_size is None  # the target's, unless given


def test_a_processes_bench_passes_it_to_its_complete_processes() -> None:
    """Each run is a `complete` process: an option it did not get would be accepted, then
    ignored."""
    args = build_parser().parse_args(["bench", "processes", "--target", "t.gguf", "-cd", "256"])
    passed = model_args(args)
    assert passed[passed.index("--draft-ctx-size") + 1] == "256"


@pytest.mark.parametrize("typed", ["x", "0", "-5"])
def test_a_value_that_is_no_size_is_refused_when_parsed(
    typed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["complete", "--draft-ctx-size", typed, "p"])
    assert exited.value.code == 2
    assert "argument -cd/--draft-ctx-size" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--draft-ctx-size", str(MIN_DRAFT_CTX - 1)],  # no room for a window and a draft
        ["--ctx-size", "1024", "--draft-ctx-size", "2048"],  # more than the target sees
        ["--draft-ctx-size", "8192"],  # more than the default --ctx-size, 4096
    ],
)
def test_a_size_the_draft_cannot_use_is_one_line_naming_the_option(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["complete", "--target", "nowhere.gguf", *argv])
    with pytest.raises(UsageError, match="--draft-ctx-size must be between 128 and"):
        runtime_settings(args, need_draft=None)  # refused before any model is looked for
    assert main(["doctor", *argv]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("localspec: error: --draft-ctx-size must be between 128 and")


def test_the_settings_refuse_it_too(tiny_target: Path) -> None:
    with pytest.raises(UsageError, match="--draft-ctx-size"):
        RuntimeSettings(target=tiny_target, n_ctx=512, draft_n_ctx=1024)
    assert RuntimeSettings(target=tiny_target, n_ctx=512).draft_ctx_size == 512
    assert RuntimeSettings(target=tiny_target, draft_n_ctx=256).draft_ctx_size == 256


def test_it_becomes_the_runtime_setting(tiny_target: Path, tiny_draft_exact: Path) -> None:
    argv = ["complete", "--target", str(tiny_target), "--draft", str(tiny_draft_exact)]
    args = build_parser().parse_args([*argv, "--ctx-size", "1024", "-cd", "256"])
    settings = runtime_settings(args, need_draft=True)
    assert (settings.n_ctx, settings.draft_n_ctx) == (1024, 256)


def test_a_server_must_run_the_size_given() -> None:
    """`complete` and `chat` use a running server only where it reports the same size."""
    args = build_parser().parse_args(["complete", "--draft-ctx-size", "256", "p"])
    wanted = requirements(args)
    assert conflicts(wanted, {"draft_n_ctx": 256}) == []
    [other] = conflicts(wanted, {"draft_n_ctx": 4096})
    assert other.asked == "--draft-ctx-size 256"
    assert other.served == "runs with --draft-ctx-size 4096"


def test_doctor_shows_each_context_and_the_kv_memory_it_takes(
    tiny_target: Path, tiny_draft_exact: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user_registry(tiny_target, tiny_draft_exact, "")
    default_pair("tiny")
    assert main(["doctor", "--ctx-size", "1024", "-cd", "256"]) == 0
    out = capsys.readouterr().out
    # the tiny models: 2 layers, 2 KV heads of 16 dimensions, K and V in f16: 256 bytes a token
    assert "  target tiny-target: 1024 tokens, 0.25 MiB (256 bytes a token)\n" in out
    assert "  draft tiny-draft: 256 tokens, 0.06 MiB (256 bytes a token)\n" in out
    assert main(["doctor", "--json", "--ctx-size", "1024", "-cd", "300"]) == 0
    target, draft = json.loads(capsys.readouterr().out)["contexts"]
    assert (target["n_ctx"], target["kv_bytes"]) == (1024, 1024 * 256)
    # llama.cpp rounds a context up to a multiple of 256 cells, and the report says so
    assert (draft["asked"], draft["n_ctx"], draft["kv_bytes"]) == (300, 512, 512 * 256)


def test_doctor_names_the_sizes_of_a_pair_not_installed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user_registry(tmp_path / "gone-target.gguf", tmp_path / "gone-draft.gguf", "")
    default_pair("tiny")
    assert main(["doctor", "-cd", "1024"]) == 0
    out = capsys.readouterr().out
    assert "  target tiny-target: 4096 tokens; not installed, not measured" in out
    assert "  draft tiny-draft: 1024 tokens; not installed, not measured" in out
