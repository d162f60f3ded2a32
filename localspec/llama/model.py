"""A loaded GGUF model and its vocabulary: tokenize, render pieces, special tokens, template.

The model owns the weights (mmapped by llama.cpp) and is shared read-only by every context
created from it; `close()` (or the context manager) frees it deterministically instead of
relying on `__del__`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp.llama_cpp as lc

from localspec.errors import IncompatibleDraftError, ModelLoadError
from localspec.lifetime import Closing
from localspec.llama.backend import init_backend, set_fields
from localspec.llama.gguf_file import check_gguf

PIECE_CHARS = 1 << 18
"""The most characters llama.cpp's tokenizer gets at once to count a text: it holds ~70 bytes
a character while it works, and a 7 MB `count_tokens` body peaked at 670 MB."""
PIECE_SLACK = 8
"""Tokens a cut between two pieces may add (a merge across it undone, a special token cut)."""


class TooManyTokensError(Exception):
    """A text makes more tokens than the caller made room for; `count` says how many (a
    text counted in pieces: a few more than it makes whole, at most `PIECE_SLACK` a piece)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"the text makes {count} tokens")
        self.count = count


def text_pieces(text: str) -> Iterator[str]:
    """`text` in pieces of at most `PIECE_CHARS` characters, cut after a line's end where
    the piece has one (tokens seldom span a line break)."""
    start = 0
    while start < len(text):
        end = start + PIECE_CHARS
        if end < len(text):
            cut = text.rfind("\n", start, end)
            end = cut + 1 if cut > start else end
        yield text[start:end]
        start = end


@dataclass(frozen=True)
class ModelSettings:
    """How to load a model: GPU offload (ignored by CPU-only builds) and memory mapping.

    Memory mapping is off by default: on CPU, llama.cpp repacks most quantized weights into
    a faster layout, and with mmap the original pages it read stay resident beside the copy
    (measured: 1.9 GB instead of 1.3 GB for the 1.5B target). Without it, loading reads the
    file once (about 2 s slower here) and memory holds one copy.
    """

    n_gpu_layers: int = -1
    use_mmap: bool = False
    vocab_only: bool = False  # tokenizer and metadata only: for compatibility checks
    # the NextN/MTP blocks a model may carry (llama.cpp skips them by default: weights only an
    # MTP draft context runs); see `localspec.llama.mtp`
    load_mtp: bool = False


