"""Tiny llama-architecture GGUF models that the test suite writes for itself.

Each model is ~0.45 MB of f32 weights (64-dim, 2 layers, 4 heads over 2 KV heads) with a
byte-level "gpt2" vocabulary: the 256 bytes in GPT-2's byte-to-unicode spelling, so any UTF-8 text
tokenizes, a few merges (llama.cpp refuses a "gpt2" vocabulary without merges) and ChatML/FIM
control tokens. The real llama.cpp loads one in milliseconds, so tests exercise the real loading,
tokenizing and decoding paths without a download.

Weights are seeded normal draws scaled so that next-token distributions are peaked but not
one-hot. Measured with llama-cpp-python 0.3.36 along the seed-0 target's greedy continuations of
four prompts (64 tokens each): logit standard deviation 2.76 (2.47-3.09 per position); top-1
probability at temperature 1 median 0.28, 10th-90th percentile 0.15-0.52, extremes 0.09-0.93.
Seeds 1 and 2 measure alike (logit std 2.85 and 2.81, top-1 median 0.35 and 0.29). Like any
random model, greedy continuations soon fall into short loops.

A draft is the target's weights plus `noise * std(tensor) * N(0, 1)` per tensor. `noise=0` gives
bit-identical weights (a perfect draft). At `PARTIAL_DRAFT_NOISE` the draft's greedy choice, fed
the target's greedy continuation (what speculative decoding verifies), matches the target's on 65%
of the positions for seed 0 (61-73% per prompt; 80% for seed 1, 68% for seed 2). Run freely the
two continuations part within the first few tokens, often the first, and stay apart (13% of
positions equal).
"""

import shutil
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from numpy.typing import NDArray

N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX_TRAIN = 2048
HEAD_DIM = N_EMBD // N_HEAD
ROPE_FREQ_BASE = 10000.0
RMS_EPS = 1e-5

# The standard deviation of the output projection, times sqrt(N_EMBD): the hidden state leaves the
# final RMS norm with unit scale, so this is roughly the standard deviation of the logits.
OUTPUT_SCALE = 2.8
# Norm weights are 1 + NORM_JITTER * N(0, 1) so that a noisy draft perturbs them too.
NORM_JITTER = 0.1

PARTIAL_DRAFT_NOISE = 0.1
"""Noise level whose draft makes the target's greedy choice at about two thirds of positions."""

BOS_TOKEN = "<|bos|>"
EOS_TOKEN = "<|eos|>"
IM_START_TOKEN = "<|im_start|>"
IM_END_TOKEN = "<|im_end|>"
FIM_PREFIX_TOKEN = "<|fim_prefix|>"
FIM_SUFFIX_TOKEN = "<|fim_suffix|>"
FIM_MIDDLE_TOKEN = "<|fim_middle|>"
FIM_PAD_TOKEN = "<|fim_pad|>"
REPO_NAME_TOKEN = "<|repo_name|>"
FILE_SEP_TOKEN = "<|file_sep|>"
SPECIAL_TOKENS = (
    BOS_TOKEN,
    EOS_TOKEN,
    IM_START_TOKEN,
    IM_END_TOKEN,
    FIM_PREFIX_TOKEN,
    FIM_SUFFIX_TOKEN,
    FIM_MIDDLE_TOKEN,
    FIM_PAD_TOKEN,
    REPO_NAME_TOKEN,
    FILE_SEP_TOKEN,
)
_SPECIAL_ID_KEYS = {
    BOS_TOKEN: gguf.Keys.Tokenizer.BOS_ID,
    EOS_TOKEN: gguf.Keys.Tokenizer.EOS_ID,
    IM_END_TOKEN: gguf.Keys.Tokenizer.EOT_ID,
    FIM_PREFIX_TOKEN: gguf.Keys.Tokenizer.FIM_PRE_ID,
    FIM_SUFFIX_TOKEN: gguf.Keys.Tokenizer.FIM_SUF_ID,
    FIM_MIDDLE_TOKEN: gguf.Keys.Tokenizer.FIM_MID_ID,
    FIM_PAD_TOKEN: gguf.Keys.Tokenizer.FIM_PAD_ID,
    REPO_NAME_TOKEN: gguf.Keys.Tokenizer.FIM_REP_ID,
    FILE_SEP_TOKEN: gguf.Keys.Tokenizer.FIM_SEP_ID,
}

# Pairs in GPT-2's byte spelling ("Ġ" is the space); each merge's result is a vocabulary token.
_MERGES = (
    ("Ġ", "t"),
    ("h", "e"),
    ("i", "n"),
    ("e", "r"),
    ("o", "n"),
    ("Ġ", "a"),
    ("r", "e"),
    ("l", "l"),
    ("Ġ", "w"),
    ("Ġt", "he"),
)
# The "renamed" vocabulary spells one merged token differently (and its merge with it, so that
# the vocabulary stays consistent): same size, same ids, one token text differs.
_RENAMED_MERGE = {("o", "n"): ("o", "m")}

