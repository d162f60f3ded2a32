"""The one system message for a conversation about the user's files, chat and `complete` alike.

`localspec complete --file F --apply` got edits right with the default 1.5B pair where the
chat, on the same request and file, did not: the two built different prompts. The chat put the
format after a condition ("When the user asks you to change their files, ...") that a small
model weighs little, the format's example path (`path/to/file.py`) was copied into the answer
as `path/to/store.py`, and `complete` dropped the format entirely when the user gave a system
prompt. Now both surfaces call `system_message`, so the same files and request give the same
messages: the user's system prompt (or a one-line role when there is none), then how to write
an edit, its example naming a file the model was shown, then the files.

How to write an edit depends on the files (`grammar.rewrites_whole`, shared with the edit
grammar, so the format asked for is the one the grammar holds the answer to): small files are
rewritten whole, after a sentence on what is wrong; larger ones get SEARCH/REPLACE blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.context_files import DIFF_LABEL, ContextFile, language_for, render_files
from localspec.edits.grammar import editable_files, rewrites_whole

ROLE = "You are an expert software developer."
PLACEHOLDER_PATH = "path/to/file.py"  # the example path when no file is in the context


def edit_format(files: Sequence[ContextFile] = ()) -> str:
    """How to write an edit that applies to `files`: whole files when they are small,
    otherwise aider's SEARCH/REPLACE blocks."""
    return _whole_format(files) if rewrites_whole(files) else _blocks_format(files)


def _whole_format(files: Sequence[ContextFile]) -> str:
    """Whole files, after a sentence. The example is a file the user did not give: its lines
    are not the user's to copy (an example of the user's own file, its text made up, would
    be)."""
    several = len(editable_files(files)) > 1
    path = "the path of each file you change" if several else "the file's path"
    return f"""\
To change a file, first say in a sentence what is wrong or what has to change. Then give \
{path} on a line of its own, and under it the whole file as it must be after the change, \
every line of it, in a fenced code block. For example, asked to make greet() say "Hi" in a \
file hello.py, the answer is:

greet() says "Hello"; it should say "Hi".

hello.py
```python
def greet(name):
    return f"Hi, {{name}}!"
```

Rules: copy every line you do not change exactly, including white space, indentation and \
comments; never leave a line out or write "..." for it. A question that asks for no change is \
answered without a file."""


def _blocks_format(files: Sequence[ContextFile]) -> str:
    """SEARCH/REPLACE blocks, the example naming the first file of `files` (a small model
    copies the example's path)."""
    named = [file for file in files if file.label != DIFF_LABEL]
    path = named[0].label if named else PLACEHOLDER_PATH
    language = (named[0].language if named else "") or language_for(path)
    return f"""\
To change the user's files, answer with SEARCH/REPLACE blocks, each in this exact format:

{path}
```{language}
<<<<<<< SEARCH
the exact lines of the file to change, copied character for character
=======
the lines to put in their place
>>>>>>> REPLACE
```

Rules: the file's path stands alone on the line before the fence. SEARCH must match the file \
exactly, including white space, indentation and comments; include just enough lines to be \
unique. Use several small blocks for changes in several places. To create a file, leave SEARCH \
empty. Explain the change in one sentence, then give the blocks. A question that asks for no \
change is answered without blocks."""


def system_message(system: str, files: Sequence[ContextFile], edits: bool) -> str:
    """The system message's text: the user's system prompt (`ROLE` when it is empty and
    `edits` asks for the format), then with `edits` the format, then the files; "" when there
    is nothing to say."""
    parts = [system.strip() or (ROLE if edits else "")]
    if edits:
        parts.append(edit_format(files))
    parts.append(render_files(files))
    return "\n\n".join(part for part in parts if part)
