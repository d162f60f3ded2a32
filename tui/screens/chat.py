"""The main screen: conversation list, messages, prompt, status bar; sending and cancelling.

Model loading and generation run on worker threads (`ModelHost`, `run_turn`) and report back
with messages, so the UI keeps responding while a model loads or answers. The store is only
touched on the UI thread. A running answer's events are shown and saved by `TurnScreen`
(`tui.screens.turns`), which this screen extends with how turns start.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message as UIMessage
from textual.widgets import Footer, Header, Label, LoadingIndicator, ProgressBar

from localspec import Message
from localspec.constraints import Constraint
from localspec.context_files import ContextFile
from localspec.edits.grammar import edit_grammar, editable_files
from localspec.edits.prompt import system_message
from tui.conversation import model_messages, title_from
from tui.edits import review_edits, undo_edit
from tui.failures import error_line
from tui.files import ContextFiles
from tui.generation import LiveStats, Refused, Turn, TurnEvent, run_turn
from tui.host import SERVER_MODELS, Choice, ModelHost, choices, settings_for
from tui.screens.conversations import ConversationScreen
from tui.screens.dialogs import HelpScreen
from tui.screens.models import ModelPicker
from tui.screens.settings import SettingsScreen
from tui.screens.turns import ActiveTurn, TurnScreen, TurnUpdate
from tui.settings import ChatSettings, Launch
from tui.store import ChatStore
from tui.streaming import (
    FLUSH_S,
    Coalescer,
)
from tui.widgets.log import MessageLog
from tui.widgets.message import MessageView
from tui.widgets.prompt import PromptInput
from tui.widgets.sidebar import ConversationList
from tui.widgets.status import StatusBar

PROMPT_KEYS = [
    ("enter", "send the prompt"),
    ("shift+enter, ctrl+j", "new line in the prompt"),
    ("up / down", "earlier / later prompts (from the first / last line)"),
    ("@PATH, /add PATH", "put files in the context (@diff: git diff)"),
    ("/drop, /files", "take files out (all without PATH), list them"),
    ("/edit REQUEST", "ask for a change, answered under a grammar of the files"),
]
EDIT_COMMAND = "/edit"


@dataclass
class LoadUpdate(UIMessage):
    """Progress of a model load; `done` with `error` None means the model is ready."""

    text: str
    progress: float | None = None
    done: bool = False
    error: str | None = None


@dataclass
class Measured(UIMessage):
    """The context meter's figures, or why the conversation could not be measured."""

    conversation_id: int | None
    used: int
    n_ctx: int
    error: str | None = None


