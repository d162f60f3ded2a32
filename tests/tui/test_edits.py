"""Applying an answer's edits in the chat app, driven with Pilot on the tiny models.

The tiny models answer with random text, so each test stores a conversation whose answer holds
the edit blocks (as the app saves an answer) and opens it; the files it was sent with are
recorded the way a turn records them (`tui.store_files`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Label, Markdown

from localspec import ChatRequest, LocalspecError, Message, RemoteServer, RemoteSettings
from localspec.client import ServerAddress
from localspec.constraints import Constraint
from tests.tui.helpers import SIZE, launch, ready, send, wait_until
from tui.app import ChatApp
from tui.edits import offer_edits
from tui.host import Prompt, Remote
from tui.screens.chat import ChatScreen
from tui.screens.dialogs import ConfirmScreen
from tui.screens.diff import DiffScreen
from tui.store import ChatStore
from tui.store_edits import last_edit
from tui.store_files import SentFile, add_files, record_sent
from tui.widgets.edit_blocks import EditParts
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput

pytestmark = pytest.mark.anyio
CALC = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
SWAP = (
    "Swap the operands:\n\ncalc.py\n```python\n<<<<<<< SEARCH\n    return a + b\n=======\n"
    "    return b + a\n>>>>>>> REPLACE\n```\n"
)
SWAPPED = CALC.replace("a + b", "b + a")
# the shape the default model wrote in the chat: a bare SEARCH, SEARCH and REPLACE in fences of
# their own, no file named
FENCED = (
    "The operands are swapped here.\n\nSEARCH\n```python\n    return a + b\n```\n=======\n"
    "```python\n    return b + a\n```\n>>>>>>> REPLACE\n"
)
FENCED_ASSUMED = [
    "block 1 (answer line 3): `SEARCH` read as the `<<<<<<< SEARCH` marker",
    "block 1 (answer line 3): the block names no file: read as calc.py, the only file given",
    "block 1 (answer line 3): SEARCH and REPLACE were each in a code fence of their own: read "
    "without the fences",
]
SWAP_DIFF = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a + b\n"
    "+    return b + a\n \n \n def sub(a, b):\n"
)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder the chat is started in (edits go to files under it)."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "calc.py").write_text(CALC)
    monkeypatch.chdir(folder)
    return folder


def _app(tiny_target: Path, tmp_path: Path, answer: str, sent: str | None = None) -> ChatApp:
    """The app opened on a conversation whose answer is `answer`; with `sent`, calc.py is in
    the conversation's files and was sent with the question at that content."""
    store = ChatStore(tmp_path / "chat.sqlite3")
    conversation = store.create("{}", "Swap")
    question = store.add_message(conversation.id, "user", "Swap the operands in add")
    store.add_message(conversation.id, "assistant", answer)
    if sent is not None:
        key = str((Path.cwd() / "calc.py").resolve())
        add_files(store, conversation.id, [key])
        sha = hashlib.sha256(sent.encode()).hexdigest()
        record_sent(store, question, [SentFile(key, sha, 20, sent)])
    settings = launch(tiny_target)
    opened = type(settings)(**{**settings.__dict__, "conversation": conversation.id})
    return ChatApp(opened, store=store)


def _notes(app: ChatApp, severity: str = "information") -> list[str]:
    return [str(n.message) for n in app._notifications if n.severity == severity]


async def _on(pilot: Pilot[None], kind: type[object]) -> None:
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, kind), kind.__name__)


async def _review(pilot: Pilot[None]) -> DiffScreen:
    await pilot.press("f6")
    await _on(pilot, DiffScreen)
    screen = pilot.app.screen
    assert isinstance(screen, DiffScreen)
    return screen


async def test_an_edit_is_discarded_or_applied_as_its_diff_showed_and_undo_restores(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path, SWAP, sent=CALC)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await _review(pilot)
        await pilot.press("d")  # discarded: nothing is written
        await _on(pilot, ChatScreen)
        assert (workdir / "calc.py").read_text() == CALC
        assert last_edit(app.store) is None
        diff = await _review(pilot)
        assert diff.diff == SWAP_DIFF
        assert diff.stale == []  # calc.py is as it was sent
        assert (workdir / "calc.py").read_text() == CALC  # shown, not written
        await pilot.press("a")
        await _on(pilot, ChatScreen)
        assert (workdir / "calc.py").read_text() == SWAPPED
        assert any("applied the edits to calc.py" in note for note in _notes(app))
        await pilot.press("f7")
        await wait_until(pilot, lambda: last_edit(app.store) is None, "the undo")
        assert (workdir / "calc.py").read_text() == CALC
        assert sorted(p.name for p in workdir.iterdir()) == ["calc.py"]


