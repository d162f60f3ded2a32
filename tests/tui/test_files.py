"""Files in the chat's context, driven with Pilot on the tiny models: `@path`, `/add`, `/drop`,
`/files`, `@diff`, refusals, re-reading, and what the engine receives (its prompt tokens)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Generator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from localspec import GenerationRequest, Message, Runtime, RuntimeSettings
from localspec.cli.complete import with_files
from localspec.cli.parser import build_parser
from localspec.context_files import DIFF_LABEL, ContextFile
from localspec.edits import system_message
from localspec.speculative.engine import Event
from tests.tui.helpers import SIZE, answered, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.screens.chat import ChatScreen
from tui.screens.dialogs import TextScreen
from tui.store import ChatStore
from tui.store_files import file_set, last_sent, sent_with
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.status import StatusBar

pytestmark = pytest.mark.anyio
CODE = "def add(a, b):\n    return a + b\n"


class Recording(Runtime):
    """The real runtime, keeping the prompt tokens of every generation (`sent`) it is asked for."""

    def __init__(
        self, settings: RuntimeSettings, notify: Callable[[str], None] | None = None
    ) -> None:
        super().__init__(settings, notify)
        self.sent: list[list[int]] = []

    def generate(
        self, request: GenerationRequest, should_stop: Callable[[], bool] | None = None
    ) -> Generator[Event, None, None]:
        self.sent.append(list(request.prompt))
        return super().generate(request, should_stop)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory the chat is started in, holding a small Python file."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "calc.py").write_text(CODE, encoding="utf-8")
    monkeypatch.chdir(folder)
    return folder


def _app(target: Path, tmp_path: Path, n_ctx: int = 2048) -> ChatApp:
    """The app on the tiny model; 2048 tokens hold the edit format (a token per byte here)."""
    return ChatApp(
        launch(target, n_ctx=n_ctx, max_tokens=4),
        factory=Recording,
        store=ChatStore(tmp_path / "chat.sqlite3"),
    )


def _runtime(screen: ChatScreen) -> Recording:
    assert isinstance(screen.host.runtime, Recording)
    return screen.host.runtime


def _notes(app: ChatApp, severity: str) -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == severity]


def _expected(screen: ChatScreen, files: list[ContextFile], turns: list[Message]) -> list[int]:
    """The tokens a turn with `files` after an empty system prompt should send: the edit
    format comes with the files, so that an asked-for change is one F6 can apply."""
    system = [Message("system", system_message("", files, edits=True))] if files else []
    return _runtime(screen).prompts.chat_prompt([*system, *turns])


def _meter(app: ChatApp) -> str:
    return str(app.screen.query_one(StatusBar).query_one("#context").render())


def _turns(app: ChatApp, screen: ChatScreen) -> list[Message]:
    """The conversation's saved messages up to its last question (what its last turn sent)."""
    stored = app.store.messages(screen.conversation_id or 0)
    last = max(i for i, m in enumerate(stored) if m.role == "user")
    return [Message(m.role, m.content) for m in stored[: last + 1]]


async def _ask(pilot: Pilot[None], screen: ChatScreen, text: str) -> None:
    await send(pilot, text)
    await answered(pilot, screen)


