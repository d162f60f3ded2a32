"""A tiny Qwen3.5 ("qwen35") GGUF with an MTP (NextN) block, for the MTP head's tests.

Qwen3.5 is the smallest architecture llama.cpp (llama-cpp-python 0.3.36) runs an MTP context
for: a dense hybrid of gated-delta-net (recurrent) and gated full-attention layers, plus one
NextN block (`blk.{n}.nextn.*`, `qwen35.nextn_predict_layers` = 1) shaped like a full-attention
layer. The trunk here is one recurrent layer and one attention layer (full_attention_interval
2: llama.cpp aborts on a qwen35 model without recurrent layers, `GGML_ASSERT(buffer)` in
ggml-backend.cpp), 64-dim, f32, with the byte-level vocabulary of `tests.tiny_models`.

A random NextN block would draft tokens the target almost never accepts. This one is built to
agree with the target, so that tests see accepted and rejected drafts alike: the recurrent
layer's outputs are zero (the trunk is its attention layer on the token embedding), token
embeddings have unit RMS rows (so the block's RMS-normalised embedding is the embedding), the
block's `eh_proj` passes the embedding through and ignores the hidden state, and its attention
and FFN weights are copies of the trunk's attention layer: at position p it computes what the
target computes there, so it predicts the target's next token from the pending token. `noise`
perturbs the copied weights (like `tests.tiny_models`' drafts) to make it agree less.
"""

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from numpy.typing import NDArray

from tests.tiny_models import (
    N_CTX_TRAIN,
    NORM_JITTER,
    OUTPUT_SCALE,
    finish_writing,
    vocabulary,
    write_vocabulary,
)

ARCH = "qwen35"
N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 64, 4, 2, 16, 128
N_TRUNK = 2  # layer 0 recurrent, layer 1 full attention
D_CONV, D_STATE, N_GROUP, DT_RANK = 4, 16, 2, 4
ROPE_SECTIONS = [3, 3, 2, 0]  # interleaved M-RoPE over n_rot / 2 = 8 pairs
_ATTENTION = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "attn_q_norm",
    "attn_k_norm",
    "post_attention_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_down",
)


@dataclass(frozen=True)
class TinyMtpSpec:
    """`mtp` False writes the same trunk without the NextN block (a model without MTP).
    `reads` "state" writes a block that reads only the hidden state it is paired with and
    passes it to the LM head unchanged (`eh_proj` = [0 | I], attention and FFN outputs zero):
    its logits are the target's at the position before, scaled (the state is RMS-normalised
    again), which shows exactly which state each token was paired with."""

    seed: int = 0
    noise: float = 0.0
    noise_seed: int = 1
    mtp: bool = True
    reads: str = "token"


