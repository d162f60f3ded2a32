"""`localspec chat`'s options: each one reaches what the app starts with, none is dropped, and
--ignore-eos reaches the engine's requests."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import pytest

from localspec import SpecMode
from localspec.cli import build_parser
from localspec.cli.chat import launch_settings
from localspec.observe.history import default_history_path
from tests.tui.helpers import SIZE, answered, ready, send
from tests.tui.test_remote_launch import SERVER_OPTIONS
from tui.app import ChatApp
from tui.settings import ChatSettings, Launch
from tui.store import ChatStore

# handled before the command runs: argparse's --help, and --verbose by `localspec.cli.main`
# (the log level; `chat` sends the log to a file while the app owns the terminal)
_HANDLED_BY_THE_CLI = {"help", "verbose"}


def _chat_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    assert isinstance(commands, argparse._SubParsersAction)
    parser = commands.choices["chat"]
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def _every_option(target: Path, draft: Path) -> list[str]:
    return [
        *("chat", "--target", str(target), "--draft", str(draft), "--offline"),
        *("--ctx-size", "768", "--threads", "1", "--gpu-layers", "0"),
        *("--draft-gpu-layers", "0", "--mmap", "-s", "be brief", "--conversation", "7"),
        *("--flash-attn", "on", "--cache-type-v", "bf16"),
        *("--ubatch-size", "64"),
        *("--max-tokens", "33", "--temperature", "0.5", "--top-k", "5", "--top-p", "0.9"),
        *("--min-p", "0.05", "--repeat-penalty", "1.1", "--seed", "3"),
        *("--stop", "END", "--stop", "FIN", "--ignore-eos", "--spec", "hybrid"),
        *("--draft-max", "6", "--p-min", "0.2", "--ngram-max", "9", "--ngram-min-match", "3"),
        "--no-redecode-ties",
        *("--max-draft-tokens", "40", "--max-draft-ms", "250"),
        *("--draft-ctx-size", "256", "--no-guard", "--no-history"),
        *("--no-suffix-drafts", "--no-suffix-store"),
    ]


def _mtp_launch(target: Path) -> Launch:
    return launch_settings(build_parser().parse_args(["chat", "--target", str(target), "--mtp"]))


def test_every_option_reaches_the_launch(tiny_target: Path, tiny_draft_exact: Path) -> None:
    args = build_parser().parse_args(_every_option(tiny_target, tiny_draft_exact))
    launch = launch_settings(args)
    runtime, defaults, sampling, spec = (
        launch.runtime,
        launch.defaults,
        launch.sampling,
        launch.spec,
    )
    reached = {
        "target": runtime.target == tiny_target and launch.model_label == tiny_target.stem,
        "draft": runtime.draft == tiny_draft_exact,
        "offline": launch.offline,
        "ctx_size": runtime.n_ctx == 768,
        "threads": runtime.n_threads == 1,
        "gpu_layers": runtime.target_gpu_layers == 0,
        "draft_gpu_layers": runtime.draft_gpu_layers == 0,
        "mmap": runtime.use_mmap,
        "flash_attn": runtime.flash_attn == "on",
        "cache_type_v": runtime.cache_type_v == "bf16",
        "ubatch_size": runtime.ubatch == 64,
        "system": defaults.system == "be brief",
        "conversation": launch.conversation == 7,
        "max_tokens": defaults.max_tokens == 33,
        "temperature": defaults.temperature == 0.5,
        "top_k": sampling.top_k == 5,
        "top_p": defaults.top_p == 0.9,
        "min_p": sampling.min_p == 0.05,
        "repeat_penalty": sampling.repeat_penalty == 1.1,
        "seed": sampling.seed == 3,
        "stop": launch.stop == ("END", "FIN"),
        "ignore_eos": launch.ignore_eos,
        "spec": defaults.spec_mode is SpecMode.HYBRID,
        "draft_max": defaults.draft_max == 6,
        "p_min": spec.p_min == 0.2,
        "ngram_max": spec.ngram_draft_max == 9,
        "ngram_min_match": spec.ngram_min_match == 3,
        "redecode_ties": spec.redecode_ties is False,
        "max_draft_tokens": spec.max_draft_tokens == 40,
        "max_draft_ms": spec.max_draft_ms == 250.0,
        "draft_ctx_size": runtime.draft_n_ctx == 256,
        "guard": runtime.guard is None,
        "no_history": runtime.history is None,
        "suffix_drafts": spec.suffix_drafts is False,
        "no_suffix_store": runtime.suffix_store is None,
        # --mtp replaces --draft (both are refused together): its own launch
        "mtp": _mtp_launch(tiny_target).runtime.mtp,
    }
    assert [option for option, ok in reached.items() if not ok] == []
    # an option added to `chat` without a place here fails this test until it is wired in
    accepted = {action.dest for action in _chat_parser()._actions} - _HANDLED_BY_THE_CLI
    # -m: the pair, when no --target replaces it; the server options: test_remote_launch.py
    assert accepted - set(reached) == {"model", *SERVER_OPTIONS}


def test_model_picks_the_registry_pair(tiny_target: Path, tiny_draft_exact: Path) -> None:
    registry = Path(os.environ["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    registry.parent.mkdir(parents=True)
    registry.write_text(
        f'[models.t]\npath = "{tiny_target}"\n[models.d]\npath = "{tiny_draft_exact}"\n'
        '[pairs.tiny]\ntarget = "t"\ndraft = "d"\nsettings = { draft_max = 5 }\n'
    )
    launch = launch_settings(build_parser().parse_args(["chat", "-m", "tiny", "--spec", "draft"]))
    assert (launch.runtime.target, launch.runtime.draft) == (tiny_target, tiny_draft_exact)
    assert launch.model_label == "tiny" and launch.defaults.draft_max == 5


@pytest.mark.anyio
@pytest.mark.parametrize("ignore_eos", [False, True])
async def test_ignore_eos_generates_exactly_max_tokens(
    tiny_target: Path, tmp_path: Path, ignore_eos: bool
) -> None:
    argv = ["chat", "--target", str(tiny_target), "--spec", "off", "--threads", "1"]
    argv += ["--ctx-size", "512", "--max-tokens", "24", *(["--ignore-eos"] if ignore_eos else [])]
    app = ChatApp(launch_settings(build_parser().parse_args(argv)), store=ChatStore(tmp_path / "c"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        # the tiny seed-0 model ends its greedy answer to this prompt after 15 tokens
        await send(pilot, "in in in in")
        await answered(pilot, screen)
        assert screen.stats is not None and screen.stats.final is not None
        generated = screen.stats.final.generated_tokens
    if ignore_eos:
        assert generated == 24
    else:
        assert 0 < generated < 24


def test_the_options_typed_are_told_from_the_defaults(tiny_target: Path) -> None:
    def given(*typed: str) -> frozenset[str]:
        argv = ["chat", "--target", str(tiny_target), "--spec", "off", *typed]
        return launch_settings(build_parser().parse_args(argv)).given

    assert given() == {"spec_mode"}
    # a value equal to the default was still typed
    assert given("--temperature", "0", "--top-p", "1", "--max-tokens", "256") == {
        "spec_mode",
        "temperature",
        "top_p",
        "max_tokens",
    }
    assert given("-s", "", "--draft-max", "4", "--top-k", "3") == {
        "spec_mode",
        "system",
        "draft_max",
    }


_SAVED = ChatSettings(system="saved", temperature=0.7, top_p=0.8, draft_max=2, max_tokens=7)
_OFF = replace(_SAVED, spec_mode=SpecMode.OFF)  # every case types --spec off


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ([], _OFF),
        (["--temperature", "0.5"], replace(_OFF, temperature=0.5)),
        (["--temperature", "0"], replace(_OFF, temperature=0.0)),  # the default's value
        (
            ["-s", "new", "--draft-max", "3", "--top-p", "0.9", "--max-tokens", "9"],
            replace(_OFF, system="new", draft_max=3, top_p=0.9, max_tokens=9),
        ),
    ],
    ids=["none", "temperature", "default-value", "the-rest"],
)
async def test_options_typed_with_conversation_win_over_its_saved_settings(
    tiny_target: Path, tmp_path: Path, typed: list[str], expected: ChatSettings
) -> None:
    store = ChatStore(tmp_path / "c")
    conversation = store.create(_SAVED.to_json(), "saved")
    argv = ["chat", "--target", str(tiny_target), "--threads", "1", "--spec", "off"]
    argv += ["--conversation", str(conversation.id), *typed]
    app = ChatApp(launch_settings(build_parser().parse_args(argv)), store=store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        assert screen.conversation_id == conversation.id
        assert screen.settings == expected
        # saved as the conversation's own: the next start without options keeps them
        saved = store.conversation(conversation.id)
        assert saved is not None
        assert ChatSettings.from_json(saved.settings, ChatSettings()) == expected
        # other conversations keep their own settings, whatever was typed
        other = store.create(_SAVED.to_json(), "other")
        await screen.open_conversation(other.id)
        assert screen.settings == _SAVED


def test_the_chat_is_guarded_and_keeps_a_history_by_default(tiny_target: Path) -> None:
    args = build_parser().parse_args(["chat", "--target", str(tiny_target), "--offline"])
    runtime = launch_settings(args).runtime
    assert runtime.guard is not None and runtime.history == default_history_path()