class LlamaModel(Closing):
    """One GGUF model loaded through llama.cpp's C API."""

    def __init__(self, path: Path | str, settings: ModelSettings | None = None) -> None:
        self.path = Path(path).expanduser()
        self.settings = settings or ModelSettings()
        check_gguf(self.path)
        init_backend()
        params = lc.llama_model_default_params()
        set_fields(
            params,
            n_gpu_layers=self.settings.n_gpu_layers,
            vocab_only=self.settings.vocab_only,
            load_mtp=self.settings.load_mtp,
            load_mode=lc.LLAMA_LOAD_MODE_MMAP
            if self.settings.use_mmap
            else lc.LLAMA_LOAD_MODE_NONE,
        )
        model = lc.llama_model_load_from_file(str(self.path).encode(), params)
        if not model:
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: the architecture may be unsupported by "
                f"this llama-cpp-python build; run with --verbose to see llama.cpp's log"
            )
        self.handle = model
        vocab = lc.llama_model_get_vocab(model)
        if not vocab:
            lc.llama_model_free(model)
            raise ModelLoadError(f"{self.path} has no vocabulary; it cannot generate text")
        self.vocab = vocab
        self.n_vocab = int(lc.llama_vocab_n_tokens(vocab))
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(model))
        self.bos = int(lc.llama_vocab_bos(vocab))
        self.eos = int(lc.llama_vocab_eos(vocab))
        self.add_bos = bool(lc.llama_vocab_get_add_bos(vocab))
        self.n_layer_nextn = int(lc.llama_model_n_layer_nextn(model))  # MTP blocks (0: none)
        # a recurrent state (Mamba, RWKV; hybrids such as Qwen3.5): no suffix can be dropped
        # from the cache without snapshots (`LlamaContext(rollback=)`)
        self.recurrent = bool(lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model))
        self._pieces: dict[int, bytes] = {}

    # -- lifetime -------------------------------------------------------------------------
    def close(self) -> None:
        if self.handle is not None:
            lc.llama_model_free(self.handle)
            self.handle = None

    # -- description ----------------------------------------------------------------------
    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self.handle, buf, ctypes.sizeof(buf))
        return buf.value.decode("utf-8", "replace")

    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(4096)
        n = lc.llama_model_meta_val_str(self.handle, key.encode(), buf, ctypes.sizeof(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    @property
    def chat_template(self) -> str | None:
        raw = lc.llama_model_chat_template(self.handle, None)
        return raw.decode("utf-8", "replace") if raw else None

    # -- vocabulary -----------------------------------------------------------------------
    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = True,
        most: int | None = None,
    ) -> list[int]:
        """Tokens for `text`; `add_special` adds BOS where the model wants it. With `most`,
        a text of more tokens raises `TooManyTokensError` with their count, and no room is
        made for them (a 7 MB body's tokens were a list of 7 million ints, built to be
        refused); a text of over `PIECE_CHARS` characters is counted a piece at a time
        first, without the tokenizer's ~70 bytes a character for the whole of it."""
        if most is not None and len(text) > PIECE_CHARS:
            count, pieces = self.count_in_pieces(
                text, add_special=add_special, parse_special=parse_special
            )
            if count - pieces * PIECE_SLACK > most:
                raise TooManyTokensError(count)
        data = text.encode("utf-8")
        capacity = len(data) + 8 if most is None else min(len(data) + 8, most)
        buf = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(
            self.vocab, data, len(data), buf, capacity, add_special, parse_special
        )
        if n < 0 and most is not None:
            raise TooManyTokensError(-n)
        if n < 0:
            capacity = -n
            buf = (lc.llama_token * capacity)()
            n = lc.llama_tokenize(
                self.vocab, data, len(data), buf, capacity, add_special, parse_special
            )
        return buf[:n]

    def count_tokens(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> int:
        """How many tokens `tokenize` makes of `text`, none built."""
        data = text.encode("utf-8")
        n: int = lc.llama_tokenize(self.vocab, data, len(data), None, 0, add_special, parse_special)
        return -n if n < 0 else n

    def count_in_pieces(
        self, text: str, *, add_special: bool = True, parse_special: bool = True
    ) -> tuple[int, int]:
        """`count_tokens` of `text` a piece at a time (`text_pieces`: memory bounded whatever
        the text's size, a few tokens off where two pieces meet), and the pieces."""
        count = pieces = 0
        for piece in text_pieces(text):
            first = add_special and pieces == 0
            count += self.count_tokens(piece, add_special=first, parse_special=parse_special)
            pieces += 1
        return count, pieces

    def piece(self, token: int) -> bytes:
        """The bytes a token renders to (control tokens render as nothing); cached."""
        cached = self._pieces.get(token)
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = lc.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
            cached = buf.raw[:n]
            self._pieces[token] = cached
        return cached

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def token_text(self, token: int) -> str:
        """The vocabulary entry itself (as stored in the GGUF), for vocabulary comparison."""
        raw = lc.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def is_padding(self, token: int) -> bool:
        """An unused vocabulary entry (a "[PAD151936]" a converter added to fill the
        embedding's rows): the tokenizer never makes it and no text is written with it."""
        return bool(lc.llama_vocab_get_attr(self.vocab, token) & lc.LLAMA_TOKEN_ATTR_UNUSED)

    def is_end_of_generation(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    def special_token(self, name: str) -> int | None:
        """A FIM or other special token id by role name, None when the model has none."""
        getter = {
            "fim_prefix": lc.llama_vocab_fim_pre,
            "fim_suffix": lc.llama_vocab_fim_suf,
            "fim_middle": lc.llama_vocab_fim_mid,
            "fim_pad": lc.llama_vocab_fim_pad,
            "fim_repo": lc.llama_vocab_fim_rep,
            "fim_file_sep": lc.llama_vocab_fim_sep,
            "eot": lc.llama_vocab_eot,
        }[name]
        token = int(getter(self.vocab))
        return token if token >= 0 else None


MAX_PADDING = 128
"""How many more tokens one side of a pair may list, all padding: Qwen2.5's 7B and larger pad
their vocabulary to 152064 entries where the 0.5B-3B pad to 151936, with the same tokenizer
(llama.cpp's speculative examples and vLLM allow the same 128)."""


def ensure_same_vocabulary(target: LlamaModel, draft: LlamaModel) -> None:
    """Refuse a draft whose token ids mean something else than the target's.

    Speculation compares token ids, so every id both models have must name the same text; a
    matching size alone proves nothing (different tokenizers often share a size). One side
    may list up to `MAX_PADDING` more ids when every one of them is padding (an unused
    token): no text is ever written with them, and the draft proposer keeps to the ids both
    have (`DraftModelProposer`).
    """
    fix = (
        "use a draft model from the same family as the target (same tokenizer), "
        "e.g. Qwen2.5-Coder-0.5B for a Qwen2.5-Coder target, or run with --spec ngram"
    )
    shared = min(target.n_vocab, draft.n_vocab)
    larger = target if target.n_vocab > draft.n_vocab else draft
    sizes = (
        f"draft {draft.path.name} has {draft.n_vocab} tokens but target {target.path.name} "
        f"has {target.n_vocab}"
    )
    if larger.n_vocab - shared > MAX_PADDING:
        raise IncompatibleDraftError(f"{sizes} (at most {MAX_PADDING} padding tokens apart): {fix}")
    for token in range(shared, larger.n_vocab):
        if not larger.is_padding(token):
            raise IncompatibleDraftError(
                f"{sizes}, and token {token} ({larger.token_text(token)!r}) is not padding: {fix}"
            )
    for special in ("bos", "eos"):
        if getattr(target, special) != getattr(draft, special):
            raise IncompatibleDraftError(
                f"draft and target disagree on the {special.upper()} token id: {fix}"
            )
    for token in range(shared):
        if target.token_text(token) != draft.token_text(token):
            raise IncompatibleDraftError(
                f"draft {draft.path.name} and target {target.path.name} differ at token {token} "
                f"({draft.token_text(token)!r} vs {target.token_text(token)!r}): {fix}"
            )