def write_tiny_mtp_model(path: Path, spec: TinyMtpSpec = TinyMtpSpec()) -> Path:
    """Write the model described by `spec` to `path` and return `path`."""
    vocab = vocabulary()
    weights = _weights(spec, len(vocab[0]))
    writer = gguf.GGUFWriter(path, ARCH)
    writer.add_name(f"tiny-qwen35-mtp-seed{spec.seed}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_TRUNK + spec.mtp)
    if spec.mtp:
        writer.add_uint32(f"{ARCH}.nextn_predict_layers", 1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_array(f"{ARCH}.rope.dimension_sections", ROPE_SECTIONS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint32(f"{ARCH}.ssm.conv_kernel", D_CONV)
    writer.add_uint32(f"{ARCH}.ssm.inner_size", D_STATE * DT_RANK)
    writer.add_uint32(f"{ARCH}.ssm.state_size", D_STATE)
    writer.add_uint32(f"{ARCH}.ssm.time_step_rank", DT_RANK)
    writer.add_uint32(f"{ARCH}.ssm.group_count", N_GROUP)
    writer.add_uint32(f"{ARCH}.full_attention_interval", 2)
    write_vocabulary(writer, vocab)
    finish_writing(writer, weights)
    return path


def _weights(spec: TinyMtpSpec, n_vocab: int) -> dict[str, NDArray[np.float32]]:
    rng = np.random.default_rng(spec.seed)

    def normal(shape: tuple[int, ...], std: float) -> NDArray[np.float32]:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n: int = N_EMBD) -> NDArray[np.float32]:
        return (1.0 + NORM_JITTER * rng.standard_normal(n)).astype(np.float32)

    embd = normal((n_vocab, N_EMBD), 1.0)
    embd /= np.sqrt((embd**2).mean(axis=1, keepdims=True))  # unit RMS rows
    weights = {"token_embd.weight": embd}
    key_dim, value_dim = D_STATE * N_GROUP, D_STATE * DT_RANK
    conv_dim = 2 * key_dim + value_dim
    recurrent = "blk.0."
    weights |= {
        recurrent + "attn_norm.weight": norm(),
        recurrent + "post_attention_norm.weight": norm(),
        recurrent + "attn_qkv.weight": normal((conv_dim, N_EMBD), N_EMBD**-0.5),
        recurrent + "attn_gate.weight": normal((value_dim, N_EMBD), N_EMBD**-0.5),
        recurrent + "ssm_conv1d.weight": normal((conv_dim, D_CONV), 0.5),
        recurrent + "ssm_dt.bias": normal((DT_RANK,), 0.5),
        recurrent + "ssm_a": -np.abs(normal((DT_RANK,), 1.0)),
        recurrent + "ssm_beta.weight": normal((DT_RANK, N_EMBD), N_EMBD**-0.5),
        recurrent + "ssm_alpha.weight": normal((DT_RANK, N_EMBD), N_EMBD**-0.5),
        recurrent + "ssm_norm.weight": norm(D_STATE),
        # zero outputs: the layer runs (and rolls back) but leaves the residual as it was
        recurrent + "ssm_out.weight": np.zeros((N_EMBD, value_dim), dtype=np.float32),
        recurrent + "ffn_gate.weight": normal((N_FF, N_EMBD), N_EMBD**-0.5),
        recurrent + "ffn_up.weight": normal((N_FF, N_EMBD), N_EMBD**-0.5),
        recurrent + "ffn_down.weight": np.zeros((N_EMBD, N_FF), dtype=np.float32),
    }
    attention = {
        "attn_norm": norm(),
        "attn_q": normal((HEAD_DIM * N_HEAD * 2, N_EMBD), N_EMBD**-0.5),  # query and gate
        "attn_k": normal((HEAD_DIM * N_HEAD_KV, N_EMBD), N_EMBD**-0.5),
        "attn_v": normal((HEAD_DIM * N_HEAD_KV, N_EMBD), N_EMBD**-0.5),
        "attn_output": normal((N_EMBD, HEAD_DIM * N_HEAD), (HEAD_DIM * N_HEAD) ** -0.5),
        "attn_q_norm": norm(HEAD_DIM),
        "attn_k_norm": norm(HEAD_DIM),
        "post_attention_norm": norm(),
        "ffn_gate": normal((N_FF, N_EMBD), N_EMBD**-0.5),
        "ffn_up": normal((N_FF, N_EMBD), N_EMBD**-0.5),
        "ffn_down": normal((N_EMBD, N_FF), N_FF**-0.5),
    }
    assert tuple(attention) == _ATTENTION
    weights |= {f"blk.1.{name}.weight": tensor for name, tensor in attention.items()}
    output_norm = norm()
    weights["output_norm.weight"] = output_norm
    weights["output.weight"] = normal((n_vocab, N_EMBD), OUTPUT_SCALE * N_EMBD**-0.5)
    if spec.mtp:
        weights |= _nextn_block(attention, output_norm, spec)
    return weights


def _nextn_block(
    attention: dict[str, NDArray[np.float32]], output_norm: NDArray[np.float32], spec: TinyMtpSpec
) -> dict[str, NDArray[np.float32]]:
    """The NextN block: the trunk's attention layer again, reading the token embedding."""
    rng = np.random.default_rng(spec.noise_seed)
    block = f"blk.{N_TRUNK}."
    copied = {
        f"{block}{name}.weight": (
            tensor + spec.noise * tensor.std() * rng.standard_normal(tensor.shape)
        ).astype(np.float32)
        for name, tensor in attention.items()
    }
    # concat(enorm(embedding), hnorm(hidden)) -> embedding: the hidden state is not read
    parts = [np.eye(N_EMBD), np.zeros((N_EMBD, N_EMBD))]
    ones = np.ones(N_EMBD, dtype=np.float32)
    head_norm = output_norm
    if spec.reads == "state":  # -> the hidden state, through a block that adds nothing
        parts.reverse()
        for name in ("attn_output", "ffn_down"):
            copied[f"{block}{name}.weight"] = np.zeros_like(attention[name])
        head_norm = ones
    return copied | {
        block + "nextn.eh_proj.weight": np.concatenate(parts, axis=1).astype(np.float32),
        block + "nextn.enorm.weight": ones,
        block + "nextn.hnorm.weight": ones,
        block + "nextn.shared_head_norm.weight": head_norm,
    }
