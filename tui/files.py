"""The files in the current conversation's context: the set, its commands, what each send takes.

Files are sent with every turn at their current content, rendered by `localspec.context_files`
into the system message. At each send every file is looked at again: its modification time and
size first, its content (and SHA-256) only when they changed, `@diff` recomputed; the user
message records the version of each file it was sent with (`tui.store_files`).

Only files under the working directory can be added (as in aider, which takes files of its
repository only): a path typed or completed by accident must not put `~/.ssh` in a prompt and a
database. Files are shown to the model by their path relative to that folder.

A file that does not fit the context window beside the conversation is refused with the counts;
nothing is ever cut. Token counts come from the model's own chat template (`ModelHost.measure`)
and run on a thread (they hold the model's lock); everything else runs on the UI thread.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import shlex
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from textual.app import App
from textual.notifications import SeverityLevel

from localspec import LocalspecError, Message
from localspec.context_files import (
    DIFF,
    DIFF_LABEL,
    ContextFile,
    git_diff,
    load_file,
    render_file,
)
from localspec.errors import ContextFileError
from tui import store_files
from tui.file_commands import Command, mentions, parse_command
from tui.host import ModelHost
from tui.screens.dialogs import TextScreen
from tui.store import ChatStore

Notify = Callable[[str, SeverityLevel], None]
# the messages a turn would send now, given the files for the system message
Conversation = Callable[[list[ContextFile]], list[Message]]
TOO_BIG = (
    "{label} is {tokens:,} tokens; the conversation uses {used:,} of {n_ctx:,}: it does not "
    "fit. Drop files (/drop), start a new conversation (ctrl+n) or restart with a larger "
    "--ctx-size"
)


@dataclass(frozen=True)
class Entry:
    """One file of the set as last read: `file` None when it could not be read then."""

    key: str
    file: ContextFile | None = None
    stamp: tuple[int, int] | None = None  # (mtime_ns, size) of the version read
    sha256: str = ""


def _stamp(key: str) -> tuple[int, int] | None:
    if key == DIFF:
        return None  # recomputed at every look
    try:
        stat = Path(key).stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


class FileSet:
    """The files in context, in the order they were added, read from `root` (the cwd)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.entries: dict[str, Entry] = {}

    def key(self, name: str) -> str:
        """The set's key for a path as typed (relative to `root`); refused outside `root`."""
        if name == DIFF:
            return DIFF
        path = Path(name).expanduser()
        resolved = (path if path.is_absolute() else self.root / path).resolve()
        if not resolved.is_relative_to(self.root):
            raise ContextFileError(
                f"{name} is outside the working directory {self.root}: only files under it "
                f"can be added (start localspec chat in a folder that holds it)"
            )
        return str(resolved)

    def label(self, key: str) -> str:
        """How the model and the user see a file: its path under `root`."""
        if key == DIFF:
            return DIFF_LABEL
        path = Path(key)
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else key

    def read(self, key: str) -> Entry:
        """The file as it is now; raises `ContextFileError` when it cannot be sent."""
        stamp = _stamp(key)
        file = git_diff(self.root) if key == DIFF else load_file(Path(key), self.label(key))
        return Entry(key, file, stamp, hashlib.sha256(file.content.encode()).hexdigest())

    def refresh(self) -> list[str]:
        """Read again what changed on disk; one line for each file that cannot be read now
        (it stays in the set and is not sent until it can be)."""
        problems = []
        for key, entry in self.entries.items():
            if entry.file is not None and entry.stamp is not None and _stamp(key) == entry.stamp:
                continue
            try:
                fresh = self.read(key)
            except ContextFileError as exc:
                self.entries[key] = Entry(key)
                problems.append(f"{exc}: not sent (/drop {self.label(key)} to stop trying)")
                continue
            # an unchanged content keeps its entry: its token count is known
            same = entry.file is not None and fresh.sha256 == entry.sha256
            self.entries[key] = replace(entry, stamp=fresh.stamp) if same else fresh
        return problems

    def files(self, entries: Sequence[Entry] | None = None) -> list[ContextFile]:
        chosen = self.entries.values() if entries is None else entries
        return [entry.file for entry in chosen if entry.file is not None]

    def sent(self, extra: Sequence[Entry] = ()) -> list[ContextFile]:
        """The files the system message carries, with `extra` files after the set's."""
        return self.files([*self.entries.values(), *extra])


