"""GGUF models of the real pair's shapes with random weights, for measuring step costs.

What a decode costs depends on the model's shapes and quantization, not on its weights, so a
machine that cannot fetch the real pair (a lent GPU has no network, and 1.5 GB does not travel
in its 64 MiB) can still measure what speculation would cost there: one-token decodes,
verification widths, the draft's step, prompt processing. Weights are written as F16 from one
block of random numbers tiled over each tensor (drawing 7.6e9 numbers would take longer than
the measuring), then quantized by llama.cpp's own quantizer to the real files' Q4_K_M.

The vocabulary has the real size, with byte tokens, Qwen's special tokens and filler tokens
that never match text: prompts tokenize into bytes, which is all a cost measurement needs.
What such a model generates means nothing; acceptance must come from the real pair's traces.

    python -m localspec.bench.random_models 1.5b OUT.gguf [--threads N]
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class Shape:
    """A Qwen2.5(-Coder) model's dimensions, from its config.json."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied_output: bool  # the output projection is the token embedding (no output.weight)


SHAPES = {
    "0.5b": Shape(896, 24, 14, 2, 4864, 151936, tied_output=True),
    "1.5b": Shape(1536, 28, 12, 2, 8960, 151936, tied_output=True),
    "7b": Shape(3584, 28, 28, 4, 18944, 152064, tied_output=False),
    # a few megabytes, for trying the steps that write and measure on any machine
    "mini": Shape(64, 2, 4, 2, 128, 1024, tied_output=True),
}
SPECIAL = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_BLOCK = 1 << 22  # random numbers drawn once and tiled: 4M values (8 MiB in F16)


def _byte_spellings() -> list[str]:
    """GPT-2's byte-to-unicode table, which llama.cpp's BPE expects of byte tokens."""
    printable = {*range(33, 127), *range(161, 173), *range(174, 256)}
    shifted = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(shifted)) for b in range(256)]


def vocabulary(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """Bytes, filler, then Qwen's special tokens last, as in the real files' order of kinds."""
    tokens = _byte_spellings()
    merges = [f"{tokens[a]} {tokens[b]}" for a, b in ((ord("e"), ord("r")), (ord("i"), ord("n")))]
    tokens += [tokens[ord("e")] + tokens[ord("r")], tokens[ord("i")] + tokens[ord("n")]]
    fill = n_vocab - len(tokens) - len(SPECIAL)
    tokens += [f"[filler{i}]" for i in range(fill)] + SPECIAL
    types = [gguf.TokenType.NORMAL] * (n_vocab - len(SPECIAL)) + [gguf.TokenType.CONTROL] * len(
        SPECIAL
    )
    return tokens, [int(t) for t in types], merges


def tensor_shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and numpy shape (rows, columns), as llama.cpp's qwen2 loader wants."""
    head = shape.n_embd // shape.n_head
    kv = head * shape.n_head_kv
    e, f = shape.n_embd, shape.n_ff
    names: dict[str, tuple[int, ...]] = {
        "token_embd.weight": (shape.n_vocab, e),
        "output_norm.weight": (e,),
    }
    if not shape.tied_output:
        names["output.weight"] = (shape.n_vocab, e)
    for i in range(shape.n_layer):
        b = f"blk.{i}"
        names.update(
            {
                f"{b}.attn_norm.weight": (e,),
                f"{b}.ffn_norm.weight": (e,),
                f"{b}.attn_q.weight": (e, e),
                f"{b}.attn_q.bias": (e,),
                f"{b}.attn_k.weight": (kv, e),
                f"{b}.attn_k.bias": (kv,),
                f"{b}.attn_v.weight": (kv, e),
                f"{b}.attn_v.bias": (kv,),
                f"{b}.attn_output.weight": (e, e),
                f"{b}.ffn_gate.weight": (f, e),
                f"{b}.ffn_up.weight": (f, e),
                f"{b}.ffn_down.weight": (e, f),
            }
        )
    return names


def tiled(shape: tuple[int, ...], block: NDArray[np.float16], offset: int) -> NDArray[Any]:
    if len(shape) == 1:  # norms 1, biases 0: keeps the activations in range
        return np.zeros(shape, np.float32) if offset % 2 else np.ones(shape, np.float32)
    size = int(np.prod(shape))
    start = offset % len(block)
    return np.resize(np.roll(block, -start), size).reshape(shape)


def write_f16(path: Path, shape: Shape, seed: int = 0) -> Path:
    """An F16 (norms F32) qwen2 GGUF of `shape` with random weights (std 0.02)."""
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(_BLOCK, np.float32) * 0.02).astype(np.float16)
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name(f"random-qwen2-{shape.n_embd}x{shape.n_layer}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(32768)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    tokens, types, merges = vocabulary(shape.n_vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    for key, text in (
        ("eos", "<|im_end|>"),
        ("padding", "<|endoftext|>"),
        ("bos", "<|endoftext|>"),
    ):
        writer.add_uint32(f"tokenizer.ggml.{key}_token_id", tokens.index(text))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for i, (name, dims) in enumerate(tensor_shapes(shape).items()):
        writer.add_tensor(name, tiled(dims, block, i * 7919 + (name.endswith("bias"))))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize(source: Path, target: Path, ftype: int, threads: int) -> Path:
    """llama.cpp's quantizer (`llama_model_quantize`), as llama-quantize runs it."""
    import llama_cpp  # noqa: PLC0415  (the writer above needs no llama.cpp)

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = threads
    failed = llama_cpp.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if failed:
        raise RuntimeError(f"llama_model_quantize failed ({failed}) on {source}")
    return target


def write_random_model(path: Path, name: str, threads: int, keep_f16: bool = False) -> Path:
    """`path`: a Q4_K_M model of shape `name`, by way of an F16 file beside it."""
    f16 = path.with_suffix(".f16.gguf")
    write_f16(f16, SHAPES[name])
    quantize(f16, path, 15, threads)  # LLAMA_FTYPE_MOSTLY_Q4_K_M, the real files' type
    if not keep_f16:
        f16.unlink()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("out", type=Path)
    parser.add_argument("--threads", type=int, default=0, help="quantizer threads (0: all)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    write_random_model(args.out, args.shape, args.threads)
    size = args.out.stat().st_size / 2**20
    print(
        f"{args.out}: {args.shape} shape, Q4_K_M, {size:.0f} MiB in "
        f"{time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
