"""The grammar of an answer that can only be an edit that applies (llguidance's Lark dialect).

Built per request from the files the model was shown (the chat's `/edit`, `complete --apply
--edit-grammar`), in one of two shapes, the one `prompt.edit_format` asks for:
- **whole files** when every file is small (`rewrites_whole`): a sentence saying what is wrong
  or what changes, then each changed file under its path, whole, in a fence. The default 1.5B
  model got 28 of 36 edit-bench tasks right with SEARCH/REPLACE blocks under the grammar and
  33 rewriting the file (docs/measured.md, "Edits"): it copied whole files into SEARCH and gave
  back part of one in REPLACE, or copied SEARCH back unchanged, and a bare file name was its
  whole "explanation"; made to say what is wrong first, and to write the file once, it fixed
  most of them;
- **SEARCH/REPLACE blocks** otherwise: one line of free explanation, then blocks in aider's
  format, each for one of those files (at most one block per file: a second block's SEARCH
  would have to match the file as the first one left it, which a grammar of the original's
  lines cannot say), its SEARCH a run of that file's lines, in order, character for character.
  REPLACE is free text but for a line that would close the block.
Everything free is bounded (`EditBounds`), so that even a model that never chooses to stop
ends inside the grammar: a constrained answer always parses and applies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from localspec.context_files import DIFF_LABEL, ContextFile, fence_for
from localspec.edits.lenient import LOOSE_HEAD
from localspec.edits.parse import DIVIDER, HEAD, UPDATED

MARKER = ">>>>>>> REPLACE"
# lines the parser reads as a block's markers: never inside SEARCH, REPLACE or the explanation
# (Python's \s, which the parser uses, also takes \x1c-\x1f; the grammar's regexes do not)
_SPACE = r"[\s\x1c-\x1f]*"
_MARKERS = rf"{_SPACE}(<{{5,9}} SEARCH>?|={{5,9}}|>{{5,9}} REPLACE){_SPACE}"
# what the explanation's line may not be: a marker, a lenient reading's bare opening marker
# (`lenient.LOOSE_HEAD`), or a fence (`parse.FENCE`: a line that starts with ``` or ~~~).
# Each is a whole-line pattern: llguidance gives up ("too many expressions") on a bounded line
# that excludes a pattern anywhere inside it, or a fence of `{3,}` backticks, over a 152k
# vocabulary (Qwen's), though not over the tiny test models'.
_LOOSE_HEAD = rf"{_SPACE}(<{{1,9}}{_SPACE})?SEARCH{_SPACE}:?{_SPACE}"
_FENCE_LINE = r" {0,3}(```|~~~)[^\n]*"
# a line REPLACE of a file without one may not hold: a fence, or two backticks (refused the
# fence, the default model wrote "``" where `>>>>>>> REPLACE` belongs and ran on)
_BACKTICKS = re.compile(r" {0,3}(``|~~~)")
_BACKTICKS_LINE = r" {0,3}(``|~~~)[^\n]*"
# the sentence before whole files: it starts with a letter (so it is no marker or fence), and is
# more than one word (alone, the model wrote the file's name and went straight to the code)
_ONE_WORD = r"[^\s]*\s*"
WHOLE_FENCE = "```"  # a whole file's fence: files that hold one are edited by blocks


EDIT_ANSWER_TOKENS = 512
"""An edit's answer length unless the user sets one: the chat's default, which a whole file
(`EditBounds.whole_file_chars`) and its sentence fit."""


@dataclass(frozen=True)
class EditBounds:
    """How much free text a constrained answer may hold: the explanation's characters, and
    REPLACE's (or a whole file's) lines and characters per line; and the largest file that is
    rewritten whole rather than edited by blocks."""

    explanation: int = 400
    replace_lines: int = 200
    line_chars: int = 400
    # ~300 tokens of code: a whole file and its sentence fit the chat's 512-token answer
    whole_file_chars: int = 1_000


def edit_grammar(files: Sequence[ContextFile], bounds: EditBounds | None = None) -> str:
    """The Lark grammar of an answer that edits `files` (see the module docstring); `files`
    must hold at least one file with lines (the diff of `@diff` is no file to edit)."""
    bounds = bounds or EditBounds()
    editable = editable_files(files)
    if not editable:
        raise ValueError("a constrained edit needs a file with lines to edit")
    if _all_small_and_plain(editable, bounds.whole_file_chars):
        return _whole_files_grammar(editable, bounds)
    rules = [
        "%llguidance {}",
        f"start: EXPLANATION {_literal(chr(10) * 2)} blocks",
        f"EXPLANATION: /[^\\n]{{0,{bounds.explanation}}}/ & ~/{_MARKERS}/ & ~/{_LOOSE_HEAD}/"
        f" & ~/{_FENCE_LINE}/",
        f"REPLACE_LINE: /[^\\n]{{0,{bounds.line_chars}}}\\n/ & ~/{_MARKERS}/",
        f"CODE_LINE: /[^\\n]{{0,{bounds.line_chars}}}\\n/ & ~/{_MARKERS}/"
        f" & ~/{_BACKTICKS_LINE}\\n/",
        f"replace: REPLACE_LINE{{0,{bounds.replace_lines}}}",
        f"replace_code: CODE_LINE{{0,{bounds.replace_lines}}}",
    ]
    names = [f"block_{index}" for index in range(len(editable))]
    rules.append("blocks: " + " | ".join(_orders(names)))
    for index, file in enumerate(editable):
        rules.extend(_file_rules(index, file))
    return "\n".join(rules) + "\n"


def rewrites_whole(files: Sequence[ContextFile], bounds: EditBounds | None = None) -> bool:
    """Whether an edit of `files` rewrites each changed file whole: when every file that can
    be edited is small, holds no line the answer's parser would read as a block marker, and
    no fence of its own (rewriting a Markdown file in a longer fence, the default model closed
    it with the file's own three backticks and wrote the file again and again)."""
    return _all_small_and_plain(editable_files(files), (bounds or EditBounds()).whole_file_chars)


def _all_small_and_plain(editable: Sequence[ContextFile], limit: int) -> bool:
    return bool(editable) and all(
        len(file.content) <= limit
        and fence_for(file.content) == WHOLE_FENCE
        and not any(_is_marker(line) or LOOSE_HEAD.match(line) for line in _all_lines(file))
        for file in editable
    )


def editable_files(files: Sequence[ContextFile]) -> list[ContextFile]:
    """The files a constrained answer may edit: those with lines, named by a path a block can
    carry (no white space in it), not `@diff`'s text."""
    return [
        file
        for file in files
        if file.label != DIFF_LABEL
        and file.content
        and not any(c.isspace() for c in file.label)
        and any(line is not None for line in _lines(file.content))
    ]


def _is_marker(line: str) -> bool:
    return any(marker.match(line) for marker in (HEAD, DIVIDER, UPDATED))


def _orders(names: Sequence[str]) -> list[str]:
    """Each non-empty run of the blocks in the files' order, separated by blank lines: a file
    edited once at most."""
    runs = []
    for first in range(len(names)):
        for last in range(first, len(names)):
            runs.append(' "\\n\\n" '.join(names[first : last + 1]))
    return runs


def _file_rules(index: int, file: ContextFile) -> list[str]:
    """A block for `file`, and its SEARCH: a run of its lines that starts anywhere and goes on
    for as many lines as the model writes (`from_i_j`: the run from line j on). REPLACE holds
    no fence line unless the file has one (a Markdown file): the default model, done with
    REPLACE, closed the fence and skipped `>>>>>>> REPLACE`, and its answer then ran on inside
    REPLACE to the token limit (3 of 36 answers of the edit bench, and one more that closed it
    after a second, garbled block); refused ```, it wrote `` (2 of 36): a line that starts
    with two backticks is refused too."""
    lines = _lines(file.content)
    head = f"{file.label}\n```{file.language}\n<<<<<<< SEARCH\n"
    usable = [j for j, line in enumerate(lines) if line is not None]  # a run stops at a gap
    starts = set(usable)
    replace = "replace" if _holds_backticks(file) else "replace_code"
    rules = [
        f"block_{index}: {_literal(head)} search_{index} {_literal('=======' + chr(10))} "
        f"{replace} {_literal(MARKER + chr(10) + '```')}",
        f"search_{index}: " + " | ".join(f"from_{index}_{j}" for j in usable),
    ]
    for j in usable:
        rest = f" from_{index}_{j + 1}?" if j + 1 in starts else ""
        rules.append(f"from_{index}_{j}: {_literal(lines[j] or '')}{rest}")
    return rules


def _whole_files_grammar(files: Sequence[ContextFile], bounds: EditBounds) -> str:
    """A sentence, then whole files: each under its path, in a fence, at most once each, in
    the files' order."""
    rules = [
        "%llguidance {}",
        f"start: SENTENCE {_literal(chr(10) * 2)} files",
        f"SENTENCE: /[A-Za-z][^\\n]{{0,{bounds.explanation}}}/ & ~/{_LOOSE_HEAD}/ & ~/{_ONE_WORD}/",
    ]
    names = [f"file_{index}" for index in range(len(files))]
    rules.append("files: " + " | ".join(_orders(names)))
    for index, file in enumerate(files):
        head = f"{file.label}\n{WHOLE_FENCE}{file.language}\n"
        rules.append(
            f"file_{index}: {_literal(head)} LINE_{index}{{1,{bounds.replace_lines}}}"
            f" {_literal(WHOLE_FENCE)}"
        )
        rules.append(f"LINE_{index}: " + _whole_line(file, bounds))
    return "\n".join(rules) + "\n"


def _whole_line(file: ContextFile, bounds: EditBounds) -> str:
    """A line of a whole file: no marker, and no fence. Unless the file holds one, no line
    starting with two backticks or `~~~` either (refused the fence, the model wrote "``" to
    end a block)."""
    line = f"/[^\\n]{{0,{bounds.line_chars}}}\\n/ & ~/{_MARKERS}/"
    if _holds_backticks(file):
        return line + f" & ~/ {{0,3}}{WHOLE_FENCE}[^\\n]*\\n/"
    return line + f" & ~/{_BACKTICKS_LINE}\\n/"


def _holds_backticks(file: ContextFile) -> bool:
    """Whether a line of `file` starts with two backticks or `~~~` (a fence of its own, or
    what the model wrote for one), which its edit's lines may then hold too."""
    return any(_BACKTICKS.match(line) for line in _all_lines(file))


def _all_lines(file: ContextFile) -> list[str]:
    """The file's lines as the answer's parser cuts an answer (at `\\n` alone)."""
    return file.content.split("\n")


def _lines(content: str) -> list[str | None]:
    """The file's lines as SEARCH writes them (ending `\n`, a CRLF line's `\r` left out: the
    parser reads `\r\n` as `\n`, and the file is matched so); None for a line SEARCH may not
    hold: one the parser reads as a marker, a last line that ends in a lone `\r` (no
    SEARCH text can end there), or one that ends in `\r\r\n` (its `\r` left out, the line
    would still end in `\r\n`, which the parser reads as `\n`: found by the property test)."""
    pieces = content.split("\n")
    ended = pieces[:-1] if content.endswith("\n") else pieces
    lines: list[str | None] = []
    for j, piece in enumerate(ended):
        last = j == len(ended) - 1 and not content.endswith("\n")
        line = piece.removesuffix("\r") + "\n"
        unwritable = line.endswith("\r\n") or (last and piece.endswith("\r"))
        lines.append(None if _is_marker(line) or unwritable else line)
    return lines


def _literal(text: str) -> str:
    """A Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text)