N_VOCAB = 256 + len(_MERGES) + len(SPECIAL_TOKENS)
"""Vocabulary size of the "base" and "renamed" variants; "smaller" has one token less."""

VOCAB_VARIANTS = ("base", "renamed", "smaller")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    """What to write: the weights of `seed`, perturbed by `noise` drawn from `noise_seed`, and
    the chat template (tests of a broken one write their own)."""

    seed: int = 0
    noise: float = 0.0
    noise_seed: int = 1
    vocab_variant: str = "base"
    chat_template: str = CHAT_TEMPLATE
    alignment: int | None = None  # general.alignment, absent (32) unless given
    # unused "[PAD<id>]" entries after the vocabulary, with embedding and output rows of their
    # own, as a converter pads a vocabulary to the embedding's size (Qwen2.5 7B+: 152064)
    padding: int = 0


def special_token_id(text: str) -> int:
    """The id of a special token in every vocabulary variant that has it."""
    return 256 + len(_MERGES) + SPECIAL_TOKENS.index(text)


def write_tiny_model(path: Path, spec: TinySpec = TinySpec()) -> Path:
    """Write the model described by `spec` to `path` and return `path`."""
    if spec.vocab_variant not in VOCAB_VARIANTS:
        raise ValueError(f"vocab_variant must be in {VOCAB_VARIANTS}, not {spec.vocab_variant!r}")
    if spec.noise < 0:
        raise ValueError(f"noise must be >= 0, not {spec.noise}")
    tokens, token_types, merges = vocabulary(spec.vocab_variant)
    weights = _target_weights(spec.seed)
    if spec.noise > 0:
        weights = _add_noise(weights, spec.noise, spec.noise_seed)
    if spec.padding:
        tokens, token_types, weights = _padded(tokens, token_types, weights, spec.padding)
    # A smaller vocabulary keeps the target's rows for the tokens it still has.
    for name in ("token_embd.weight", "output.weight"):
        weights[name] = weights[name][: len(tokens)]

    writer = gguf.GGUFWriter(path, "llama")
    if spec.alignment is not None:
        writer.add_custom_alignment(spec.alignment)
    writer.add_name(f"tiny-llama-seed{spec.seed}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(ROPE_FREQ_BASE)
    writer.add_layer_norm_rms_eps(RMS_EPS)
    write_vocabulary(writer, (tokens, token_types, merges), spec.chat_template)
    finish_writing(writer, weights)
    return path


def write_vocabulary(
    writer: gguf.GGUFWriter,
    vocab: tuple[list[str], list[gguf.TokenType], list[str]],
    chat_template: str = CHAT_TEMPLATE,
) -> None:
    """The tokenizer's metadata: a `vocabulary` variant, its special ids, the template."""
    tokens, token_types, merges = vocab
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    for text, key in _SPECIAL_ID_KEYS.items():
        if text in tokens:
            writer.add_uint32(key, tokens.index(text))
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(chat_template)


def finish_writing(writer: gguf.GGUFWriter, weights: dict[str, NDArray[np.float32]]) -> None:
    """Add the tensors and write the file out."""
    for name, tensor in weights.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def corrupt_copy(src: Path, dst: Path, how: str) -> Path:
    """Copy `src` to `dst` damaged in one way: "truncated", "bad_magic" or "empty"."""
    data = src.read_bytes()
    if how == "truncated":
        dst.write_bytes(data[: len(data) // 2])
    elif how == "bad_magic":
        dst.write_bytes(b"NOPE" + data[4:])
    elif how == "empty":
        dst.write_bytes(b"")
    else:
        raise ValueError(f'how must be "truncated", "bad_magic" or "empty", not {how!r}')
    return dst


# where a number sits among a header field's parts (gguf.GGUFReader's `parts`)
STRING_LENGTH = 3
ARRAY_COUNT = 4
TENSOR_DIMS, TENSOR_TYPE, TENSOR_OFFSET = 3, 4, 5


def patched_copy(
    src: Path, dst: Path, key: str, value: int, *, part: int | None = None, item: int = 0
) -> Path:
    """Copy `src` to `dst` with one number of its header overwritten in place.

    `key` names a metadata field (`llama.block_count`, `GGUF.tensor_count`) or a tensor
    (`tensor:output.weight`); `part` picks a number other than a field's value: a string's
    length, an array's count, a tensor's dimensions (`item` picks one), type or offset.
    """
    shutil.copyfile(src, dst)
    reader = gguf.GGUFReader(dst, "r+")
    if key.startswith("tensor:"):
        [tensor] = [t for t in reader.tensors if t.name == key.removeprefix("tensor:")]
        parts = tensor.field.parts
        assert part is not None, "say which number of the tensor to change"
    else:
        field = reader.fields[key]
        parts = field.parts
        part = field.data[0] if part is None else part
    parts[part][item] = value
    reader.data.flush()
    return dst


def _byte_spellings() -> list[str]:
    """GPT-2's byte-to-unicode table: printable bytes stand for themselves, the rest move up."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    spellings = []
    shifted = 0
    for byte in range(256):
        if byte in printable:
            spellings.append(chr(byte))
        else:
            spellings.append(chr(256 + shifted))
            shifted += 1
    return spellings


def vocabulary(variant: str = "base") -> tuple[list[str], list[gguf.TokenType], list[str]]:
    pairs = list(_MERGES)
    if variant == "renamed":
        pairs = [_RENAMED_MERGE.get(pair, pair) for pair in pairs]
    specials = SPECIAL_TOKENS[:-1] if variant == "smaller" else SPECIAL_TOKENS
    normal = _byte_spellings() + [left + right for left, right in pairs]
    tokens = normal + list(specials)
    token_types = [gguf.TokenType.NORMAL] * len(normal) + [gguf.TokenType.CONTROL] * len(specials)
    merges = [f"{left} {right}" for left, right in pairs]
    return tokens, token_types, merges


def _padded(
    tokens: list[str],
    token_types: list[gguf.TokenType],
    weights: dict[str, NDArray[np.float32]],
    padding: int,
) -> tuple[list[str], list[gguf.TokenType], dict[str, NDArray[np.float32]]]:
    """`padding` unused tokens appended, with rows drawn apart from the seed's weights (the
    other rows, and so every other token's logit, stay as they were)."""
    first = len(tokens)
    rng = np.random.default_rng(10_000 + padding)
    rows = {
        "token_embd.weight": 1.0,
        "output.weight": OUTPUT_SCALE * N_EMBD**-0.5,
    }
    padded = dict(weights)
    for name, std in rows.items():
        extra = (rng.standard_normal((padding, N_EMBD)) * std).astype(np.float32)
        padded[name] = np.concatenate([weights[name][:first], extra])
    names = [f"[PAD{first + i}]" for i in range(padding)]
    return tokens + names, token_types + [gguf.TokenType.UNUSED] * padding, padded


def _target_weights(seed: int) -> dict[str, NDArray[np.float32]]:
    """The weights of `seed`, numpy shapes (out, in); the order of draws is part of the seed."""
    rng = np.random.default_rng(seed)

    def normal(shape: tuple[int, ...], std: float) -> NDArray[np.float32]:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm() -> NDArray[np.float32]:
        return (1.0 + NORM_JITTER * rng.standard_normal(N_EMBD)).astype(np.float32)

    kv_dim = N_HEAD_KV * HEAD_DIM
    weights = {"token_embd.weight": normal((N_VOCAB, N_EMBD), 1.0)}
    for layer in range(N_LAYER):
        block = f"blk.{layer}."
        weights[block + "attn_norm.weight"] = norm()
        weights[block + "attn_q.weight"] = normal((N_EMBD, N_EMBD), N_EMBD**-0.5)
        weights[block + "attn_k.weight"] = normal((kv_dim, N_EMBD), N_EMBD**-0.5)
        weights[block + "attn_v.weight"] = normal((kv_dim, N_EMBD), N_EMBD**-0.5)
        weights[block + "attn_output.weight"] = normal((N_EMBD, N_EMBD), N_EMBD**-0.5)
        weights[block + "ffn_norm.weight"] = norm()
        weights[block + "ffn_gate.weight"] = normal((N_FF, N_EMBD), N_EMBD**-0.5)
        weights[block + "ffn_up.weight"] = normal((N_FF, N_EMBD), N_EMBD**-0.5)
        weights[block + "ffn_down.weight"] = normal((N_EMBD, N_FF), N_FF**-0.5)
    weights["output_norm.weight"] = norm()
    weights["output.weight"] = normal((N_VOCAB, N_EMBD), OUTPUT_SCALE * N_EMBD**-0.5)
    return weights


def _add_noise(
    weights: dict[str, NDArray[np.float32]], noise: float, noise_seed: int
) -> dict[str, NDArray[np.float32]]:
    rng = np.random.default_rng(noise_seed)
    return {
        name: (tensor + noise * tensor.std() * rng.standard_normal(tensor.shape)).astype(np.float32)
        for name, tensor in weights.items()
    }
