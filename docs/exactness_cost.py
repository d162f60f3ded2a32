"""What the KV cache types that make verification widths exact cost (docs/exactness.md).

    python docs/exactness_cost.py TARGET.gguf --rounds 3

For llama.cpp's f16/f16 cache, f16 keys with bf16 values, bf16 keys with f16 values, and f16/bf16
with the weights not repacked, in interleaved rounds in one process: the mean negative log
likelihood of 1,024 tokens of localspec's own code, the median one-token decode and 3-token
verification at 1,024 tokens of context, and prompt processing of 2,048 tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

import localspec.llama.model as model_module
import localspec.llama.params as context_module
from localspec.llama import backend
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel

ROOT = Path(__file__).resolve().parents[1] / "localspec"
SOURCES = ("speculative/engine.py", "server/worker.py", "llama/context.py")
F16, BF16 = 1, 30  # ggml.h
CONFIGS = {  # name: (repacked weights, key type, value type)
    "f16/f16": (True, F16, F16),
    "f16/bf16": (True, F16, BF16),
    "bf16/f16": (True, BF16, F16),
    "f16/bf16, not repacked": (False, F16, BF16),
}


def nll(context: LlamaContext, tokens: list[int]) -> float:
    rows = context.decode(tokens[:1025], logits="all").astype(np.float64)
    top = rows.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
    picked = rows[np.arange(1024), tokens[1:1025]]
    context.truncate(0)
    return float(np.mean(log_z[:1024] - picked))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    set_fields = backend.set_fields
    chosen: dict[str, Any] = {}

    def model_fields(params: Any, **fields: Any) -> None:
        set_fields(params, use_extra_bufts=chosen["repack"], **fields)

    def context_fields(params: Any, **fields: Any) -> None:
        set_fields(params, type_k=chosen["keys"], type_v=chosen["values"], **fields)

    model_module.set_fields = model_fields  # type: ignore[assignment]
    context_module.set_fields = context_fields  # type: ignore[assignment]
    models = {}
    for repack in (True, False):
        chosen["repack"] = repack
        models[repack] = LlamaModel(args.target)
    tokens = models[True].tokenize("".join((ROOT / name).read_text() for name in SOURCES))
    found: dict[str, dict[str, Any]] = {
        name: {"decode": [], "verify3": [], "prompt_tok_s": []} for name in CONFIGS
    }
    for _ in range(args.rounds):
        for name, (repack, keys, values) in CONFIGS.items():
            chosen.update(keys=keys, values=values)
            with LlamaContext(models[repack], 4096, n_threads=2, flash_attn=True) as context:
                found[name].setdefault("nll", nll(context, tokens))
                started = time.perf_counter()
                context.prefill(tokens[:2048])
                found[name]["prompt_tok_s"].append(2048 / (time.perf_counter() - started))
                context.truncate(1024)
                for token in tokens[1024:1048]:
                    started = time.perf_counter()
                    context.decode([token], logits="last")
                    found[name]["decode"].append(time.perf_counter() - started)
                for _ in range(12):
                    context.truncate(1024)
                    started = time.perf_counter()
                    context.decode(tokens[1024:1027], logits="all")
                    found[name]["verify3"].append(time.perf_counter() - started)
    report = {
        name: {
            "nll": round(d["nll"], 5),
            "decode_ms": round(1000 * statistics.median(d["decode"]), 2),
            "verify3_ms": round(1000 * statistics.median(d["verify3"]), 2),
            "prompt_tok_s": [round(x, 1) for x in d["prompt_tok_s"]],
        }
        for name, d in found.items()
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
