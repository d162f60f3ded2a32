"""Fill-in-the-middle prompts in the model's own FIM tokens, for editors' completion requests.

The layout is the one Qwen2.5-Coder was trained on and llama.cpp's `/infill` builds:

    <|repo_name|>myproject\\n
    <|file_sep|>other.py\\n<text of other.py>          (one per extra chunk)
    <|file_sep|>filename\\n
    <|fim_prefix|>prefix + prompt<|fim_suffix|>suffix<|fim_middle|>

The tokens are llama-server's own where the request leaves them to it: its project and file
names ("myproject", "filename") unless the request names the file, and each piece (a chunk's
name line and its text, the prefix and the prompt) tokenized on its own, as it does. An
editor built against llama-server (llama.vim, llama.vscode) then gets the completions it was
tuned with, and a side-by-side bench compares speed on the same answers, not on answers that
a token of naming sent elsewhere. The one difference: a model that wants a BOS gets it first,
where it was trained to see it, not between the extra chunks and the FIM prefix.

Models without the repo tokens get the extra chunks as plain text before the FIM prefix.
Editor text is tokenized with special-token parsing off, so a file that happens to contain
`<|fim_middle|>` cannot inject control tokens.

The prompt says where its suffix and each extra chunk lie (`InfillPrompt.regions`): `auto`
looks them up apart for its n-gram drafts, because a middle copies them differently often
(`localspec.speculative.sources`).

Unlike llama.cpp, prefix and suffix are never cut to fit: a FIM prompt that does not fit the
context is an error with the counts. Extra chunks are optional context by nature; those that do
not fit are dropped oldest first and the caller reports how many (never silently).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from localspec.errors import PromptTooLongError, UsageError
from localspec.speculative.sources import EXTRA, SUFFIX, Span

# what llama.cpp writes between extra chunks for models without a file-separator token
_PLAIN_CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
# llama-server's names for the repository and the current file, which editors do not send
DEFAULT_PROJECT, DEFAULT_FILENAME = "myproject", "filename"


class FimVocabulary(Protocol):
    """What building a FIM prompt needs from a model (`LlamaModel` provides it)."""

    @property
    def bos(self) -> int: ...

    @property
    def add_bos(self) -> bool: ...

    def tokenize(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> list[int]: ...

    def special_token(self, name: str) -> int | None: ...


@dataclass(frozen=True)
class ExtraChunk:
    """Another file's text the editor sends as context (llama.vim's ring buffer chunks)."""

    filename: str
    text: str


@dataclass(frozen=True)
class InfillPrompt:
    """The prompt's tokens, how many extra chunks it holds and dropped, and where its suffix
    and extra chunks lie (`regions`: what auto's n-gram lookup searches apart)."""

    tokens: list[int]
    extra_used: int
    extra_dropped: int
    regions: tuple[Span, ...] = ()


def supports_fim(vocabulary: FimVocabulary) -> bool:
    return all(
        vocabulary.special_token(name) is not None
        for name in ("fim_prefix", "fim_suffix", "fim_middle")
    )


def infill_prompt(
    vocabulary: FimVocabulary,
    prefix: str,
    suffix: str,
    *,
    prompt: str = "",
    extra: Sequence[ExtraChunk] = (),
    budget: int,
    filename: str = "",
    project: str = DEFAULT_PROJECT,
) -> InfillPrompt:
    """The FIM prompt for a gap between `prefix + prompt` and `suffix`.

    `budget` is how many prompt tokens may be used (the context minus room to generate).
    Raises `PromptTooLongError` when prefix, prompt and suffix alone exceed it.
    """
    if not supports_fim(vocabulary):
        raise UsageError(
            "this model has no fill-in-the-middle tokens: use a code model trained for FIM "
            "(for example the Qwen2.5-Coder pairs in `localspec models`)"
        )

    def text_tokens(text: str) -> list[int]:
        return vocabulary.tokenize(text, add_special=False, parse_special=False) if text else []

    def special(name: str) -> int:
        token = vocabulary.special_token(name)
        assert token is not None
        return token

    repo = vocabulary.special_token("fim_repo")
    file_sep = vocabulary.special_token("fim_file_sep")
    head = [vocabulary.bos] if vocabulary.add_bos else []
    current_file: list[int] = []
    if repo is not None and file_sep is not None:
        head += [repo, *text_tokens(f"{project}\n")]
        current_file = [file_sep, *text_tokens(f"{filename or DEFAULT_FILENAME}\n")]
    before_suffix = [
        *current_file,
        special("fim_prefix"),
        *text_tokens(prefix),
        *text_tokens(prompt),
    ]
    suffix_tokens = text_tokens(suffix)
    core = [*before_suffix, special("fim_suffix"), *suffix_tokens, special("fim_middle")]
    if len(head) + len(core) > budget:
        raise PromptTooLongError(len(head) + len(core), budget)

    chunks: list[list[int]] = []
    for chunk in extra:
        if file_sep is not None and repo is not None:
            name = [file_sep, *text_tokens(f"{chunk.filename}\n")]
        else:
            name = text_tokens(_PLAIN_CHUNK_SEPARATOR)
        chunks.append([*name, *text_tokens(chunk.text)])
    room = budget - len(head) - len(core)
    kept: list[list[int]] = []
    for chunk_tokens in reversed(chunks):  # the newest chunks are the most relevant
        if len(chunk_tokens) > room:
            break
        kept.insert(0, chunk_tokens)
        room -= len(chunk_tokens)
    regions = []
    at = len(head)
    for chunk_tokens in kept:
        regions.append(Span(EXTRA, at, at + len(chunk_tokens)))
        at += len(chunk_tokens)
    at += len(before_suffix) + 1
    regions.append(Span(SUFFIX, at, at + len(suffix_tokens)))
    tokens = head + [token for chunk_tokens in kept for token in chunk_tokens] + core
    return InfillPrompt(tokens, len(kept), len(chunks) - len(kept), tuple(regions))
