"""The conversation list beside the chat: select one to switch to it."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.widgets import Label, ListItem, ListView

from tui.store import Conversation


class ConversationItem(ListItem):
    def __init__(self, conversation: Conversation) -> None:
        super().__init__(Label(conversation.title, markup=False))
        self.conversation_id = conversation.id


class ConversationList(ListView):
    """Saved conversations, the most recently used first."""

    @dataclass
    class Chosen(Message):
        conversation_id: int

    async def show(self, conversations: list[Conversation], current: int | None) -> None:
        await self.clear()
        await self.extend(ConversationItem(c) for c in conversations)
        ids = [c.id for c in conversations]
        self.index = ids.index(current) if current in ids else None

    def on_list_view_selected(self, event: ListView.Selected) -> None:
        event.stop()
        if isinstance(event.item, ConversationItem):
            self.post_message(self.Chosen(event.item.conversation_id))
