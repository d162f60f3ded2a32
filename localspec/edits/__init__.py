"""Edits in a model's answer: find them, apply them to the files, show and write the result.

`parse_edits` finds SEARCH/REPLACE blocks (aider's convention) and whole-file blocks for the
files the user added; `plan_changes` applies them in memory and refuses, naming each block,
when any SEARCH text does not match; `unified_diff` shows the result; `write_changes` writes it
atomically, all files or none. No UI here: the chat app and `localspec complete --apply` share
it.
"""

from __future__ import annotations

from localspec.edits.apply import FileChange, plan_changes, resolve, unified_diff
from localspec.edits.parse import Edit, clean_name, parse_edits
from localspec.edits.write import atomic_write, changed_since, current_text, write_changes
from localspec.errors import EditError

# how an edit must be written to be applied: SEARCH/REPLACE blocks (aider's convention)
_BLOCK_FORMAT = """\
path/to/file.py
```python
<<<<<<< SEARCH
the exact lines of the file to change, copied character for character
=======
the lines to put in their place
>>>>>>> REPLACE
```

Rules: the file's path stands alone on the line before the fence. SEARCH must match the file \
exactly, including white space and comments; include just enough lines to be unique. Use \
several small blocks for changes in several places. To create a file, leave SEARCH empty."""

# a system prompt that asks for SEARCH/REPLACE blocks (`complete --apply` sends it by default)
INSTRUCTIONS = f"""\
You are an expert software developer. Make the change the user asks for in their files by \
answering with SEARCH/REPLACE blocks, each in this exact format:

{_BLOCK_FORMAT} \
Explain the change in one sentence, then give the blocks."""

# what the chat adds after the user's own system prompt while files are in the context: the
# files are there to be read or changed, and a change is only applicable in this format
EDIT_FORMAT = f"""\
When the user asks you to change their files, answer with SEARCH/REPLACE blocks, each in this \
exact format:

{_BLOCK_FORMAT} \
Explain the change in one sentence, then give the blocks. For any other question, answer \
normally."""

__all__ = [
    "EDIT_FORMAT",
    "INSTRUCTIONS",
    "Edit",
    "EditError",
    "FileChange",
    "atomic_write",
    "changed_since",
    "clean_name",
    "current_text",
    "parse_edits",
    "plan_changes",
    "resolve",
    "unified_diff",
    "write_changes",
]
