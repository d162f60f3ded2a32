"""The shared options as typed in a shell: escapes in --stop, and values refused at parse time."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec.cli import build_parser
from localspec.cli.arguments import unescape
from tests.test_cli import localspec


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


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve", "--parallel", "10000000"], "--parallel/-np: must be at most 16 (each slot"),
        (["serve", "-np", "17"], "argument --parallel/-np: must be at most 16"),
        (["serve", "--parallel", "0"], "argument --parallel/-np: must be at least 1"),
        (["serve", "--queue", "10000000"], "--queue: must be at most 64 (each waiting request"),
        (["serve", "--queue", "-1"], "--queue: must be at least 0 (0: only the running request)"),
        (["bench", "concurrency", "--parallel", "17"], "argument --parallel: must be at most 16"),
    ],
)
def test_slots_and_the_queue_are_bounded_by_what_each_holds_in_memory(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """10,000,000 slots took 2.7 GB before serving anything: refused when parsed, naming the
    option and its bound (`bench concurrency` starts `serve` with its own --parallel)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert words in capsys.readouterr().err
    assert build_parser().parse_args(["serve", "-np", "16", "--queue", "64"]).parallel == 16


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


def _numeric_options(
    parser: argparse.ArgumentParser, command: str = "localspec"
) -> Iterator[tuple[str, argparse.Action]]:
    """Every option of every command (and subcommand) whose value is a number."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _numeric_options(sub, f"{command} {name}")
        elif action.option_strings and callable(action.type) and action.type not in (str, Path):
            try:
                parsed = action.type("1")
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                continue
            if parsed is None or isinstance(parsed, int | float):
                yield f"{command} {action.option_strings[-1]}", action


def test_every_numeric_option_has_an_upper_bound() -> None:
    """A number no option means (20 digits, NaN, infinity) is refused when parsed, in an
    error argparse prefixes with the option's name, never taken and used."""
    options = list(_numeric_options(build_parser()))
    assert len(options) > 40  # the walk reached the subcommands
    for name, action in options:
        assert callable(action.type)
        for typed in ("99999999999999999999", "nan", "inf", "1e999"):
            with pytest.raises(argparse.ArgumentTypeError):
                action.type(typed)
                raise AssertionError(f"{name} took {typed}")


def test_a_refused_number_names_its_option() -> None:
    result = localspec("complete", "--max-tokens", "99999999999999999999", "hi")
    assert result.returncode == 2
    assert "argument --max-tokens: must be at most 2147483647" in result.stderr