async def test_a_search_that_does_not_match_is_reported_and_nothing_is_written(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    mismatched = SWAP + (
        "calc.py\n```python\n<<<<<<< SEARCH\n    return a-b\n=======\n    return 0\n"
        ">>>>>>> REPLACE\n```\n"
    )
    app = _app(tiny_target, tmp_path, mismatched)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("f6")
        await wait_until(pilot, lambda: bool(_notes(app, "error")), "the error")
        (error,) = _notes(app, "error")
        assert error.startswith("block 2 (SEARCH/REPLACE for calc.py, answer line 13)")
        assert "line 6, which differs only in white space" in error
        assert error.endswith("Nothing was written.")
        assert isinstance(app.screen, ChatScreen)  # no diff to apply
        assert (workdir / "calc.py").read_text() == CALC


async def test_a_file_changed_since_it_was_sent_asks_a_second_time(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path, SWAP, sent=CALC)
    mine = CALC + "\n\ndef mul(a, b):\n    return a * b\n"
    (workdir / "calc.py").write_text(mine)  # the user's own change after the question
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        diff = await _review(pilot)
        assert diff.stale == ["calc.py"]
        await pilot.press("a")
        await _on(pilot, ConfirmScreen)
        await pilot.press("n")
        await _on(pilot, ChatScreen)
        assert (workdir / "calc.py").read_text() == mine
        assert last_edit(app.store) is None
        await _review(pilot)
        await pilot.press("a")
        await _on(pilot, ConfirmScreen)
        await pilot.press("y")
        await wait_until(pilot, lambda: last_edit(app.store) is not None, "the edit")
        assert (workdir / "calc.py").read_text() == mine.replace("a + b", "b + a")


async def test_undo_of_a_file_changed_since_the_edit_asks_first(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path, SWAP)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await _review(pilot)
        await pilot.press("a")
        await wait_until(pilot, lambda: last_edit(app.store) is not None, "the edit")
        (workdir / "calc.py").write_text(SWAPPED + "# mine\n")
        await pilot.press("f7")
        await _on(pilot, ConfirmScreen)
        await pilot.press("n")
        await _on(pilot, ChatScreen)
        assert (workdir / "calc.py").read_text() == SWAPPED + "# mine\n"
        assert any("undo refused" in note for note in _notes(app, "warning"))
        await pilot.press("f7")
        await _on(pilot, ConfirmScreen)
        await pilot.press("y")
        await wait_until(pilot, lambda: last_edit(app.store) is None, "the undo")
        assert (workdir / "calc.py").read_text() == CALC


async def test_a_whole_file_block_for_an_added_file_and_a_new_file(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    answer = (
        "calc.py\n```python\ndef add(a, b):\n    return sum((a, b))\n```\n\n"
        "tests/test_calc.py\n```python\n<<<<<<< SEARCH\n=======\nfrom calc import add\n"
        ">>>>>>> REPLACE\n```\n"
    )
    app = _app(tiny_target, tmp_path, answer, sent=CALC)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        diff = await _review(pilot)
        assert "+++ b/tests/test_calc.py" in diff.diff
        assert "-def sub(a, b):" in diff.diff
        await pilot.press("enter")
        await wait_until(pilot, lambda: last_edit(app.store) is not None, "the edit")
        assert (workdir / "calc.py").read_text() == "def add(a, b):\n    return sum((a, b))\n"
        assert (workdir / "tests" / "test_calc.py").read_text() == "from calc import add\n"
        await pilot.press("f7")  # the new file goes, the rewritten one comes back
        await wait_until(pilot, lambda: last_edit(app.store) is None, "the undo")
        assert not (workdir / "tests" / "test_calc.py").exists()
        assert (workdir / "calc.py").read_text() == CALC


async def test_a_finished_answer_with_edits_says_how_to_review_them(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path, "no edits here", sent=CALC)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        offer_edits(screen, "An answer without blocks.")
        offer_edits(screen, SWAP)
        await pilot.pause()
        offer_edits(screen, FENCED)
        await pilot.pause()
        assert [n for n in _notes(app) if "edits" in n] == [
            "the answer edits calc.py: f6 shows the diff, where a applies it and d discards it",
            "the answer edits calc.py (read leniently: the diff view says what was assumed): f6 "
            "shows the diff, where a applies it and d discards it",
        ]
        await pilot.press("f6")
        await wait_until(pilot, lambda: bool(_notes(app, "warning")), "the warning")
        assert _notes(app, "warning")[0].startswith("the last answer has no edits")


async def test_a_folder_swapped_for_a_link_while_the_diff_is_shown_is_not_written_through(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """The race of issue 29: the path is checked when the diff is made and written once the
    user applies it; a folder turned into a link to another place in between is refused."""
    (workdir / "pkg").mkdir()
    (workdir / "pkg" / "calc.py").write_text(CALC)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "calc.py").write_text(CALC)  # the same text: only the link tells them apart
    app = _app(tiny_target, tmp_path, SWAP.replace("calc.py\n```", "pkg/calc.py\n```"))
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await _review(pilot)
        (workdir / "pkg").rename(workdir / "pkg-was")
        (workdir / "pkg").symlink_to(outside)
        await pilot.press("a")
        await wait_until(pilot, lambda: bool(_notes(app, "error")), "the error")
        (error,) = _notes(app, "error")
        assert f"{workdir / 'pkg'} is a link now, not the folder it was" in error
        assert (outside / "calc.py").read_text() == CALC
        assert sorted(p.name for p in outside.iterdir()) == ["calc.py"]
        assert (workdir / "pkg-was" / "calc.py").read_text() == CALC
        assert last_edit(app.store) is None


async def test_a_lenient_reading_is_shown_in_the_diff_and_written_only_with_a(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    app = _app(tiny_target, tmp_path, FENCED, sent=CALC)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        review = await _review(pilot)
        assert review.diff == SWAP_DIFF
        shown = str(review.query_one("#assumed", Label).render())
        assert shown.splitlines() == [f"assumed: {line}" for line in FENCED_ASSUMED]
        assert (workdir / "calc.py").read_text() == CALC  # nothing yet
        await pilot.press("a")
        await wait_until(pilot, lambda: (workdir / "calc.py").read_text() == SWAPPED, "the write")


async def test_the_transcript_shows_a_block_as_an_edit_and_a_malformed_one_as_text(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """Blocks never go through Markdown, whose quote rules drew `>>>>>>> REPLACE` as seven
    nested quotes; a block cut short is shown as written, with what is wrong."""
    cut = "calc.py\n```python\n<<<<<<< SEARCH\n    return a - b\n=======\n"
    app = _app(tiny_target, tmp_path, f"{FENCED}\nAnd the other one:\n\n{cut}", sent=CALC)
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        answer = screen.query(MessageView).last()
        await wait_until(pilot, lambda: bool(answer.query(EditParts)), "the answer's parts")
        assert [str(w.render()) for w in answer.query(".edit-block")] == [
            "calc.py · SEARCH/REPLACE (answer line 3)\n"
            "-     return a + b\n"
            "+     return b + a\n"
            + "\n".join(f"assumed: {line.split(': ', 1)[1]}" for line in FENCED_ASSUMED),
            "not an edit F6 can apply: the SEARCH/REPLACE block for calc.py at line 17 of the "
            "answer has no `>>>>>>> REPLACE` line: if the answer was cut short, raise the "
            "answer's token limit and ask again; otherwise ask for well-formed blocks\n"
            + cut.rstrip(),
        ]
        assert [m.source for m in answer.query(Markdown)] == [
            "The operands are swapped here.\n\n",
            "\nAnd the other one:\n\n",
        ]
        assert not answer.query("MarkdownBlockQuote")  # no `>` read as a quote


async def test_edit_answers_under_the_grammar_of_the_conversation_s_files(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """The random model's `/edit` answer is free only where the grammar leaves it free: a
    sentence, then calc.py (small: rewritten whole) under its path."""
    app = ChatApp(
        launch(tiny_target, n_ctx=4096, max_tokens=700), store=ChatStore(tmp_path / "c.sqlite3")
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/edit swap the operands")
        await wait_until(pilot, lambda: bool(_notes(app, "warning")), "the refusal")
        assert _notes(app, "warning") == [
            "/edit needs a file with lines in the conversation: add one with /add or @path"
        ]
        assert not screen.query(MessageView)
        screen.query_one(PromptInput).clear()
        await send(pilot, "/add calc.py")
        await send(pilot, "/edit swap the operands")
        await wait_until(pilot, lambda: len(screen.query(MessageView)) == 2, "the turn")
        await wait_until(pilot, lambda: screen.turn is None, "the answer")
        question, answer = screen.query(MessageView)
        assert question.content == "swap the operands"  # the command is not sent
        assert "\n\ncalc.py\n```python\n" in answer.content
        assert answer.content[0].isalpha() and "SEARCH" not in answer.content


def test_a_server_is_sent_no_edit_grammar(tmp_path: Path) -> None:
    """`/edit` through a server is refused before anything is sent (its chat endpoint takes
    no Lark grammar here): never a constraint accepted and then dropped."""
    server = RemoteServer(RemoteSettings(ServerAddress(socket_path=tmp_path / "none.sock")))
    request = ChatRequest([Message("user", "swap")])
    with pytest.raises(LocalspecError, match="/edit generates under a grammar"):
        Remote(server).generate(Prompt(None), request, lambda: False, Constraint.lark('start: "x"'))


async def test_edit_with_the_file_mentioned_in_the_request(
    tiny_target: Path, tmp_path: Path, workdir: Path
) -> None:
    """`/edit @calc.py ...` as a first message: the mention adds the file, and the answer is
    generated under the grammar of it."""
    app = ChatApp(
        launch(tiny_target, n_ctx=4096, max_tokens=700), store=ChatStore(tmp_path / "c.sqlite3")
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await ready(pilot)
        await send(pilot, "/edit @calc.py swap the operands")
        await wait_until(pilot, lambda: len(screen.query(MessageView)) == 2, "the turn")
        await wait_until(pilot, lambda: screen.turn is None, "the answer")
        question, answer = screen.query(MessageView)
        assert question.content == "@calc.py swap the operands"
        assert "\n\ncalc.py\n```python\n" in answer.content
