"""`localspec chat`: the app shell. Screens do the work; this wires store, model and palette."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

from textual.app import App, SystemCommand
from textual.screen import Screen

from localspec import Runtime
from tui.host import ModelHost
from tui.screens.chat import ChatScreen
from tui.settings import Launch, RuntimeFactory
from tui.store import ChatStore

# (palette title, help, screen action); every action the keys reach is here too
PALETTE = [
    ("New conversation", "start an empty conversation (ctrl+n)", "new"),
    ("Rename conversation", "give the current conversation a title", "rename"),
    ("Delete conversation", "delete the current conversation and its messages", "delete"),
    ("Export conversation", "write the conversation to a Markdown file (f8)", "export"),
    ("Toggle conversation list", "show or hide the saved conversations (ctrl+b)", "toggle_sidebar"),
    ("Settings", "system prompt, speculation, draft length, sampling (f2)", "settings"),
    ("Model pair", "load another pair or model from the registry (f3)", "models"),
    ("Highlight drafted text", "mark text from accepted drafts (f4)", "toggle_drafts"),
    ("Regenerate answer", "answer the last question again (ctrl+r)", "regenerate"),
    ("Add files", "put files in the conversation's context (/add PATH, @PATH)", "files('add')"),
    ("Drop files", "take files out of the context (/drop PATH, /drop: all)", "files('drop')"),
    ("Files in context", "the files sent with each turn, their tokens (/files)", "files('files')"),
    ("Copy answer", "copy the last answer to the clipboard (f5)", "copy_answer"),
    ("Copy code block", "copy the last answer's last code block (f9)", "copy_code"),
    ("Review edits", "the last answer's edits as a diff, to apply or discard (f6)", "review_edits"),
    ("Undo last edit", "put back the files the last applied edit changed (f7)", "undo_edit"),
    ("Cancel generation", "stop the answer being generated (escape)", "cancel"),
    ("Keys", "the key bindings (f1)", "help"),
]


class ChatApp(App[None]):
    """A chat with a local model pair, saved conversations and live speculation figures."""

    CSS_PATH = "chat.tcss"
    TITLE = "localspec chat"

    def __init__(
        self,
        launch: Launch,
        factory: RuntimeFactory = Runtime,
        store: ChatStore | None = None,
    ) -> None:
        super().__init__()
        self.launch = launch
        self.store = store or ChatStore()
        self.host = ModelHost(factory, launch.runtime, launch.server)
        self.chat = ChatScreen(self.store, self.host, launch)

    def get_default_screen(self) -> Screen[Any]:
        return self.chat

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if not isinstance(screen, ChatScreen):
            return
        for title, help_text, action in PALETTE:
            yield SystemCommand(title, help_text, partial(screen.run_action, action))
        for conversation in self.store.conversations():
            yield SystemCommand(
                f"Open: {conversation.title}",
                "switch to this saved conversation",
                partial(screen.open_conversation, conversation.id),
                discover=False,
            )

    async def on_unmount(self) -> None:
        """Release the model and the database once the workers have stopped."""
        self.chat.shutdown()
        self.host.close()
        self.store.close()
