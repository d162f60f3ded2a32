"""The conversation side of the chat screen: the saved list, switching, new, rename, delete,
export, copying. `ChatScreen` adds the model and generation on top.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.screen import Screen

from localspec import LocalspecError
from localspec.context_files import DIFF
from localspec.paths import write_private
from tui import store_files
from tui.conversation import export_name, filled_context, last_code_block
from tui.screens.dialogs import ConfirmScreen, TextScreen
from tui.settings import ChatSettings, Launch
from tui.store import ChatStore
from tui.widgets.log import MessageLog
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.sidebar import ConversationList


class ConversationScreen(Screen[None]):
    """Which conversation is shown, and everything done to conversations as a whole."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "new", "New", priority=True),
        Binding("ctrl+b", "toggle_sidebar", "Chats"),
        Binding("f4", "toggle_drafts", "Drafts"),
        Binding("f5", "copy_answer", "Copy answer", show=False),
        Binding("f9", "copy_code", "Copy code", show=False),
        Binding("f8", "export", "Export", show=False),
    ]

    def __init__(self, store: ChatStore, launch: Launch) -> None:
        super().__init__()
        self.store, self.launch = store, launch
        self.conversation_id: int | None = None
        self.settings: ChatSettings = launch.defaults

    def _busy(self) -> bool:
        """Whether a running answer forbids changing conversation (it says so when it does)."""
        return False

    def conversation_changed(self) -> None:
        """Another conversation (or a new one) is shown."""

    def edit_context(self, root: Path | None = None) -> list[str]:
        """The conversation's added files as the model saw them, the files its answers' edits
        are for: paths under `root` (by default the working folder)."""
        if self.conversation_id is None:
            return []
        root = root or Path.cwd().resolve()
        keys = store_files.file_set(self.store, self.conversation_id)
        paths = [Path(key) for key in keys if key != DIFF]
        return [path.relative_to(root).as_posix() for path in paths if path.is_relative_to(root)]

    async def refresh_sidebar(self) -> None:
        await self.query_one(ConversationList).show(
            self.store.conversations(), self.conversation_id
        )

    async def start_new(self) -> None:
        """An empty conversation; it is saved with its first message."""
        self.conversation_id = None
        self.settings = self.launch.defaults
        await self.messages_view.remove_children()
        self.prompt.remember([])
        self.sub_title = "New conversation"
        await self.refresh_sidebar()
        self.conversation_changed()

    async def switch_to(self, conversation_id: int, *, launched: bool = False) -> None:
        """Show a saved conversation with its own settings; `launched`: it is the one the
        command line opened (`--conversation`), whose typed options win over those settings
        and become its own."""
        conversation = self.store.conversation(conversation_id)
        if conversation is None:
            self.notify(f"there is no conversation {conversation_id}", severity="error")
            await self.start_new()
            return
        self.conversation_id = conversation_id
        saved = ChatSettings.from_json(conversation.settings, self.launch.defaults)
        self.settings = self.launch.over(saved) if launched else saved
        if self.settings != saved:
            self.store.save_settings(conversation_id, self.settings.to_json())
        stored = self.store.messages(conversation_id)
        await self.messages_view.remove_children()
        await self.messages_view.mount_all(
            MessageView(
                m.role,
                m.content,
                m.status,
                m.spans,
                m.id,
                context_full=filled_context(m),
                context=self.edit_context,
            )
            for m in stored
        )
        self.messages_view.show_end()
        self.prompt.remember([m.content for m in stored if m.role == "user"])
        self.sub_title = conversation.title
        await self.refresh_sidebar()
        self.conversation_changed()

    async def open_conversation(self, conversation_id: int) -> None:
        if conversation_id != self.conversation_id and not self._busy():
            await self.switch_to(conversation_id)

    async def on_conversation_list_chosen(self, event: ConversationList.Chosen) -> None:
        await self.open_conversation(event.conversation_id)

    async def action_new(self) -> None:
        if not self._busy():
            await self.start_new()
            self.prompt.focus()

    def action_toggle_sidebar(self) -> None:
        sidebar = self.query_one(ConversationList)
        sidebar.display = not sidebar.display

    def action_toggle_drafts(self) -> None:
        self.toggle_class("show-drafts")
        if self.has_class("show-drafts"):
            for view in self.messages_view.query(MessageView):
                view.refresh_drafts()
            self.notify("text from steps that accepted a draft: green n-gram, blue draft model")

    def _last_answer(self) -> str | None:
        answers = self.messages_view.query(MessageView).filter(".assistant")
        return answers.last().content if answers else None

    def action_copy_answer(self) -> None:
        answer = self._last_answer()
        if not answer:
            self.notify("there is no answer to copy yet", severity="warning")
            return
        self.app.copy_to_clipboard(answer)
        self.notify(f"copied the last answer ({len(answer)} characters)")

    def action_copy_code(self) -> None:
        code = last_code_block(self._last_answer() or "")
        if code is None:
            self.notify("the last answer has no code block", severity="warning")
            return
        self.app.copy_to_clipboard(code)
        self.notify(f"copied the last code block ({len(code.splitlines())} lines)")

    def _current_title(self) -> str | None:
        if self.conversation_id is None:
            self.notify("this conversation is empty: nothing is saved yet", severity="warning")
            return None
        conversation = self.store.conversation(self.conversation_id)
        return None if conversation is None else conversation.title

    def action_rename(self) -> None:
        title = self._current_title()
        if title is None:
            return

        async def rename(new: str | None) -> None:
            if new and self.conversation_id is not None:
                self.store.rename(self.conversation_id, new)
                self.sub_title = new
                await self.refresh_sidebar()

        self.app.push_screen(TextScreen("Rename the conversation", title), rename)

    def action_delete(self) -> None:
        title = self._current_title()
        if title is None or self._busy():
            return

        async def delete(sure: bool | None) -> None:
            if sure and self.conversation_id is not None:
                self.store.delete(self.conversation_id)
                self.notify(f"deleted {title!r}")
                await self.start_new()

        self.app.push_screen(ConfirmScreen(f"Delete {title!r} and all its messages?"), delete)

    def action_export(self) -> None:
        title = self._current_title()
        if title is None or self.conversation_id is None:
            return
        conversation_id = self.conversation_id
        default = Path.cwd() / export_name(title, conversation_id)

        def export(name: str | None) -> None:
            if not name:
                return
            path = Path(name).expanduser()
            try:
                markdown = self.store.export_markdown(conversation_id)
                write_private(path, markdown, own_folder=False)  # the user's code: theirs alone
            except OSError as exc:
                self.notify(f"could not write {path}: {exc.strerror}", severity="error")
                return
            except LocalspecError as exc:
                self.notify(str(exc), severity="error")
                return
            self.notify(f"exported to {path}")

        self.app.push_screen(TextScreen("Export to Markdown file", str(default)), export)

    @property
    def messages_view(self) -> MessageLog:
        return self.query_one(MessageLog)

    @property
    def prompt(self) -> PromptInput:
        return self.query_one(PromptInput)
