"""`localspec chat` through a running server: a real `localspec serve` process on the tiny
models, the app driven with Pilot from the command line's own launch settings.

The app never loads a model itself (its runtime factory fails the test if it is called); the
answer streams with the server's engine steps, Escape closes the stream and the server counts
the cancel. Taken for a generic OpenAI server (`--server-kind openai`), the same server still
streams and cancels, with dashes for the speculation figures it does not report.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from textual.widgets import Label

from localspec import ChatRequest, Finished, Message, RuntimeSettings, SpecMode, SpecSettings
from localspec.cli import build_parser
from localspec.cli.chat import launch_settings
from tests.server.conftest import (
    Server,
    server_env,
    short_socket_dir,
    start_server,
    wait_until_idle,
)
from tests.tui.helpers import SIZE, answered, ready, send, wait_until
from tui.app import ChatApp
from tui.host import SERVER_MODELS
from tui.screens.chat import ChatScreen
from tui.settings import Launch
from tui.store import ChatStore
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.status import StatusBar

pytestmark = pytest.mark.anyio
__all__ = ["server_env"]  # the module-scoped user folders the server below runs in

LONG_CTX = 32768  # an answer of thousands of tokens is surely still running when Escape comes
QUESTION = "Write a function that adds two numbers"


@pytest.fixture(scope="module")
def served(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    """A server on a runtime folder's default socket, and on TCP with its token."""
    runtime = short_socket_dir("lsrt-")
    runtime.chmod(0o700)
    socket_path = runtime / "localspec" / "localspec.sock"
    server = start_server(
        tiny_target, tiny_draft_exact, "--ctx-size", str(LONG_CTX), socket_path=socket_path
    )
    yield server
    assert server.stop() == 0


@pytest.fixture
def server(served: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The module's server, on this test's default socket (where `chat` looks)."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(served.socket_path.parent.parent))
    return served


def never_loads(settings: RuntimeSettings, _notify: Callable[[str], None]) -> object:
    raise AssertionError(f"the app loaded {settings.target} in-process")


def chat_app(argv: list[str], folder: Path) -> ChatApp:
    launch = launch_settings(build_parser().parse_args(["chat", *argv]))
    return ChatApp(launch, never_loads, ChatStore(folder / "chat.sqlite3"))  # type: ignore[arg-type]


def label(app: ChatApp, widget_id: str) -> str:
    return str(app.screen.query_one(StatusBar).query_one(f"#{widget_id}", Label).content)


def errors(app: ChatApp) -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == "error"]


def cancels(server: Server) -> int:
    wait_until_idle(server, timeout=60)
    with server.unix() as http:
        count: int = http.get("/health").json()["cancelled"]
    return count


async def test_chat_answers_through_the_local_server_without_loading_a_model(
    server: Server, tmp_path: Path
) -> None:
    app = chat_app(["--spec", "draft", "--draft-max", "3", "--max-tokens", "24"], tmp_path)
    assert app.launch.server is not None
    assert app.launch.server.address.socket_path == server.socket_path
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        assert screen.host.runtime is None
        assert screen.model_label == "target (served)"
        # the window the server reports, measured once connected
        meter = f"ctx 0/{LONG_CTX}"
        await wait_until(pilot, lambda: label(app, "context") == meter, "the context meter")
        await send(pilot, QUESTION)
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        assert answer.status == "complete"
        # the server's engine steps: spans per step, the exact draft's tokens marked drafted
        assert len(answer.spans) > 1 and any(from_draft for _, _, from_draft in answer.spans)
        assert sum(length for length, _, _ in answer.spans) == len(answer.content)
        assert screen.stats is not None and screen.stats.final is not None
        final = screen.stats.final
        assert final.mode == "draft" and final.accepted == final.drafted > 0
        assert label(app, "acceptance") == "accept 100%"
        used = final.prompt_tokens + final.generated_tokens
        assert label(app, "context") == f"ctx {used}/{LONG_CTX}"
        # the same conversation asked of the server directly gets the same greedy answer
        asked = screen._model_messages()[:-1]
        assert screen.host.remote is not None
        direct = list(screen.host.remote.chat(_request(asked, 24)))
        assert isinstance(direct[-1], Finished) and direct[-1].text == answer.content


def _request(messages: Sequence[Message], max_tokens: int) -> ChatRequest:
    spec = SpecSettings(mode=SpecMode.DRAFT, draft_max=3)
    return ChatRequest(messages, max_tokens, spec=spec)


GENERIC = ["--server-kind", "openai", "--ctx-size", str(LONG_CTX)]


