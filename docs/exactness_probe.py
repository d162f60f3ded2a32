"""Which verification widths give one-token decoding's logits and cache (docs/exactness.md).

    python docs/exactness_probe.py TARGET.gguf --flash-attn on --values bf16 --prefix 1024

Decodes 16 tokens of Python after `--prefix` tokens one at a time, then again in batches of
2, 3, 4, 5, 8 and 9, and prints per width the largest logit difference of any row and
whether the cache's bytes were identical afterwards. `--keys` / `--values` set the KV cache
types, `--no-repack` loads the weights without llama.cpp's repacking (its load-time
`use_extra_bufts`); set GGML_CPU_TILED_MM=0 in the environment to turn the tiled matmul off.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

import localspec.llama.model as model_module
import localspec.llama.params as context_module
from localspec.llama import backend
from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel

TYPES = {"f16": 1, "bf16": 30}  # ggml.h
TEXT = Path(__file__).resolve().parents[1] / "localspec" / "speculative" / "engine.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("target", type=Path)
    parser.add_argument("--flash-attn", choices=("on", "off"), default="on")
    parser.add_argument("--keys", choices=TYPES, default="f16")
    parser.add_argument("--values", choices=TYPES, default="f16")
    parser.add_argument("--no-repack", action="store_true")
    parser.add_argument("--prefix", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_fields = backend.set_fields

    def model_fields(params: Any, **fields: Any) -> None:
        set_fields(params, use_extra_bufts=not args.no_repack, **fields)

    def context_fields(params: Any, **fields: Any) -> None:
        fields.update(type_k=TYPES[args.keys], type_v=TYPES[args.values])
        set_fields(params, **fields)

    model_module.set_fields = model_fields  # type: ignore[assignment]
    context_module.set_fields = context_fields  # type: ignore[assignment]
    model = LlamaModel(args.target)
    context = LlamaContext(model, 4096, n_threads=args.threads, flash_attn=args.flash_attn == "on")
    tokens = model.tokenize(TEXT.read_text() * 3)
    base, compared = args.prefix, tokens[args.prefix : args.prefix + 16]
    context.prefill(tokens[:base])
    single = [context.decode([token], logits="last")[0] for token in compared]
    reference = bytes(context.save_state().data)
    found = {}
    for width in (2, 3, 4, 5, 8, 9):
        context.truncate(base)
        rows = []
        for start in range(0, len(compared), width):
            rows.extend(context.decode(compared[start : start + width], logits="all"))
        worst = max(float(np.abs(a - b).max()) for a, b in zip(rows, single, strict=True))
        same_cache = bytes(context.save_state().data) == reference
        found[width] = {"logits": worst, "cache_equal": same_cache}
    print(json.dumps({"settings": vars(args) | {"target": str(args.target)}, "widths": found}))


if __name__ == "__main__":
    main()
