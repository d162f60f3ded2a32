"""Edits in a model's answer: find them, apply them to the files, show and write the result.

`parse_edits` finds SEARCH/REPLACE blocks (aider's convention) and whole-file blocks for the
files the user added, reading unambiguous near misses leniently and saying what it assumed;
`plan_changes` applies them in memory and refuses, naming each block, when any SEARCH text does
not match; `unified_diff` shows the result; `write_changes` writes it atomically, all files or
none; `system_message` is the one prompt that asks for them. No UI here: the chat app and
`localspec complete --apply` share it.
"""

from __future__ import annotations

from localspec.edits.apply import FileChange, plan_changes, resolve, unified_diff
from localspec.edits.parse import Block, Edit, clean_name, parse_edits, scan
from localspec.edits.prompt import edit_format, system_message
from localspec.edits.write import atomic_write, changed_since, current_text, write_changes
from localspec.errors import EditError

__all__ = [
    "Block",
    "Edit",
    "EditError",
    "FileChange",
    "atomic_write",
    "changed_since",
    "clean_name",
    "current_text",
    "edit_format",
    "parse_edits",
    "plan_changes",
    "resolve",
    "scan",
    "system_message",
    "unified_diff",
    "write_changes",
]
