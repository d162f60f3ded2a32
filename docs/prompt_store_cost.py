"""What putting a long prompt's state on disk costs, beside the prompt (docs/measured.md).

    python docs/prompt_store_cost.py TARGET.gguf --tokens 8192

Processes `--tokens` tokens, then 3 times: copies the state out of llama.cpp
(`LlamaContext.save_state`), saves it in a new prompt store (`PromptStore.save`: its
checksum and file), and restores it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.llama.prompt_store import PromptStore


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--tokens", type=int, default=8192)
    args = parser.parse_args()
    context = LlamaContext(LlamaModel(args.target), args.tokens + 256, n_threads=None)
    tokens = np.random.default_rng(0).integers(100, 20_000, size=args.tokens).tolist()
    started = time.perf_counter()
    context.prefill(tokens)
    print(f"{args.tokens} prompt tokens: {time.perf_counter() - started:.1f} s")
    for _ in range(3):
        started = time.perf_counter()
        state = context.save_state()
        copied = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=Path.home()) as folder:
            PromptStore(Path(folder), 2**40, min_tokens=1).save(state)
            written = time.perf_counter()
            context.restore_state(state)
            restored = time.perf_counter()
        print(
            f"state {state.size / 2**20:.0f} MiB: copy {copied - started:.2f} s, "
            f"checksum and file {written - copied:.2f} s, restore {restored - written:.2f} s"
        )


if __name__ == "__main__":
    main()
