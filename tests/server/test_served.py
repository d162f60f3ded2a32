"""The line `serve` prints per answered request."""

from __future__ import annotations

from localspec.server.served import served_line
from localspec.speculative.events import Finished
from localspec.speculative.stats import GenerationStats


def finished(text: str) -> Finished:
    stats = GenerationStats(
        "auto",
        prompt_tokens=7228,
        cached_tokens=7100,
        restored_tokens=7000,
        generated_tokens=46,
        prefill_s=1.25,
        total_s=4.25,
        drafted=14,
        accepted=12,
    )
    return Finished(text, [], "stop", stats)


def test_the_prompt_reuse_speed_and_calls() -> None:
    fenced = '```json\n{"name": "Read", "arguments": {"file_path": "hello.py"}}\n```'
    line = served_line("/v1/messages", finished(fenced))
    assert line.startswith("localspec: /v1/messages: prompt 7228 tokens (128 processed, ")
    assert "7100 reused (7000 restored)) in 1.2 s" in line
    assert "46 tokens in 3.0 s" in line and "12/14 drafted accepted" in line
    assert line.endswith("1 tool call; stop")
    assert "tool call" not in served_line("/v1/messages", finished("Sunny."))
