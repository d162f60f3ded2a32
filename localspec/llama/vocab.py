"""A model's whole vocabulary as bytes, for the constraint library's token tables.

llguidance matches grammars against the bytes each token stands for. Special tokens are told
apart by a leading 0xFF byte (never valid in UTF-8), as llguidance's own llama.cpp adapter
does: control tokens, and user-defined ones that look like `<...>` (Qwen's `<tool_call>`),
so a grammar allows them only where it names them as special tokens.
"""

from __future__ import annotations

import ctypes

import llama_cpp.llama_cpp as lc

from localspec.llama.model import LlamaModel

SPECIAL_MARKER = b"\xff"
_PIECE_CAPACITY = 16 * 1024


def token_bytes(model: LlamaModel) -> list[bytes]:
    """Every token's bytes, special tokens rendered (`<|im_end|>`) and marked."""
    buf = ctypes.create_string_buffer(_PIECE_CAPACITY)
    table: list[bytes] = []
    for token in range(model.n_vocab):
        n = lc.llama_token_to_piece(model.vocab, token, buf, _PIECE_CAPACITY, 0, True)
        piece = buf.raw[: max(n, 0)]
        attr = int(lc.llama_vocab_get_attr(model.vocab, token))
        looks_special = piece.startswith(b"<") and piece.endswith(b">")
        if attr & lc.LLAMA_TOKEN_ATTR_CONTROL or (
            attr & lc.LLAMA_TOKEN_ATTR_USER_DEFINED and looks_special
        ):
            piece = SPECIAL_MARKER + piece
        table.append(piece)
    return table


def end_of_generation_tokens(model: LlamaModel) -> list[int]:
    """The tokens that end a generation (EOS, EOT, ...), the model's EOS first."""
    ends = [t for t in range(model.n_vocab) if model.is_end_of_generation(t)]
    return sorted(ends, key=lambda t: t != model.eos)


def tokenize_bytes(model: LlamaModel, data: bytes) -> list[int]:
    """Tokens for raw bytes, without BOS and without parsing special tokens."""
    capacity = len(data) + 8
    for _ in range(2):
        buf = (lc.llama_token * capacity)()
        n = lc.llama_tokenize(model.vocab, data, len(data), buf, capacity, False, False)
        if n >= 0:
            return list(buf[:n])
        capacity = -n
    raise RuntimeError(f"llama_tokenize wanted {capacity} tokens after being given them")