class ChatScreen(TurnScreen):
    """One conversation at a time, with the list of the others beside it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+r", "regenerate", "Regenerate"),
        Binding("f1", "help", "Help"),
        Binding("f2", "settings", "Settings"),
        Binding("f3", "models", "Models"),
        # before the prompt's own f6/f7 (select line, select all: shift+arrows still select)
        Binding("f6", "review_edits", "Edits", show=False, priority=True),
        Binding("f7", "undo_edit", "Undo edit", show=False, priority=True),
    ]

    def __init__(self, store: ChatStore, host: ModelHost, launch: Launch) -> None:
        super().__init__(store, launch)
        self.host = host
        self.model_label = launch.model_label
        self.stats: LiveStats | None = None
        # seconds between batches of streamed text (see tui.streaming); tests choose 0 or inf
        # so that no count depends on the machine
        self.flush_s = FLUSH_S
        # not `loading`: that is Textual's reactive that covers a widget with a spinner
        self.model_loading = True
        self.files = ContextFiles(
            Path.cwd(),
            store,
            host,
            notify=lambda text, severity: self.notify(text, severity=severity, timeout=10),
            conversation=self._conversation_with,
            conversation_id=lambda: self.conversation_id,
        )

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="body"):
            yield ConversationList(id="sidebar")
            with Vertical(id="main"):
                with Horizontal(id="banner"):
                    yield LoadingIndicator()
                    yield Label("", id="banner-text")
                    yield ProgressBar(show_eta=False, id="banner-progress")
                yield MessageLog(id="messages")
                yield PromptInput(id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    async def on_mount(self) -> None:
        self.status.show_model(self.model_label)
        if self.launch.conversation is not None:
            await self.switch_to(self.launch.conversation, launched=True)
        else:
            await self.start_new()
        self.prompt.focus()
        self.load_model(None)

    @work(thread=True, exclusive=True, group="load")
    def load_model(self, choice: Choice | None) -> None:
        """Fetch (when needed) and load a model pair; `None` reloads the launch's settings."""
        label = choice.name if choice is not None else self.model_label

        def report(text: str) -> None:
            self.post_message(LoadUpdate(text))

        server = self.host.server
        report(f"loading {label}…" if server is None else f"connecting to {server.address}…")
        try:
            settings = None
            if choice is not None:
                settings = settings_for(
                    choice,
                    self.host.settings,
                    self.launch.offline,
                    report,
                    lambda fraction: self.post_message(
                        LoadUpdate(f"downloading {label}…", fraction)
                    ),
                )
            self.host.load(self.app.notify, settings)
        except Exception as exc:  # a LocalspecError says what to do; anything else is a bug
            self.post_message(
                LoadUpdate(label, done=True, error=error_line(exc, f"loading {label}"))
            )
            return
        self.post_message(LoadUpdate(self.host.label or label, done=True))

    def on_load_update(self, update: LoadUpdate) -> None:
        banner = self.query_one("#banner")
        bar = self.query_one("#banner-progress", ProgressBar)
        if not update.done:
            self.model_loading = True
            banner.display = True
            self.query_one("#banner-text", Label).update(update.text)
            bar.display = update.progress is not None
            bar.update(total=1.0, progress=update.progress or 0.0)
            return
        banner.display = False
        self.model_loading = False
        if update.error is not None:
            self.notify(update.error, title="model not loaded", severity="error", timeout=10)
            return
        self.model_label = update.text
        self.status.show_model(self.model_label)
        self.measure_context()

    def _ready(self) -> bool:
        """Whether a model is loaded; says why not when it is not."""
        if self.model_loading:
            self.notify("the model is still loading: the prompt is kept", severity="warning")
        elif self.host.backend is None:
            self.notify(self.host.missing, severity="error")
        return not self.model_loading and self.host.backend is not None

    def _busy(self) -> bool:
        if self.turn is not None:
            self.notify("an answer is being generated: escape cancels it", severity="warning")
        return self.turn is not None

    def shutdown(self) -> None:
        """The app is closing: stop a running answer and keep what it had streamed."""
        if self.turn is not None:
            self.turn.cancel.set()
            self._save(self.turn, "interrupted")

    def _model_messages(self) -> list[Message]:
        return self._conversation_with(self.files.sent())

    def _conversation_with(self, files: list[ContextFile]) -> list[Message]:
        """The messages a turn would send now: the system message `complete --apply` sends
        for the same files (`system_message`: while files are there, how to write an edit F6
        can apply), then the conversation."""
        stored = [] if self.conversation_id is None else self.store.messages(self.conversation_id)
        return model_messages(stored, system_message(self.settings.system, files, bool(files)))

    def conversation_changed(self) -> None:
        self.files.switch(self.conversation_id)
        self.measure_context()

    def measure_context(self) -> None:
        """Update the context meter for the conversation as it would be sent now."""
        self._measure(self.conversation_id, self._model_messages(), self.files.pending())

    @work(thread=True, exclusive=True, group="measure")
    def _measure(
        self, conversation_id: int | None, messages: list[Message], files: list[ContextFile]
    ) -> None:
        try:
            self.files.count(files)
            used, n_ctx = self.host.measure(messages)

        except Exception as exc:  # e.g. a chat template that fails on this conversation
            error = error_line(exc, "measuring the conversation")
            self.post_message(Measured(conversation_id, 0, 0, error))
            return
        self.post_message(Measured(conversation_id, used, n_ctx))

    def on_measured(self, event: Measured) -> None:
        if event.error is not None:
            self.notify(event.error, title="context not measured", severity="error", timeout=10)
        elif event.conversation_id == self.conversation_id and self.turn is None:
            self._show_context(event.used, event.n_ctx)

    def _show_context(self, used: int, n_ctx: int) -> None:
        """The context meter, with the files in context and their cost."""
        files, tokens = self.files.meter()
        self.status.show_context(
            used, n_ctx, self.settings.max_tokens, files=files, files_tokens=tokens
        )

    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        if self._busy():
            self.prompt.restore(event.text)
            return
        if not self._ready():
            self.prompt.restore(event.text)
            return
        if await self.files.command(event.text):  # /add, /drop, /files: not sent
            self.measure_context()
            return
        text, constrained = _edit_request(event.text)
        if not await self.files.mentioned(text):  # an @file that cannot be added
            self.prompt.restore(event.text)
            return
        if constrained and not editable_files(self.files.sent()):
            self.prompt.restore(event.text)
            self.notify(
                "/edit needs a file with lines in the conversation: add one with /add or @path",
                severity="warning",
            )
            return
        try:
            user_id = await self._save_prompt(text)
        except Exception as exc:  # the database refused it: the prompt is kept for another try
            self.prompt.restore(event.text)
            error = error_line(exc, "saving the prompt")
            self.notify(error, title="not sent", severity="error", timeout=10)
            return
        await self.messages_view.mount(MessageView("user", text, message_id=user_id))
        await self.start_turn(text, user_id, constrained=constrained)

    async def _save_prompt(self, text: str) -> int:
        """Store the user's message, in a new conversation when this is its first."""
        if self.conversation_id is None:
            conversation = self.store.create(self.settings.to_json(), title_from(text))
            self.conversation_id = conversation.id
            self.sub_title = conversation.title
            await self.refresh_sidebar()
        return self.store.add_message(self.conversation_id, "user", text)

    async def start_turn(self, prompt: str, user_id: int | None, constrained: bool = False) -> None:
        """Answer the conversation as it stands (its last message is the user's); with
        `constrained` (`/edit`), under the grammar of the files as they are now."""
        view = MessageView("assistant", status="streaming", context=self.edit_context)
        await self.messages_view.mount(view)
        self.messages_view.show_end()
        self.turn = ActiveTurn(prompt, user_id, view, stream=Coalescer(self.flush_s))
        self.stats = self.turn.stats
        self.status.show_stats(self.stats)
        await self.files.send()  # read what changed on disk, record the versions sent
        files = self.files.sent()
        grammar = edit_grammar(files) if constrained and editable_files(files) else None
        turn = Turn(
            self._model_messages(),
            self.settings,
            self.launch.sampling,
            self.launch.spec,
            self.launch.stop,
            self.launch.ignore_eos,
            None if grammar is None else Constraint.lark(grammar),
        )
        self._generate(turn, self.turn)

    @work(thread=True, group="turn")
    def _generate(self, turn: Turn, active: ActiveTurn) -> None:
        def emit(event: TurnEvent) -> None:
            if active.stream.push(event):  # one wake per batch: the UI takes what gathered
                self.post_message(TurnUpdate(active))

        backend = self.host.backend
        if backend is None:
            emit(Refused(self.host.missing))
            return
        run_turn(backend, self.host.lock, turn, active.cancel, emit)

    def action_cancel(self) -> None:
        """Stop the answer after the running target step (the worker checks between steps)."""
        if self.turn is not None:
            self.turn.cancel.set()

    def action_review_edits(self) -> None:
        review_edits(self)

    def action_undo_edit(self) -> None:
        undo_edit(self)

    async def action_regenerate(self) -> None:
        """Answer the last question again, replacing the last answer."""
        if self._busy() or not self._ready() or self.conversation_id is None:
            return
        stored = self.store.messages(self.conversation_id)
        if stored and stored[-1].role == "assistant":
            self.store.delete_message(stored[-1].id)
            views = self.messages_view.query(MessageView)
            if views:
                await views.last().remove()
            stored.pop()
        if not stored or stored[-1].role != "user":
            self.notify("there is no question to answer again", severity="warning")
            return
        await self.start_turn(stored[-1].content, None)

    async def action_files(self, command: str) -> None:
        """The palette's file entries: what typing `/add`, `/drop` or `/files` does."""
        if not self._busy() and self._ready():
            await self.files.from_palette(command, self.app, self.measure_context)

    def action_help(self) -> None:
        bindings = [*ChatScreen.BINDINGS, *ConversationScreen.BINDINGS]
        keys = [(b.key, b.description) for b in bindings if isinstance(b, Binding)]
        keys += [*PROMPT_KEYS, ("ctrl+p", "command palette"), ("ctrl+q", "quit")]
        self.app.push_screen(HelpScreen(keys))

    def action_settings(self) -> None:
        async def apply(settings: ChatSettings | None) -> None:
            if settings is None:
                return
            self.settings = settings
            if self.conversation_id is not None:
                self.store.save_settings(self.conversation_id, settings.to_json())
            self.notify("settings saved for this conversation")
            self.measure_context()

        draft = self.host.settings.draft is not None
        self.app.push_screen(SettingsScreen(self.settings, draft), apply)

    def action_models(self) -> None:
        if self.host.server is not None:  # the server's models are its own
            if self.host.backend is None and not self._busy():
                self.load_model(None)  # connect again
            else:
                self.notify(SERVER_MODELS, title="models", severity="warning", timeout=10)
            return

        def chosen(choice: Choice | None) -> None:
            if choice is not None and not self._busy():
                self.load_model(choice)

        try:
            offered = choices()
        except Exception as exc:  # a LocalspecError says what to do; anything else is a bug
            self.notify(error_line(exc, "reading the registry"), title="registry", severity="error")
            return
        self.app.push_screen(ModelPicker(offered, self.model_label), chosen)


def _edit_request(text: str) -> tuple[str, bool]:
    """The prompt to send and whether it asks for a constrained edit (`/edit REQUEST`)."""
    command, _, rest = text.partition(" ")
    if command.strip() == EDIT_COMMAND and rest.strip():
        return rest.strip(), True
    return text, False
