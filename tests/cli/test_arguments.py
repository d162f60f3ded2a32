"""The shared options as typed in a shell: escapes in --stop, and values refused at parse time."""

from __future__ import annotations

import pytest

from localspec.cli import build_parser
from localspec.cli.arguments import unescape


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        (r"\n\n", "\n\n"),
        (r"a\tb\r", "a\tb\r"),
        (r"\\n", "\\n"),  # an escaped backslash, then a plain n
        (r"\\\n", "\\\n"),
        (r"\x41 and \u", r"\x41 and \u"),  # other escapes stay as typed
        ("trailing \\", "trailing \\"),
        ("```", "```"),
    ],
)
def test_unescape(typed: str, meant: str) -> None:
    assert unescape(typed) == meant


@pytest.mark.parametrize("command", ["complete", "chat", "serve"])
def test_every_command_with_stop_unescapes_it(command: str) -> None:
    args = build_parser().parse_args([command, "--stop", r"\n\n", "--stop", "END"])
    assert args.stop == ["\n\n", "END"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--stop", ""], "a stop string cannot be empty"),
        (["--threads", "0"], "--threads: must be at least 1"),
        (["--ctx-size", "-5"], "--ctx-size: must be at least 1"),
        (["--gpu-layers", "-2"], "--gpu-layers: must be at least -1 (-1: all)"),
        (["--draft-gpu-layers", "x"], "'x' is not a whole number"),
        (["--seed", "1.5"], "'1.5' is not a whole number"),
    ],
)
def test_impossible_values_are_refused_when_parsed(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["complete", *argv, "prompt"])
    assert exited.value.code == 2
    assert words in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("-1", "must be between 0 and 86400 seconds, not -1"),
        ("nan", "must be between 0 and 86400 seconds, not nan"),
        ("inf", "must be between 0 and 86400 seconds, not inf"),
        ("soon", "'soon' is not a number of seconds"),
    ],
)
def test_a_prompt_hold_is_a_number_of_seconds(
    value: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--prompt-hold", value])
    assert words in capsys.readouterr().err
    assert build_parser().parse_args(["serve", "--prompt-hold", "2.5"]).prompt_hold == 2.5
    assert build_parser().parse_args(["serve"]).prompt_hold is None


def test_a_negative_seed_means_random_as_in_llama_cpp() -> None:
    assert build_parser().parse_args(["complete", "--seed", "-1"]).seed is None
    assert build_parser().parse_args(["complete", "--seed", "7"]).seed == 7


def test_load_options_left_out_are_none_so_a_server_need_not_match_them() -> None:
    args = build_parser().parse_args(["complete", "p"])
    assert (args.ctx_size, args.threads, args.gpu_layers, args.draft_gpu_layers, args.mmap) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_serve_leaves_max_tokens_to_the_request_complete_and_chat_default_to_256() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve"]).max_tokens is None
    assert parser.parse_args(["complete", "p"]).max_tokens == 256
    assert parser.parse_args(["chat"]).max_tokens == 256
