"""One line per answered request on the server's stderr, as llama-server prints its timings.

An agent's first request can take minutes on a CPU; the line says where the time went (the
prompt: how much was processed, reused, restored from disk) and what came back (tokens,
speed, speculation, tool calls), so a user sees that a slow turn is the prompt, not a hang.
"""

from __future__ import annotations

from localspec.speculative.events import Finished
from localspec.tools.calls import parse


def served_line(path: str, event: Finished) -> str:
    stats = event.stats
    processed = stats.prompt_tokens - stats.cached_tokens - stats.prompt_unprocessed
    reused = f", {stats.cached_tokens} reused" if stats.cached_tokens else ""
    restored = f" ({stats.restored_tokens} restored)" if stats.restored_tokens else ""
    drafted = f", {stats.accepted}/{stats.drafted} drafted accepted" if stats.drafted else ""
    calls = len(parse(event.text).calls)  # as every API reads them (markup, bare or fenced)
    called = f", {calls} tool call{'s' * (calls != 1)}" if calls else ""
    return (
        f"localspec: {path}: prompt {stats.prompt_tokens} tokens ({processed} processed"
        f"{reused}{restored}) in {stats.prefill_s:.1f} s; {stats.generated_tokens} tokens in "
        f"{stats.generation_s:.1f} s ({stats.tokens_per_second:.1f} tok/s{drafted}){called}; "
        f"{event.finish_reason}"
    )