async def test_the_chat_sends_what_complete_apply_sends_for_the_same_file_and_request(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """One construction for both surfaces (issue 48): the chat's prompt differed from the one
    that got edits right (a conditional format, the placeholder path, no format at all after
    a system prompt of the user's in `complete`)."""
    request = "Make add return b + a."
    args = build_parser().parse_args(["complete", "--file", "calc.py", "--apply", request])
    prompt = with_files(args, request, fim=False)
    cli = [Message("system", args.system), Message("user", prompt)]
    assert "the whole file as it must be" in args.system  # calc.py is small
    assert "path/to/" not in args.system  # no placeholder path to copy
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/add calc.py")
        await _ask(pilot, screen, request)
        assert _runtime(screen).sent[-1] == _runtime(screen).prompts.chat_prompt(cli)


async def test_a_mentioned_file_is_in_the_prompt_the_engine_receives(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "What does @calc.py do?")
        await answered(pilot, screen)
        calc = ContextFile("calc.py", CODE, "python")
        question = Message("user", "What does @calc.py do?")
        assert _runtime(screen).sent == [_expected(screen, [calc], [question])]
        # the question keeps its mention; the file is in the conversation's saved set
        user = screen.query(MessageView).first()
        assert user.content == "What does @calc.py do?"
        conversation = screen.conversation_id or 0
        key = str(workdir / "calc.py")
        assert file_set(app.store, conversation) == [key]
        (sent,) = sent_with(app.store, user.message_id or 0)
        assert (sent.path, sent.content, sent.tokens) == (key, CODE, screen.files.meter()[1])
        assert sent.tokens > 0
        await wait_until(pilot, lambda: "1 file" in _meter(app), "the meter to count the file")
        assert f"{sent.tokens} tok" in _meter(app)


async def test_add_puts_files_in_every_turn_and_drop_takes_them_out(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "notes.md").write_text("# Notes\n", encoding="utf-8")
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/add calc.py notes.md")
        await wait_until(pilot, lambda: bool(_notes(app, "information")), "the notice")
        assert re.fullmatch(
            r"added calc\.py \([\d,]+ tokens\), notes\.md \([\d,]+ tokens\)",
            _notes(app, "information")[-1],
        )
        assert not screen.query(MessageView)  # a command is not sent to the model
        assert _runtime(screen).sent == []
        files = [
            ContextFile("calc.py", CODE, "python"),
            ContextFile("notes.md", "# Notes\n", "markdown"),
        ]
        await _ask(pilot, screen, "hi")
        assert _runtime(screen).sent[-1] == _expected(screen, files, _turns(app, screen))
        await send(pilot, "/drop notes.md")
        await _ask(pilot, screen, "again")
        assert _runtime(screen).sent[-1] == _expected(screen, files[:1], _turns(app, screen))
        await send(pilot, "/drop")
        await _ask(pilot, screen, "and now")
        assert _runtime(screen).sent[-1] == _expected(screen, [], _turns(app, screen))
        assert len(_runtime(screen).sent) == 3
        assert file_set(app.store, screen.conversation_id or 0) == []


async def test_the_edit_format_follows_the_users_system_prompt_only_with_files(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """The user's system prompt comes first, then how to write an applicable edit, then the
    files; without files there is nothing to edit and the system prompt is the user's alone."""
    app = ChatApp(
        launch(tiny_target, n_ctx=2048, max_tokens=4, system="Be brief."),
        factory=Recording,
        store=ChatStore(tmp_path / "chat.sqlite3"),
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await _ask(pilot, screen, "hi")
        brief = Message("system", "Be brief.")
        assert _runtime(screen).sent[-1] == _runtime(screen).prompts.chat_prompt(
            [brief, *_turns(app, screen)]
        )
        await send(pilot, "/add calc.py")
        await _ask(pilot, screen, "rename add to plus")
        files = [ContextFile("calc.py", CODE, "python")]
        system = Message("system", system_message("Be brief.", files, edits=True))
        assert _runtime(screen).sent[-1] == _runtime(screen).prompts.chat_prompt(
            [system, *_turns(app, screen)]
        )


async def test_a_file_that_does_not_fit_is_refused_with_the_counts(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    # byte-level vocabulary: about a token per character, so this passes a 1536-token window
    (workdir / "big.txt").write_text("x y z " * 300, encoding="utf-8")
    app = _app(tiny_target, tmp_path, n_ctx=1536)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/add calc.py big.txt")
        await wait_until(pilot, lambda: bool(_notes(app, "error")), "the refusal")
        refusal = _notes(app, "error")[-1]
        found = re.match(
            r"big\.txt is ([\d,]+) tokens; the conversation uses ([\d,]+) of 1,536", refusal
        )
        assert found is not None, refusal
        tokens, used = (int(n.replace(",", "")) for n in found.groups())
        assert tokens + used >= 1536 and used > 0  # used: the system message with calc.py
        # calc.py fitted and was added; big.txt was not, and nothing was cut to make it fit
        assert [screen.files.set.label(k) for k in screen.files.set.entries] == ["calc.py"]
        # mentioned in a prompt, it is refused the same way and the prompt is not sent
        await send(pilot, "summarise @big.txt")
        await wait_until(pilot, lambda: len(_notes(app, "error")) == 2, "the second refusal")
        assert screen.query_one(PromptInput).text == "summarise @big.txt"
        assert not screen.query(MessageView) and _runtime(screen).sent == []
        assert app.store.conversations() == []


async def test_binary_unreadable_and_outside_files_get_a_one_line_notice(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    (tmp_path / "secret.txt").write_text("outside", encoding="utf-8")
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/add logo.png ../secret.txt missing.py")
        await wait_until(pilot, lambda: len(_notes(app, "error")) == 3, "three notices")
        errors = _notes(app, "error")
        assert errors[0].startswith("../secret.txt is outside the working directory")
        assert errors[1] == "logo.png is a binary file: only text files can be added"
        assert errors[2] == "missing.py: no such file"
        assert all("\n" not in e for e in errors)
        assert screen.files.set.entries == {}
        # @word that names no file is text (a decorator here): the prompt is sent as it is
        await _ask(pilot, screen, "what does @dataclass do?")
        assert screen.files.set.entries == {} and len(_runtime(screen).sent) == 1


async def test_a_changed_file_is_read_again_and_each_message_records_its_version(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await _ask(pilot, screen, "look at @calc.py")
        changed = CODE + "\n\ndef sub(a, b):\n    return a - b\n"
        (workdir / "calc.py").write_text(changed, encoding="utf-8")
        await _ask(pilot, screen, "and now?")
        conversation = screen.conversation_id or 0
        first, _, second, _ = app.store.messages(conversation)
        assert [s.content for s in sent_with(app.store, first.id)] == [CODE]
        assert [s.content for s in sent_with(app.store, second.id)] == [changed]
        calc = ContextFile("calc.py", changed, "python")
        assert _runtime(screen).sent[-1] == _expected(screen, [calc], _turns(app, screen))
        key = workdir / "calc.py"
        sha, content = last_sent(app.store, conversation, key) or ("", "")
        assert content == changed and sha == sent_with(app.store, second.id)[0].sha256
        # regenerate sends the file as it is now, and the record follows
        newest = changed + "# third\n"
        key.write_text(newest, encoding="utf-8")
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: len(_runtime(screen).sent) == 3, "the regeneration")
        await answered(pilot, screen)
        calc = ContextFile("calc.py", newest, "python")
        assert _runtime(screen).sent[-1] == _expected(screen, [calc], _turns(app, screen))
        assert [s.content for s in sent_with(app.store, second.id)] == [newest]
        assert (last_sent(app.store, conversation, key) or ("", ""))[1] == newest


async def test_a_saved_conversation_brings_its_files_back(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await _ask(pilot, screen, "explain @calc.py")
        conversation = screen.conversation_id
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: screen.conversation_id is None, "a new conversation")
        assert screen.files.set.entries == {}  # a new conversation starts without files
        assert conversation is not None
        await screen.open_conversation(conversation)
        assert list(screen.files.set.entries) == [str(workdir / "calc.py")]
        await send(pilot, "/files")
        await wait_until(pilot, lambda: "total" in "".join(_notes(app, "information")), "/files")
        listing = _notes(app, "information")[-1].splitlines()
        assert re.fullmatch(r"calc\.py  [\d,]+ tokens", listing[0])
        assert re.fullmatch(r"total [\d,]+ tokens", listing[1])


async def test_at_diff_sends_the_working_trees_git_diff(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=workdir, check=True, capture_output=True)

    git("init", "-q")
    git("add", "calc.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    (workdir / "calc.py").write_text(CODE.replace("a + b", "b + a"), encoding="utf-8")
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await _ask(pilot, screen, "review @diff")
        diff = subprocess.run(
            ["git", "diff", "--no-color", "HEAD", "--"],
            cwd=workdir,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "+    return b + a" in diff
        files = [ContextFile(DIFF_LABEL, diff, "diff")]
        expected = _expected(screen, files, [Message("user", "review @diff")])
        assert _runtime(screen).sent == [expected]


async def test_paths_complete_after_at_and_add(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    (workdir / "src").mkdir()
    (workdir / "src" / "module.py").write_text("x = 1\n", encoding="utf-8")
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        prompt = app.query_one(PromptInput)
        prompt.focus()
        prompt.insert("explain @sr")
        assert prompt.suggestion == "c/"
        await pilot.press("tab")
        assert prompt.text == "explain @src/" and prompt.suggestion == "module.py"
        await pilot.press("right")  # TextArea's own key for a suggestion
        assert prompt.text == "explain @src/module.py"
        assert app.focused is prompt  # Tab took the completion instead of moving the focus
        prompt.clear()
        prompt.insert("/add ca")
        assert prompt.suggestion == "lc.py"


async def test_palette_entries_add_and_list_files(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        titles = {c.title for c in app.get_system_commands(screen)}
        assert {"Add files", "Drop files", "Files in context"} <= titles
        await screen.run_action("files('add')")
        await wait_until(pilot, lambda: bool(app.screen.query(Input)), "the path field")
        assert isinstance(app.screen, TextScreen)
        app.screen.query_one(Input).value = "calc.py"
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(screen.files.set.entries), "the file to be added")
        await screen.run_action("files('drop')")
        await wait_until(pilot, lambda: bool(app.screen.query(Input)), "the drop field")
        assert app.screen.query_one(Input).value == "calc.py"  # what is in context, to edit
        await pilot.press("enter")
        await wait_until(pilot, lambda: not screen.files.set.entries, "the file to be dropped")
