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
not fit are dropped oldest first and the caller reports how many (never silently). What does
not fit is counted, never built: a text's tokens are made only within what is left of the
budget (`LlamaModel.tokenize`'s `most`), so a megabytes-long prefix costs a count, not a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from localspec.errors import PromptTooLongError, UsageError
from localspec.llama.model import TooManyTokensError
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
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = True,
        most: int | None = None,
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

    def special(name: str) -> int:
        token = vocabulary.special_token(name)
        assert token is not None
        return token

    repo = vocabulary.special_token("fim_repo")
    file_sep = vocabulary.special_token("fim_file_sep")
    named = repo is not None and file_sep is not None
    head = [vocabulary.bos] if vocabulary.add_bos else []
    names = [f"{project}\n", f"{filename or DEFAULT_FILENAME}\n"] if named else []
    # the special tokens around the texts: repo and file separator, prefix, suffix, middle
    fixed = len(head) + (2 if named else 0) + 3
    *name_tokens, prefix_tokens, prompt_tokens, suffix_tokens = _within(
        vocabulary, [*names, prefix, prompt, suffix], fixed, budget
    )
    current_file: list[int] = []
    if named:
        assert repo is not None and file_sep is not None
        head += [repo, *name_tokens[0]]
        current_file = [file_sep, *name_tokens[1]]
    before_suffix = [*current_file, special("fim_prefix"), *prefix_tokens, *prompt_tokens]
    core = [*before_suffix, special("fim_suffix"), *suffix_tokens, special("fim_middle")]
    kept = _newest_that_fit(
        vocabulary, extra, file_sep if named else None, budget - len(head) - len(core)
    )
    regions = []
    at = len(head)
    for chunk_tokens in kept:
        regions.append(Span(EXTRA, at, at + len(chunk_tokens)))
        at += len(chunk_tokens)
    at += len(before_suffix) + 1
    regions.append(Span(SUFFIX, at, at + len(suffix_tokens)))
    tokens = head + [token for chunk_tokens in kept for token in chunk_tokens] + core
    return InfillPrompt(tokens, len(kept), len(extra) - len(kept), tuple(regions))


def _text_tokens(vocabulary: FimVocabulary, text: str, most: int) -> list[int]:
    """`text`'s tokens, special-token parsing off; `TooManyTokensError` when they are more
    than `most`, none built (a long text only counted, a piece at a time)."""
    if not text:
        return []
    return vocabulary.tokenize(text, add_special=False, parse_special=False, most=max(most, 0))


def _within(
    vocabulary: FimVocabulary, texts: Sequence[str], fixed: int, budget: int
) -> list[list[int]]:
    """Each of `texts`' tokens, all of them and `fixed` more within `budget`; else
    `PromptTooLongError` with the count, found without building what does not fit (a 3.5 MB
    prefix and suffix, tokenized whole to be refused, peaked at 411 MB)."""
    built: list[list[int]] = []
    used = fixed
    for index, text in enumerate(texts):
        try:
            tokens = _text_tokens(vocabulary, text, budget - used)
        except TooManyTokensError as exc:
            rest = sum(_count(vocabulary, later) for later in texts[index + 1 :])
            raise PromptTooLongError(used + exc.count + rest, budget) from None
        built.append(tokens)
        used += len(tokens)
    return built


def _count(vocabulary: FimVocabulary, text: str) -> int:
    """How many tokens `text` makes (for an error's count), none built."""
    try:
        return len(_text_tokens(vocabulary, text, 0))
    except TooManyTokensError as exc:
        return exc.count


def _newest_that_fit(
    vocabulary: FimVocabulary, extra: Sequence[ExtraChunk], file_sep: int | None, room: int
) -> list[list[int]]:
    """The extra chunks' tokens (each its name line, then its text), the newest that fit
    `room` together, oldest first: the newest chunks are the most relevant, and the first
    that does not fit drops it and every older one, none of them tokenized whole."""
    kept: list[list[int]] = []
    for chunk in reversed(extra):
        try:
            if file_sep is not None:
                name = [file_sep, *_text_tokens(vocabulary, f"{chunk.filename}\n", room - 1)]
            else:
                name = _text_tokens(vocabulary, _PLAIN_CHUNK_SEPARATOR, room)
            chunk_tokens = [*name, *_text_tokens(vocabulary, chunk.text, room - len(name))]
        except TooManyTokensError:
            break
        if len(chunk_tokens) > room:
            break
        kept.append(chunk_tokens)
        room -= len(chunk_tokens)
    kept.reverse()
    return kept
