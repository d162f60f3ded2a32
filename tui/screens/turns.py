"""A running answer's life on the chat screen: its events shown, saved, and ended.

The generation runs on a worker thread and its events arrive batched (`tui.streaming`); here,
on the UI thread, each batch is shown and checkpointed in the store, and the turn ends as
complete, cancelled, interrupted (its text kept) or undone (a refusal or a failure before any
text: its messages go and the prompt comes back). `ChatScreen` starts turns; this is the part
that does not depend on how they were started.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

from textual.message import Message as UIMessage

from localspec import Finished
from tui.edits import offer_edits
from tui.failures import error_line
from tui.generation import Cancelled, Failed, LiveStats, Refused, Started
from tui.screens.conversations import ConversationScreen
from tui.settings import Launch
from tui.store import ChatStore, Status
from tui.streaming import STATUS_S, Coalescer, Control, TextBatch, due_batch, grouped
from tui.widgets.message import MessageView
from tui.widgets.status import StatusBar

CHECKPOINT_S = 1.0  # how often a streaming answer is saved: what a crash can lose at most
CONTEXT_FULL = (
    "the answer filled the context window ({n_ctx} tokens) and stops there: start a new "
    "conversation (ctrl+n), or restart with a larger --ctx-size"
)
_log = logging.getLogger(__name__)


@dataclass
class ActiveTurn:
    prompt: str
    user_id: int | None
    view: MessageView
    cancel: threading.Event = field(default_factory=threading.Event)
    stats: LiveStats = field(default_factory=LiveStats)
    message_id: int | None = None
    saved_at: float = field(default_factory=time.monotonic)
    stream: Coalescer = field(default_factory=Coalescer)
    shown_at: float = 0.0  # when the status bar last showed the live figures


@dataclass
class TurnUpdate(UIMessage):
    """`turn`'s generation has events waiting in its stream (`timed`: the wake a timer set for
    events that were not due yet). A turn stopped by an error is no longer current while its
    worker still runs to the end of its step: its late events must not land on the turn
    started after it."""

    turn: ActiveTurn
    timed: bool = False


class TurnScreen(ConversationScreen):
    """The conversation screen's running answer (`turn`), from its first event to its end."""

    def __init__(self, store: ChatStore, launch: Launch) -> None:
        super().__init__(store, launch)
        self.turn: ActiveTurn | None = None
        # seconds between saves of a streaming answer; tests choose 0 (every chunk) or inf
        # (only the final save) so that a failing save is the same one on every machine
        self.checkpoint_s = CHECKPOINT_S
        # seconds between refreshes of the live figures (see tui.streaming); tests choose 0
        # or inf so that no count depends on the machine
        self.status_s = STATUS_S

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    def _show_context(self, used: int, n_ctx: int) -> None:
        """Show the context meter's figures (the chat screen knows the files in it)."""

    def measure_context(self) -> None:
        """Update the context meter for the conversation as it would be sent now."""

    async def on_turn_update(self, update: TurnUpdate) -> None:
        turn = self.turn
        if update.turn is not turn or turn is None or self.conversation_id is None:
            return  # a late event of a turn that was stopped

        def later(delay: float) -> None:
            self.set_timer(delay, lambda: self.post_message(TurnUpdate(turn, timed=True)))

        try:
            for event in grouped(due_batch(turn.stream, update.timed, later)):
                await self._apply(turn, event, self.conversation_id)
        except Exception as exc:  # saving or showing the answer failed: stop it, keep the text
            await self._stop_broken(turn, exc)

    async def _stop_broken(self, turn: ActiveTurn, exc: Exception) -> None:
        """Stop a turn whose answer could not be saved or shown; what it streamed stays.

        Its worker ends after the running step, and its late events are dropped. The user is
        told first: marking the answer interrupted uses the same store and widgets, and a
        second failure there is logged, never raised (it would take the app down).
        """
        turn.cancel.set()
        self.turn = None
        error = error_line(exc, "saving the answer")
        self.notify(error, title="answer stopped", severity="error", timeout=10)
        try:
            self._save(turn, "interrupted")  # the write that failed may succeed now
        except Exception as again:  # the store stays broken: a restart marks it interrupted
            _log.warning("the stopped answer could not be marked interrupted", exc_info=again)
        try:
            await turn.view.finish("interrupted")
        except Exception as again:  # the text stays shown, only its status note is missing
            _log.error("the stopped answer's status could not be shown", exc_info=again)

    async def _apply(
        self, turn: ActiveTurn, event: TextBatch | Control, conversation_id: int
    ) -> None:
        """Show and save one event of the running answer, or a batch of its text."""
        if isinstance(event, Started):
            turn.stats.on_started(event)
            turn.message_id = self.store.add_message(conversation_id, "assistant", "", "streaming")
            turn.view.message_id = turn.message_id
            self._show_context(event.prompt_tokens, event.n_ctx)
        elif isinstance(event, TextBatch):
            await self._show_text(turn, event)
        elif isinstance(event, Finished):
            await self._finished(turn, event)
        elif isinstance(event, Cancelled):
            await self._end(turn, "cancelled")
            self.prompt.restore(turn.prompt)
        else:
            await self._abandon(turn, event)

    async def _show_text(self, turn: ActiveTurn, text: TextBatch) -> None:
        """One Markdown write and one scroll for the whole batch; the live figures a few times
        a second (the final ones are shown when the answer ends)."""
        text.count(turn.stats)
        await turn.view.append(text.text, text.spans)
        self.messages_view.follow_answer()
        now = time.monotonic()
        if now - turn.shown_at >= self.status_s:
            turn.shown_at = now
            self.status.show_stats(turn.stats)
            used, n_ctx = turn.stats.context_used, turn.stats.n_ctx
            self._show_context(used, n_ctx)
        if now - turn.saved_at >= self.checkpoint_s:
            self._save(turn, "streaming")

    async def _finished(self, turn: ActiveTurn, event: Finished) -> None:
        """The answer is whole, or was cut short because it filled the context window."""
        turn.stats.on_finished(event.stats)
        self.status.show_stats(turn.stats)
        full = event.finish_reason == "context"
        turn.view.context_full = full
        await self._end(turn, "complete", event.stats.to_dict())
        offer_edits(self, turn.view.content)
        if full:
            notice = CONTEXT_FULL.format(n_ctx=turn.stats.n_ctx)
            self.notify(notice, title="context full", severity="warning", timeout=10)

    def _save(
        self, turn: ActiveTurn, status: Status, stats: dict[str, object] | None = None
    ) -> None:
        if turn.message_id is not None:
            view = turn.view
            stats_json = None if stats is None else json.dumps(stats)
            self.store.update_message(turn.message_id, view.content, status, view.spans, stats_json)
            turn.saved_at = time.monotonic()

    async def _end(
        self, turn: ActiveTurn, status: Status, stats: dict[str, object] | None = None
    ) -> None:
        self._save(turn, status, stats)
        await turn.view.finish(status)
        self.messages_view.follow_answer()
        self.turn = None
        self._show_context(turn.stats.context_used, turn.stats.n_ctx)

    async def _abandon(self, turn: ActiveTurn, event: Refused | Failed) -> None:
        """A turn that produced nothing is undone: its messages go and the prompt comes back."""
        self.turn = None
        if isinstance(event, Failed) and turn.view.content:
            self._save(turn, "interrupted")
            await turn.view.finish("interrupted")
        else:
            for message_id in (turn.message_id, turn.user_id):
                if message_id is not None:
                    self.store.delete_message(message_id)
            await turn.view.remove()
            users = self.messages_view.query(MessageView).filter(".user")
            if turn.user_id is not None and users and users.last().message_id == turn.user_id:
                await users.last().remove()
                self.prompt.restore(turn.prompt)
            if self.conversation_id is not None and not self.store.messages(self.conversation_id):
                # the conversation was created for this turn alone
                self.store.delete(self.conversation_id)
                settings = self.settings
                await self.start_new()
                self.settings = settings
        title = "not sent" if isinstance(event, Refused) else "generation failed"
        self.notify(event.message, title=title, severity="error", timeout=10)
        self.measure_context()
