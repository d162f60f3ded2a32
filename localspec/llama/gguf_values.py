"""The hyperparameters of a GGUF header checked the way llama.cpp's loader needs them.

llama.cpp's `llama_model_base::load_hparams` (src/llama-model.cpp) stops the whole process with
`GGML_ASSERT` when the layer count is 0 or above 512, when expert counts disagree, or when the
rope scaling type is unknown; other values (a head count that does not divide the embedding
length, a vocabulary the embedding table does not match, layers declared but absent) make it
throw, which reaches us as a load failure blamed on the architecture. Each check here returns
the one bad value in words, so the caller can refuse the file in one line before llama.cpp
sees it. Architecture-specific rules stay with llama.cpp: these are the ones every
architecture's loader applies (or that apply wherever the named tensors exist).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

Value = int | float | bool | str | list[int] | None
"""A metadata value as the header walk keeps it: a scalar, a string (None when too long to
keep), an integer array (or, for other arrays, its length)."""

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
_ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")
_LAYER = re.compile(r"blk\.(\d+)\.")
_ATTENTION = re.compile(r"blk\.\d+\.attn_(q|qkv)\.weight")


@dataclass(frozen=True)
class Tensor:
    name: str
    dims: list[int]  # ggml order: dims[0] is the row length
    offset: int  # from the start of the data section
    nbytes: int


@dataclass(frozen=True)
class GGUFHeader:
    values: dict[str, Value]
    tensors: list[Tensor]
    data_end: int  # the file offset where the last tensor's data ends


def check_values(header: GGUFHeader) -> str | None:
    """What llama.cpp's loader would assert on or refuse in `header`, in words; None if
    nothing. Runs the checks in order and reports the first failure."""
    arch = header.values.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        return "has no general.architecture"
    checks: tuple[Callable[[GGUFHeader, str], str | None], ...] = (
        _required,
        _layers,
        _experts,
        _heads,
        _rope_scaling,
        _vocabulary,
    )
    for check in checks:
        problem = check(header, arch)
        if problem is not None:
            return problem
    return None


def _integer(header: GGUFHeader, key: str) -> int | None:
    value = header.values.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _required(header: GGUFHeader, arch: str) -> str | None:
    for name in ("context_length", "embedding_length", "block_count"):
        key = f"{arch}.{name}"
        if key not in header.values:
            return f"has no {key}"
        if _integer(header, key) is None:
            return f"has {key} = {header.values[key]!r}, not an integer"
    embedding = _integer(header, f"{arch}.embedding_length")
    if embedding is not None and embedding <= 0:
        return f"has {arch}.embedding_length = {embedding} (it must be above 0)"
    return None


def _layers(header: GGUFHeader, arch: str) -> str | None:
    """The layer count in 1..512 (asserted), the `blk.N` tensors exactly layers 0..N-1."""
    key = f"{arch}.block_count"
    count = _integer(header, key) or 0
    if not 0 < count <= MAX_LAYERS:
        return f"has {key} = {count} (llama.cpp loads 1 to {MAX_LAYERS} layers)"
    present = {int(m.group(1)) for t in header.tensors if (m := _LAYER.match(t.name))}
    if present and present != set(range(count)):
        missing = sorted(set(range(count)) - present)
        if missing:
            return f"has {key} = {count} but no tensors for layer {missing[0]}"
        return f"has {key} = {count} but tensors for layer {max(present)}"
    nextn = _integer(header, f"{arch}.nextn_predict_layers") or 0
    if nextn > count:
        return f"has {arch}.nextn_predict_layers = {nextn}, more than its {count} layers"
    return None


def _experts(header: GGUFHeader, arch: str) -> str | None:
    """Expert counts as llama.cpp asserts them: at most 1024, used > 0 exactly when any."""
    experts = _integer(header, f"{arch}.expert_count") or 0
    used_value = header.values.get(f"{arch}.expert_used_count", 0)
    used = max(used_value) if isinstance(used_value, list) and used_value else used_value
    if not isinstance(used, int):
        return None
    if experts > MAX_EXPERTS:
        return f"has {arch}.expert_count = {experts} (at most {MAX_EXPERTS})"
    if used > experts or (experts > 0 and used == 0):
        return f"has {arch}.expert_used_count = {used} with {arch}.expert_count = {experts}"
    return None


def _per_layer(header: GGUFHeader, arch: str, name: str) -> list[int] | str | None:
    """A per-layer value (one number or an array of one per layer), or what is wrong with it."""
    key = f"{arch}.{name}"
    value = header.values.get(key)
    if value is None:
        return None
    count = _integer(header, f"{arch}.block_count") or 0
    if isinstance(value, list):
        if len(value) != count:
            return f"has {len(value)} values in {key} for {count} layers"
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return [value] * count
    return f"has {key} = {value!r}, not a count"


def _heads(header: GGUFHeader, arch: str) -> str | None:
    """Attention head counts, where the model has attention: above 0, the KV heads dividing
    the heads, the heads dividing the embedding unless the head size is given."""
    heads = _per_layer(header, arch, "attention.head_count")
    kv_heads = _per_layer(header, arch, "attention.head_count_kv")
    for problem in (heads, kv_heads):
        if isinstance(problem, str):
            return problem
    if not isinstance(heads, list) or not any(_ATTENTION.match(t.name) for t in header.tensors):
        return None
    if min(heads) <= 0:
        return f"has {arch}.attention.head_count = {min(heads)} (it must be above 0)"
    embedding = _integer(header, f"{arch}.embedding_length") or 0
    sized = f"{arch}.attention.key_length" in header.values
    if not sized and embedding % max(heads):
        return (
            f"has {arch}.embedding_length = {embedding}, not a multiple of "
            f"{arch}.attention.head_count = {max(heads)}"
        )
    if isinstance(kv_heads, list):
        for head, kv in zip(heads, kv_heads, strict=True):
            if kv <= 0 or head % kv:
                return (
                    f"has {arch}.attention.head_count_kv = {kv} with {arch}.attention."
                    f"head_count = {head} (it must be above 0 and divide it)"
                )
    return None


def _rope_scaling(header: GGUFHeader, arch: str) -> str | None:
    key = f"{arch}.rope.scaling.type"
    scaling = header.values.get(key, "linear")
    if scaling not in _ROPE_SCALING_TYPES:
        return f"has {key} = {scaling!r} (llama.cpp knows {', '.join(_ROPE_SCALING_TYPES)})"
    return None


def _vocabulary(header: GGUFHeader, arch: str) -> str | None:
    """The token list, the embedding table and the output matrix agree on the vocabulary
    size and the embedding length (llama.cpp checks each tensor's shape as it loads it)."""
    tokens = header.values.get("tokenizer.ggml.tokens")
    embedding = _integer(header, f"{arch}.embedding_length")
    for tensor in header.tensors:
        if tensor.name not in ("token_embd.weight", "output.weight") or len(tensor.dims) != 2:
            continue
        width, rows = tensor.dims
        if isinstance(tokens, int) and rows != tokens:
            return f"has {tensor.name} with {rows} rows for a vocabulary of {tokens} tokens"
        if embedding is not None and width != embedding:
            return (
                f"has {tensor.name} with rows of {width} values but {arch}.embedding_length "
                f"= {embedding}"
            )
    return None
