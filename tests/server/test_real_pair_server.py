"""The server on the real Qwen2.5-Coder pair (marker real_model): what editors experience.

Run with `pytest -m real_model tests/server -s` to see the measured figures.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.server.conftest import Server, start_server

pytestmark = pytest.mark.real_model

# ~1,200 tokens of a Python module: an editor's FIM prefix around a cursor near its end
MODULE = "".join(
    f"def helper_{i}(values: list[int]) -> int:\n"
    f'    """Sum of the values times {i}."""\n'
    f"    total = 0\n    for value in values:\n        total += value * {i}\n    return total\n\n\n"
    for i in range(30)
)


@pytest.fixture(scope="module")
def real_server(server_env: None, pair_paths: tuple[Path, Path]) -> Iterator[Server]:
    target, draft = pair_paths
    server = start_server(target, draft, "--ctx-size", "4096", threads=None)
    yield server
    assert server.stop() == 0


def test_openai_client_streams_a_chat_answer_over_tcp(real_server: Server) -> None:
    api = openai.OpenAI(base_url=f"{real_server.url}/v1", api_key=real_server.token, max_retries=0)
    started = time.perf_counter()
    first_at = None
    pieces = []
    for chunk in api.chat.completions.create(
        model=api.models.list().data[0].id,
        messages=[{"role": "user", "content": "Write a Python one-liner that reverses a string."}],
        max_tokens=48,
        stream=True,
        stream_options={"include_usage": True},
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            first_at = first_at or time.perf_counter()
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    text = "".join(pieces)
    assert first_at is not None
    print(
        f"\nopenai stream over TCP: TTFT {first_at - started:.2f} s, "
        f"{usage.completion_tokens} tokens: {text!r}"
    )
    assert "[::-1]" in text


def test_infill_round_trip_and_warm_prefix_latency(real_server: Server) -> None:
    """The same file around the same cursor: the second request only processes what changed."""
    request = {
        "input_prefix": MODULE + "def helper_total(values: list[int]) -> int:\n    ",
        "input_suffix": "\n\n\nprint(helper_total([1, 2, 3]))\n",
        "input_extra": [{"filename": "util.py", "text": "def double(x):\n    return 2 * x\n"}],
        "prompt": "",
        "n_predict": 24,
        "spec": {"mode": "draft", "draft_max": 4},
    }
    with real_server.unix(timeout=300) as http:
        started = time.perf_counter()
        cold = http.post("/infill", json=request).json()
        cold_s = time.perf_counter() - started
        started = time.perf_counter()
        warm = http.post("/infill", json={**request, "prompt": "r"}).json()
        warm_s = time.perf_counter() - started
    for name, answer, seconds in (("cold", cold, cold_s), ("warm", warm, warm_s)):
        t = answer["timings"]
        print(
            f"\n/infill {name}: {seconds:.2f} s round trip; prompt {t['prompt_n']} new + "
            f"{t['cache_n']} cached tokens in {t['prompt_ms']:.0f} ms; {t['predicted_n']} "
            f"tokens at {t['predicted_per_second']:.1f} tok/s; draft_n {t['draft_n']}, "
            f"draft_n_accepted {t['draft_n_accepted']}; content {answer['content']!r}"
        )
    assert cold["timings"]["draft_n"] > 0
    assert cold["timings"]["draft_n_accepted"] > 0
    assert warm["timings"]["cache_n"] > 0.9 * cold["timings"]["prompt_n"]
    assert warm["timings"]["prompt_n"] < 0.1 * cold["timings"]["prompt_n"]  # counts, not ms


def test_an_editor_request_during_an_answer_runs_at_once_and_leaves_the_answer_its_own(
    real_server: Server,
) -> None:
    """A streaming answer, and an /infill sent after its first token: the infill is answered
    while the answer streams (the answer's `interruptions` counts it), and the answer's
    tokens are those it gives alone. Plain decoding from a cold cache both times (`cache_prompt`
    false), so the only difference is the interruption: its caches went to host memory and
    came back."""
    answer = {
        "prompt": MODULE + "def describe(values: list[int]) -> str:\n",
        "n_predict": 160,
        "temperature": 0.0,
        "ignore_eos": True,
        "cache_prompt": False,
        "spec": "off",
    }
    editor = {
        "input_prefix": "def mean(values):\n    ",
        "input_suffix": "\n",
        "n_predict": 8,
        "spec": "off",
    }
    with real_server.unix(timeout=600) as http:
        alone = http.post("/completion", json=answer).json()
        pieces, final = [], None
        streamed = {**answer, "stream": True}
        with (
            real_server.unix(timeout=600) as other,
            http.stream("POST", "/completion", json=streamed) as stream,
        ):
            infill = None
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[len("data: ") :])
                pieces.append(event.get("content", ""))
                if infill is None:  # the answer has begun: the editor asks now
                    infill = other.post("/infill", json=editor)
                if event.get("stop"):
                    final = event
    assert infill is not None and infill.status_code == 200, infill
    assert final is not None and final["localspec"]["interruptions"] >= 1
    assert infill.json()["id_slot"] != final["id_slot"]
    assert "".join(pieces) == alone["content"]
