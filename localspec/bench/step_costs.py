"""A machine's step costs for a model pair, wider than `tune` keeps, for a hardware profile.

`localspec tune --save-profile` stores what `auto` and `whatif` use (verification widths up to
the longest draft, the draft's step, tie noise). A GPU differs from a CPU in the shape of
these curves (a batch of 16 may cost what one token costs), and a lent GPU gives minutes, not
a session: so one call measures every width 1..16, the tie noise per width, the draft's step,
prompt processing at several lengths, and the time a process spends outside `llama_decode`
per decode (the Python around it), and writes them to one JSON file named by the GPU and the
model shapes. Models of the real shapes with random weights (`random_models`) cost what the
real ones cost.

    python -m localspec.bench.step_costs TARGET.gguf --draft DRAFT.gguf --out FILE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from localspec.auto_io import measure_draft, measure_tie_noise, measure_verify
from localspec.llama.backend import build_info
from localspec.llama.context import LlamaContext
from localspec.llama.devices import gpu_devices
from localspec.llama.model import LlamaModel, ModelSettings
from localspec.paths import write_private

PROMPT_SIZES = (512, 2048, 8192)
WIDTHS = 16
_HOST_STEPS = 64  # one-token decodes timed for the host share


def _tokens(context: LlamaContext, count: int, salt: int = 0) -> list[int]:
    vocab = context.model.n_vocab
    return [(1000 + 37 * i + salt) % vocab for i in range(count)]


def prompt_seconds(context: LlamaContext, size: int, repeats: int = 2) -> float:
    """Median seconds to process a new `size`-token prompt (llama.cpp's batches of n_batch)."""
    times = []
    for attempt in range(repeats + 1):
        context.truncate(0)
        started = time.perf_counter()
        context.decode(_tokens(context, size, attempt), logits="last")
        if attempt:  # the first builds the graphs
            times.append(time.perf_counter() - started)
    context.truncate(0)
    return statistics.median(times)


def host_share(context: LlamaContext, steps: int = _HOST_STEPS) -> dict[str, float]:
    """Milliseconds per one-token decode, in all and inside `llama_decode`, over `steps`
    decodes in a row as plain decoding makes them (each reads its logits row)."""
    probe = _tokens(context, 32 + steps)
    context.truncate(0)
    context.decode(probe[:32], logits="none")
    inside_before = context.timings.decode_ns
    started = time.perf_counter_ns()
    for token in probe[32:]:
        context.decode([token], logits="last")
    whole = time.perf_counter_ns() - started
    inside = context.timings.decode_ns - inside_before
    context.truncate(0)
    return {
        "step_ms": whole / steps / 1e6,
        "llama_decode_ms": inside / steps / 1e6,
        "outside_ms": (whole - inside) / steps / 1e6,
    }


def measure(target: Path, draft: Path | None, n_ctx: int, gpu_layers: int) -> dict[str, Any]:
    """Every figure of the module docstring, for one target (and draft)."""
    sizes = [s for s in PROMPT_SIZES if s < n_ctx]
    report: dict[str, Any] = {"target": target.name, "draft": draft.name if draft else None}
    with (
        LlamaModel(target, ModelSettings(n_gpu_layers=gpu_layers)) as model,
        LlamaContext(model, n_ctx) as context,
    ):
        report["verify_s"] = list(measure_verify(context, WIDTHS - 1, repeats=5))
        report["tie_noise"] = list(measure_tie_noise(context, WIDTHS - 1))
        report["host"] = host_share(context)
        report["prompt_tokens_per_s"] = {
            str(size): size / prompt_seconds(context, size) for size in sizes
        }
    if draft is not None:
        with (
            LlamaModel(draft, ModelSettings(n_gpu_layers=gpu_layers)) as model,
            LlamaContext(model, n_ctx) as context,
        ):
            report["draft_s"] = measure_draft(context)
            report["draft_host"] = host_share(context)
    one = report["verify_s"][0]
    report["verify_relative"] = [round(s / one, 3) for s in report["verify_s"]]
    return report


def machine() -> dict[str, Any]:
    info = build_info()
    return {
        "llama_cpp_python": info.llama_cpp_python,
        "gpu_offload": info.gpu_offload,
        "backend": info.system_info,
        "gpus": [d.description or d.name for d in gpu_devices()] if info.gpu_offload else [],
        "measured": time.strftime("%Y-%m-%d"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("--draft", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ctx-size", type=int, default=8192 + 512)
    parser.add_argument("--gpu-layers", type=int, default=-1)
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = {**machine(), **measure(args.target, args.draft, args.ctx_size, args.gpu_layers)}
    report["seconds"] = round(time.monotonic() - started, 1)
    report["command"] = " ".join(["python -m localspec.bench.step_costs", *sys.argv[1:]])
    write_private(args.out, json.dumps(report, indent=2) + "\n", own_folder=False)
    host = report["host"]
    print(
        f"{args.out}: one token {1000 * report['verify_s'][0]:.2f} ms, 16 tokens "
        f"{report['verify_relative'][-1]:.2f}x; outside llama_decode {host['outside_ms']:.3f} "
        f"ms per decode; prompts {report['prompt_tokens_per_s']}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
