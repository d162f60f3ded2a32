"""`localspec chat`'s server options reach the launch, and with a server nothing is fetched:
the app connects when it starts (what the server is, and whether it answers, is found then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from localspec import ServerKind
from localspec.cli import build_parser
from localspec.cli.chat import launch_settings
from localspec.errors import UsageError

SERVER_OPTIONS = {"server", "no_server", "api_key", "server_kind"}


def test_every_server_option_reaches_the_launch(tmp_path: Path) -> None:
    absent = tmp_path / "not-here.gguf"  # never fetched nor opened: the server runs the models
    argv = ["chat", "--target", str(absent), "--server", "https://example.com/llm/v1"]
    argv += ["--api-key", "key", "--server-kind", "openai", "--ctx-size", "2048"]
    launch = launch_settings(build_parser().parse_args(argv))
    server = launch.server
    assert server is not None
    reached = {
        "server": server.address.url == "https://example.com/llm/v1",
        "api_key": server.address.token == "key",
        "server_kind": server.kind is ServerKind.OPENAI,
        "no_server": build_parser().parse_args(["chat", "--no-server"]).no_server,
    }
    assert [option for option, ok in reached.items() if not ok] == []
    assert set(reached) == SERVER_OPTIONS
    assert server.window == 2048  # the window of a server that does not report one
    # the target is what the server must run, checked when the app connects
    assert [(r.key, r.value) for r in server.requires] == [
        ("target", "not-here.gguf"),
        ("n_ctx", 2048),
    ]
    assert launch.runtime.target == absent and launch.model_label == "server"


def test_no_server_loads_here(tiny_target: Path) -> None:
    args = build_parser().parse_args(["chat", "--target", str(tiny_target), "--no-server"])
    launch = launch_settings(args)
    assert launch.server is None and launch.runtime.target == tiny_target


def test_auto_kind_is_asked_when_the_app_connects() -> None:
    launch = launch_settings(build_parser().parse_args(["chat", "--server", "http://h:1"]))
    assert launch.server is not None and launch.server.kind is None


def test_an_address_that_is_no_server_is_refused_before_the_app_starts() -> None:
    with pytest.raises(UsageError, match="give a server as"):
        launch_settings(build_parser().parse_args(["chat", "--server", "ftp://example.com"]))