async def test_a_generic_openai_server_streams_with_dashes_for_speculation(
    server: Server, tmp_path: Path
) -> None:
    argv = ["--server", server.url, "--api-key", server.token or "", *GENERIC]
    app = chat_app([*argv, "--spec", "draft", "--max-tokens", "24"], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await pilot.pause()
        assert label(app, "context") == "ctx --"  # nothing measured before an answer
        await send(pilot, QUESTION)
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        assert answer.status == "complete" and answer.content
        assert not any(from_draft for _, _, from_draft in answer.spans)
        assert (label(app, "acceptance"), label(app, "mean-length")) == ("accept --", "len --")
        assert label(app, "proposer") == "--"
        assert "--" not in label(app, "speed")
        assert screen.stats is not None and screen.stats.final is not None
        final = screen.stats.final  # the usage after the answer fills the meter
        used = final.prompt_tokens + final.generated_tokens
        assert final.prompt_tokens > 0 and label(app, "context") == f"ctx {used}/{LONG_CTX}"


@pytest.mark.parametrize("kind", ["localspec", "openai"])
async def test_escape_closes_the_stream_and_the_server_cancels(
    server: Server, tmp_path: Path, kind: str
) -> None:
    before = cancels(server)
    long = ["--spec", "off", "--ignore-eos", "--max-tokens", str(LONG_CTX - 100)]
    argv = [] if kind == "localspec" else ["--server", server.url, "--api-key", server.token or ""]
    app = chat_app([*argv, *(GENERIC if kind == "openai" else []), *long], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "tell me a long story")
        await wait_until(pilot, lambda: bool(_streamed(screen)), "the answer to stream")
        await pilot.press("escape")
        await answered(pilot, screen)
        answer = screen.query(MessageView).last()
        assert answer.status == "cancelled" and answer.content
        assert screen.query_one(PromptInput).text == "tell me a long story"
    deadline = time.monotonic() + 60  # a hang guard: the server notices at its next step
    while cancels(server) != before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancels(server) == before + 1


def _streamed(screen: ChatScreen) -> str:
    views = screen.query(MessageView)
    return views.last().content if views and screen.turn is not None else ""


async def test_the_model_picker_cannot_switch_the_servers_models(
    server: Server, tmp_path: Path
) -> None:
    app = chat_app([], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("f3")
        await pilot.pause()
        assert isinstance(app.screen, ChatScreen)  # no picker
        assert [str(n.message) for n in app._notifications][-1] == SERVER_MODELS


@pytest.mark.parametrize(
    ("where", "words"),
    [
        ("nothing", "no server answers at http://127.0.0.1:9"),
        ("wrong key", "refused the API key"),
    ],
)
async def test_a_server_that_cannot_be_used_is_one_line_in_the_app(
    served: Server, tmp_path: Path, where: str, words: str
) -> None:
    url = "http://127.0.0.1:9" if where == "nothing" else served.url
    app = chat_app(["--server", url, "--api-key", "wrong"], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.chat
        await wait_until(pilot, lambda: bool(errors(app)), "the connection's failure")
        [error] = errors(app)
        assert words in error and "\n" not in error
        await send(pilot, QUESTION)
        await wait_until(pilot, lambda: len(errors(app)) == 2, "the refusal to send")
        assert "is not connected" in errors(app)[1]
        assert screen.query_one(PromptInput).text == QUESTION  # nothing typed is lost
        assert not screen.query(MessageView)


@pytest.fixture
def doomed(tiny_target: Path) -> Iterator[Server]:
    """A server of this test's own, to be killed."""
    server = start_server(tiny_target, None, "--ctx-size", str(LONG_CTX), "--spec", "off")
    yield server
    if server.process.poll() is None:
        server.process.kill()
    server.process.wait(timeout=30)


@pytest.mark.parametrize("when", ["before the turn", "mid-stream"])
async def test_a_server_gone_is_one_line_in_the_app(
    doomed: Server, tmp_path: Path, when: str
) -> None:
    long = ["--ignore-eos", "--max-tokens", str(LONG_CTX - 100)]
    app = chat_app(["--server", f"unix:{doomed.socket_path}", *long], tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        if when == "before the turn":
            os.kill(doomed.process.pid, signal.SIGKILL)
            doomed.process.wait(timeout=30)
        await send(pilot, QUESTION)
        if when == "mid-stream":
            await wait_until(pilot, lambda: bool(_streamed(screen)), "the answer to stream")
            os.kill(doomed.process.pid, signal.SIGKILL)
        await wait_until(pilot, lambda: bool(errors(app)), "the failure")
        await answered(pilot, screen)
        [error] = errors(app)
        assert "\n" not in error
        if when == "mid-stream":  # what streamed stays, marked interrupted
            assert "stopped answering mid-reply" in error
            assert screen.query(MessageView).last().status == "interrupted"
        else:  # nothing was answered: the prompt comes back
            assert "no localspec server answers" in error
            assert screen.query_one(PromptInput).text == QUESTION
            assert not screen.query(MessageView)


def test_a_server_that_runs_other_models_is_not_used_and_chat_says_why(
    server: Server, tiny_target: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = short_socket_dir() / "other.gguf"
    other.symlink_to(tiny_target)
    launch: Launch = launch_settings(build_parser().parse_args(["chat", "--target", str(other)]))
    assert launch.server is None and launch.runtime.target == other
    notice = capsys.readouterr().err.strip()
    assert notice == (
        f"localspec: the server at unix:{server.socket_path} runs target target.gguf; "
        f"loading the models in-process for target other.gguf"
    )
    forced = ["chat", "--server", str(server.socket_path), "--no-server"]
    with pytest.raises(SystemExit):  # one or the other
        build_parser().parse_args(forced)
    here = ["chat", "--target", str(tiny_target), "--no-server"]
    assert launch_settings(build_parser().parse_args(here)).server is None
