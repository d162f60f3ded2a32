"""The conversations behind the Responses API's `previous_response_id`.

A response this server produced since it started can be continued by its id: the store
keeps each stored response's whole conversation (its input, the earlier responses it
continued, and its own output) as `Message`s. It lives in memory and is bounded by count
and by characters, the oldest going first, so a long agent session cannot grow it without
limit; an id it no longer holds is a 404 naming it, as OpenAI answers an unknown one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from localspec.messages import Message

MAX_RESPONSES = 256
MAX_CHARACTERS = 64 * 1024 * 1024


class ResponseStore:
    """Conversations by response id, least recently used first out."""

    def __init__(
        self, max_responses: int = MAX_RESPONSES, max_characters: int = MAX_CHARACTERS
    ) -> None:
        self.max_responses = max_responses
        self.max_characters = max_characters
        self._entries: OrderedDict[str, tuple[Message, ...]] = OrderedDict()
        self.characters = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, response_id: str) -> tuple[Message, ...] | None:
        conversation = self._entries.get(response_id)
        if conversation is not None:
            self._entries.move_to_end(response_id)
        return conversation

    def put(self, response_id: str, conversation: Sequence[Message]) -> None:
        kept = tuple(conversation)
        replaced = self._entries.pop(response_id, None)
        if replaced is not None:
            self.characters -= _size(replaced)
        self._entries[response_id] = kept
        self.characters += _size(kept)
        while self._entries and (
            len(self._entries) > self.max_responses or self.characters > self.max_characters
        ):
            _oldest, dropped = self._entries.popitem(last=False)
            self.characters -= _size(dropped)


def _size(conversation: tuple[Message, ...]) -> int:
    """Every character a conversation keeps: ids too, which a client may make as long as
    its body allows and a chat template may never render."""
    return sum(
        len(turn.content)
        + len(turn.tool_call_id or "")
        + sum(len(call.arguments) + len(call.name) + len(call.id) for call in turn.tool_calls)
        for turn in conversation
    )
