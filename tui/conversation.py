"""Pure helpers over a stored conversation: what the model is sent, titles, code blocks."""

from __future__ import annotations

import json
import re
from itertools import pairwise

from localspec import Message
from tui.store import StoredMessage

_FENCE = re.compile(r"^(`{3,}|~{3,})[^\n]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)
_STOPPED = ("cancelled", "interrupted")


def model_messages(stored: list[StoredMessage], system: str) -> list[Message]:
    """The messages a new answer is conditioned on.

    A question whose answer was cancelled or interrupted is left out together with that partial
    answer: the user stopped it (usually to ask again), and a half answer would steer the next
    one. Both stay visible and saved.
    """
    messages = [Message("system", system)] if system.strip() else []
    skip: set[int] = set()
    for before, after in pairwise(stored):
        if before.role == "user" and after.role == "assistant" and after.status in _STOPPED:
            skip.update((before.id, after.id))
    for message in stored:
        if message.id in skip or (message.role == "assistant" and message.status in _STOPPED):
            continue
        messages.append(Message(message.role, message.content))
    return messages


def filled_context(message: StoredMessage) -> bool:
    """Whether a saved answer ended because it filled the context window (its statistics say
    so: finish reason "context"); unreadable statistics say nothing."""
    try:
        stats = json.loads(message.stats or "{}")
    except (ValueError, RecursionError):
        return False
    return isinstance(stats, dict) and stats.get("finish_reason") == "context"


def title_from(prompt: str, width: int = 48) -> str:
    """A conversation title from its first prompt: the first line, shortened at a word."""
    line = prompt.strip().splitlines()[0] if prompt.strip() else "New conversation"
    if len(line) <= width:
        return line
    return line[:width].rsplit(" ", 1)[0] + "…"


def last_code_block(text: str) -> str | None:
    """The body of the last fenced code block in `text`, or None when there is none."""
    blocks = _FENCE.findall(text)
    return blocks[-1][1] if blocks else None


def export_name(title: str, conversation_id: int) -> str:
    """A file name for an exported conversation: its title, made safe, and its id."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40] or "conversation"
    return f"{slug}-{conversation_id}.md"