class ContextFiles:
    """The chat screen's files: commands, mentions, the meter's figures and each send's record.

    `conversation_id` and `conversation` read the screen's state when called: a conversation
    is created by its first message, after files may have been added to it.
    """

    def __init__(
        self,
        root: Path,
        store: ChatStore,
        host: ModelHost,
        *,
        notify: Notify,
        conversation: Conversation,
        conversation_id: Callable[[], int | None],
    ) -> None:
        self.set = FileSet(root)
        self.store, self.host, self.notify = store, host, notify
        self.conversation, self.conversation_id = conversation, conversation_id
        # token cost of a file's block, per (model file, block): a version is counted once
        self._tokens: dict[tuple[str, str], int] = {}

    # -- token counts (on a worker thread) -----------------------------------------------
    def _key(self, file: ContextFile) -> tuple[str, str]:
        return str(self.host.settings.target), render_file(file)

    def count(self, files: Sequence[ContextFile]) -> None:
        """Count the blocks of `files` not counted yet; blocks on the model's lock."""
        wanted = [f for f in files if self._key(f) not in self._tokens]
        if not wanted:
            return
        empty, n_ctx = self.host.measure([Message("user", "")])
        if n_ctx == 0:
            return  # no model is loaded: nothing to count with
        for file in wanted:
            used, _ = self.host.measure([Message("user", render_file(file))])
            self._tokens[self._key(file)] = max(0, used - empty)

    async def _count_now(self, files: Sequence[ContextFile]) -> None:
        """`count` on a thread; a failure leaves the costs unknown (the turn's own refusal
        or error says what is wrong with the conversation)."""
        try:
            await asyncio.to_thread(self.count, files)
        except LocalspecError as exc:
            self.notify(f"the files could not be measured: {exc}", "warning")

    def tokens(self, file: ContextFile) -> int | None:
        return self._tokens.get(self._key(file))

    def pending(self) -> list[ContextFile]:
        """The files whose cost is not known yet (for the context meter's worker)."""
        return [f for f in self.set.files() if self.tokens(f) is None]

    def meter(self) -> tuple[int, int]:
        """The context meter's figures: how many files are sent, and their tokens."""
        files = self.set.files()
        return len(files), sum(self.tokens(f) or 0 for f in files)

    def sent(self) -> list[ContextFile]:
        return self.set.sent()

    def labels(self) -> list[str]:
        """The files' paths as `/drop` takes them (quoted where they need it)."""
        return [
            shlex.quote(self.set.label(key)) if key != DIFF else DIFF for key in self.set.entries
        ]

    # -- the conversation's set ----------------------------------------------------------
    def switch(self, conversation_id: int | None) -> None:
        """Show another conversation's files (a new conversation has none)."""
        self.set.entries = {}
        if conversation_id is None:
            return
        for key in store_files.file_set(self.store, conversation_id):
            self.set.entries[key] = Entry(key)
        for problem in self.set.refresh():
            self.notify(problem, "warning")

    async def send(self) -> None:
        """Before a turn: read what changed, count it, record the versions the conversation's
        last user message is sent with (and save the set with a new conversation)."""
        if not self.set.entries:
            return
        for problem in self.set.refresh():
            self.notify(problem, "warning")
        await self._count_now(self.set.files())
        conversation_id = self.conversation_id()
        if conversation_id is None:
            return
        sent = [
            store_files.SentFile(e.key, e.sha256, self.tokens(e.file) or 0, e.file.content)
            for e in self.set.entries.values()
            if e.file is not None
        ]
        try:
            store_files.add_files(self.store, conversation_id, list(self.set.entries))
            message_id = store_files.last_user_message(self.store, conversation_id)
            if message_id is not None:
                store_files.record_sent(self.store, message_id, sent)
        except sqlite3.Error as exc:  # the turn still runs: only the record is missing
            self.notify(f"the files sent could not be recorded: {exc}", "error")

    # -- commands ------------------------------------------------------------------------
    async def command(self, text: str) -> bool:
        """Run `text` when it is `/add`, `/drop` or `/files`; False: it is a prompt."""
        command = parse_command(text)
        if command is None:
            return False
        if command.name == "add":
            await self.add(self._expand(command))
        elif command.name == "drop":
            self.drop(command.args)
        else:
            await self.show()
        return True

    def _expand(self, command: Command) -> list[str]:
        """`/add`'s arguments as keys: globs expanded under the working directory."""
        keys = []
        for arg in command.args or ():
            names = [arg]
            if glob.has_magic(arg):
                found = glob.glob(arg, root_dir=self.set.root, recursive=True)
                names = [n for n in sorted(found) if (self.set.root / n).is_file()]
                if not names:
                    self.notify(f"no file matches {arg}", "warning")
            for name in names:
                try:
                    keys.append(self.set.key(name))
                except ContextFileError as exc:
                    self.notify(str(exc), "error")
        if not command.args:
            self.notify("/add PATH... puts files in the conversation (@PATH does too)", "warning")
        return keys

    async def add(self, keys: Sequence[str], prompt: str | None = None) -> bool:
        """Read and add `keys`, each refused with one line when it cannot be read or does not
        fit. With `prompt` (the files its mentions name), all or none: False when any was
        refused, and the prompt is not sent."""
        fresh: list[Entry] = []
        for key in dict.fromkeys(keys):
            if key in self.set.entries:
                continue
            try:
                fresh.append(self.set.read(key))
            except ContextFileError as exc:
                self.notify(str(exc), "error")
                if prompt is not None:
                    return False
        try:
            taken = await self._fitting(fresh, prompt)
        except LocalspecError as exc:  # e.g. a chat template that fails on the files
            self.notify(f"the files could not be measured: {exc}", "error")
            return False
        if prompt is not None and len(taken) < len(fresh):
            return False
        for entry in taken:
            self.set.entries[entry.key] = entry
        conversation_id = self.conversation_id()
        if taken and conversation_id is not None:
            store_files.add_files(self.store, conversation_id, [e.key for e in taken])
        if taken and prompt is None:
            added = ", ".join(f"{self.set.label(e.key)} ({self._cost(e)})" for e in taken)
            self.notify(f"added {added}", "information")
        return True

    async def _fitting(self, fresh: list[Entry], prompt: str | None) -> list[Entry]:
        """The entries of `fresh` that fit the window one after another, refusing the rest."""
        taken: list[Entry] = []
        for entry in fresh:
            before = self._messages(taken, prompt)
            after = self._messages([*taken, entry], prompt)
            await asyncio.to_thread(self.count, self.set.files([entry]))
            used, n_ctx = await asyncio.to_thread(self.host.measure, before)
            total, _ = await asyncio.to_thread(self.host.measure, after)
            if n_ctx and total >= n_ctx:
                tokens = self.tokens(entry.file) if entry.file is not None else None
                label = self.set.label(entry.key)
                refusal = TOO_BIG.format(label=label, tokens=tokens or 0, used=used, n_ctx=n_ctx)
                self.notify(refusal, "error")
                continue
            taken.append(entry)
        return taken

    def _messages(self, extra: Sequence[Entry], prompt: str | None) -> list[Message]:
        messages = self.conversation(self.set.sent(extra))
        return messages if prompt is None else [*messages, Message("user", prompt)]

    def _cost(self, entry: Entry) -> str:
        tokens = None if entry.file is None else self.tokens(entry.file)
        return "not readable now" if tokens is None else f"{tokens:,} tokens"

    async def mentioned(self, prompt: str) -> bool:
        """Add the files `prompt`'s `@` words name; False (told why) when one cannot be."""
        keys = []
        for name in mentions(prompt):
            try:
                key = self.set.key(name)
            except ContextFileError as exc:
                if not (self.set.root / Path(name).expanduser()).exists():
                    continue  # not a path: text such as a decorator
                self.notify(str(exc), "error")
                return False
            if key == DIFF or Path(key).exists():
                keys.append(key)
        return await self.add(keys, prompt) if keys else True

    def drop(self, names: Sequence[str]) -> None:
        """Take files out of the context (all of them without names)."""
        if not names:
            dropped = list(self.set.entries)
        else:
            dropped = []
            for name in names:
                try:
                    key = self.set.key(name)
                except ContextFileError:
                    key = name
                if key in self.set.entries:
                    dropped.append(key)
                else:
                    self.notify(f"{name} is not in the context (/files lists it)", "warning")
        for key in dropped:
            del self.set.entries[key]
        conversation_id = self.conversation_id()
        if conversation_id is not None:
            store_files.drop_files(self.store, conversation_id, dropped)
        if dropped:
            labels = ", ".join(self.set.label(key) for key in dropped)
            self.notify(f"dropped {labels}", "information")

    async def show(self) -> None:
        """One line per file with its token cost (`/files`)."""
        if not self.set.entries:
            self.notify("no files in context: /add PATH or @PATH in a prompt", "information")
            return
        for problem in self.set.refresh():
            self.notify(problem, "warning")
        await self._count_now(self.set.files())
        lines = [f"{self.set.label(e.key)}  {self._cost(e)}" for e in self.set.entries.values()]
        _, total = self.meter()
        self.notify("\n".join([*lines, f"total {total:,} tokens"]), "information")

    async def from_palette(self, command: str, app: App[Any], done: Callable[[], object]) -> None:
        """The command palette's `files('add')`, `files('drop')`, `files('files')`: a field for
        the paths (for drop, those in context, to edit), then the same as typing the command;
        `done` runs after a change."""
        if command == "files":
            await self.show()
            return

        async def run(paths: str | None) -> None:
            if paths:
                await self.command(f"/{command} {paths}")
                done()

        shown = " ".join(self.labels()) if command == "drop" else ""
        title = f"{command.capitalize()} files (paths separated by spaces)"
        app.push_screen(TextScreen(title, shown), run)
