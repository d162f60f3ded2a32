"""`n_cache_reuse`, `cache_prompt` and `t_max_prompt_ms` on /completion and /infill, over a
real socket to a real `localspec serve` on the tiny model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from localspec.llama.prefill import MIN_SUB_BATCH
from tests.server.conftest import Server, start_server


@pytest.fixture(scope="module")
def plain(server_env: None, tiny_target: Path) -> Iterator[Server]:
    """The default --cache-reuse (256), no speculation: only the prompt's fate is looked at;
    no prompt cache, whose saved states would serve some prompts (tests/server/
    test_prompt_cache.py)."""
    running = start_server(
        tiny_target, None, "--ctx-size", "2048", "--spec", "off", "--cache-ram", "0"
    )
    yield running
    assert running.stop() == 0


# a prompt no machine processes in 1 ms, even on the tiny model: that would be 1.9 million
# tokens a second, where llama.cpp's CPU backend does tens of thousands
FORCES_A_CUT = 1900


def _tokens(seed: int, n: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(20, 250, n)]


PREFIX, GAP, CHUNK = _tokens(1, 12), _tokens(2, 40), _tokens(3, 300)


def _post(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with server.unix() as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def _moved(server: Server, tail_seed: int, **fields: Any) -> dict[str, Any]:
    """Cache prefix + gap + chunk (a warm-up leaves its last token pending), then ask for
    prefix + chunk + a new tail."""
    _post(server, "/completion", {"prompt": [*PREFIX, *GAP, *CHUNK, 7], "n_predict": 0})
    prompt = PREFIX + CHUNK + _tokens(tail_seed, 5)
    return _post(server, "/completion", {"prompt": prompt, "n_predict": 2, **fields})


def test_a_moved_chunk_is_shifted_by_default(plain: Server) -> None:
    timings = _moved(plain, 10)["timings"]
    assert timings["cache_n"] == len(PREFIX) + len(CHUNK)
    assert timings["cache_shifted"] == len(CHUNK)
    assert timings["prompt_n"] == 5  # the new tail only


def test_n_cache_reuse_0_or_above_the_chunk_recomputes_it(plain: Server) -> None:
    for tail_seed, reuse in ((11, 0), (12, len(CHUNK) + 1)):
        # a new tail each time: the tokens the warm-up parks hold the chunk with the last
        # tail, which would be one run longer than the chunk alone
        answer = _moved(plain, tail_seed, n_cache_reuse=reuse)
        assert answer["timings"]["cache_n"] == len(PREFIX)
        assert answer["localspec"]["shifted_tokens"] == 0
        assert answer["timings"]["prompt_n"] == len(CHUNK) + 5


def test_cache_prompt_false_processes_everything(plain: Server) -> None:
    prompt = PREFIX + CHUNK
    _post(plain, "/completion", {"prompt": prompt, "n_predict": 0})
    answer = _post(plain, "/completion", {"prompt": prompt, "n_predict": 1, "cache_prompt": False})
    assert answer["timings"]["cache_n"] == 0 and answer["timings"]["prompt_n"] == len(prompt)
    warm = {"prompt": prompt, "n_predict": 0, "cache_prompt": False}
    assert _post(plain, "/completion", warm)["timings"]["cache_n"] == 0


def test_a_warm_up_shifts_too(plain: Server) -> None:
    _post(plain, "/completion", {"prompt": [*PREFIX, *GAP, *CHUNK, 7], "n_predict": 0})
    warm = _post(plain, "/completion", {"prompt": [*PREFIX, *CHUNK, 9], "n_predict": 0})
    assert warm["timings"]["cache_n"] == len(PREFIX) + len(CHUNK)
    assert warm["timings"]["cache_shifted"] == len(CHUNK)
    assert warm["localspec"] == {
        "cached_tokens": len(PREFIX) + len(CHUNK),
        "shifted_tokens": len(CHUNK),
        "restored_tokens": 0,
        "prompt_cut": False,
        "prompt_unprocessed": 0,
    }


def test_props_say_the_reuse_and_whether_the_cache_shifts(plain: Server) -> None:
    with plain.unix() as http:
        props = http.get("/props").json()
    assert props["n_cache_reuse"] == 256 and props["cache_shift"] is True
    # --flash-attn auto at a 2048-token context: llama.cpp's choice, also on a CPU
    assert props["flash_attn"] == "auto"


@pytest.mark.parametrize("n_predict", [0, 4])
def test_a_1_ms_budget_cuts_the_prompt_and_later_requests_finish_it(
    plain: Server, n_predict: int
) -> None:
    """The first answer is cut: its prompt (FORCES_A_CUT tokens) takes far longer than 1 ms
    on any machine. Every answer makes at least one sub-batch of progress with counts that
    add up, and the prompt is processed in full within as many requests as it has
    sub-batches. Between requests the server goes on with the cut prompt while idle, so
    each request finds at least what the ones before it processed (a later request may
    then finish it uncut)."""
    prompt = _tokens(20 + n_predict, FORCES_A_CUT)
    body = {"prompt": prompt, "n_predict": n_predict, "t_max_prompt_ms": 1, "ignore_eos": True}
    _post(plain, "/completion", {"prompt": [5], "n_predict": 0})  # nothing of it cached
    cached = 0
    # a warm-up leaves the last token pending: the next request decodes and counts it
    pending = 1 if n_predict == 0 else 0
    for request in range(len(prompt) // MIN_SUB_BATCH + 1):
        answer = _post(plain, "/completion", body)
        timings, ours = answer["timings"], answer["localspec"]
        assert ours["prompt_cut"] or request > 0, "the 1 ms budget did not cut the prompt"
        assert timings["cache_n"] >= cached  # what the requests before (and idle) processed
        left = ours["prompt_unprocessed"]
        to_do = len(prompt) - pending - timings["cache_n"]
        assert timings["prompt_n"] >= min(MIN_SUB_BATCH, to_do)
        if ours["prompt_cut"]:
            assert left > 0 and answer["content"] == "" and answer["stop_type"] == "limit"
            assert timings["cache_n"] + timings["prompt_n"] + left == len(prompt)
            assert answer["tokens_cached"] == len(prompt) - left
            cached = timings["cache_n"] + timings["prompt_n"]
            continue
        assert left == 0 and timings["cache_n"] + timings["prompt_n"] == len(prompt) - pending
        if n_predict:
            assert answer["tokens_predicted"] == n_predict and answer["stop_type"] == "limit"
            assert ours["stop"] == "length"
        return
    pytest.fail("the budget never let the prompt finish")


def test_a_cut_prompt_is_processed_on_while_the_server_is_idle(plain: Server) -> None:
    """llama.vim's ring warm-ups send a 1 ms budget: the answer comes at once, and the rest
    of the prompt is processed while no request waits, ready for the next completion."""
    prompt = _tokens(31, FORCES_A_CUT)
    _post(plain, "/completion", {"prompt": [5], "n_predict": 0})  # nothing of it cached
    with plain.unix() as http:
        idle_before = http.get("/health").json()["idle_prompt_tokens"]
    answer = _post(plain, "/completion", {"prompt": prompt, "n_predict": 0, "t_max_prompt_ms": 1})
    left = answer["localspec"]["prompt_unprocessed"]
    assert answer["localspec"]["prompt_cut"] and left > 0, "the 1 ms budget did not cut it"
    deadline = time.monotonic() + 120.0  # a hang guard only
    while True:
        with plain.unix() as http:
            health = http.get("/health").json()
        if health["idle_prompt_tokens"] - idle_before >= left - 1 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert health["idle_prompt_tokens"] - idle_before == left - 1  # all but the pending one
    again = _post(plain, "/completion", {"prompt": prompt, "n_predict": 0})
    assert again["timings"]["cache_n"] == len(prompt) - 1


@pytest.mark.parametrize("path", ["/completion", "/infill"])
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n_cache_reuse", -1),
        ("n_cache_reuse", "256"),
        ("n_cache_reuse", True),
        ("n_cache_reuse", 2.5),
        ("cache_prompt", "yes"),
        ("cache_prompt", 1),
        ("t_max_prompt_ms", -5),
        ("t_max_prompt_ms", "500"),
        ("t_max_prompt_ms", [1]),
    ],
)
def test_bad_reuse_fields_are_a_400_naming_them(
    plain: Server, path: str, field: str, value: object
) -> None:
    body: dict[str, Any] = {"prompt": "x = ", "input_prefix": "a", "input_suffix": "b"}
    for n_predict in (0, 2):
        with plain.unix() as http:
            response = http.post(path, json={**body, "n_predict": n_predict, field: value})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == field


def test_cache_reuse_0_keeps_the_prefix_only_unless_a_request_asks(
    server_env: None, tiny_target: Path
) -> None:
    server = start_server(
        tiny_target, None, "--ctx-size", "2048", "--spec", "off", "--cache-reuse", "0"
    )
    try:
        with server.unix() as http:
            assert http.get("/props").json()["n_cache_reuse"] == 0
        assert _moved(server, 12)["timings"]["cache_n"] == len(PREFIX)
        asked = _moved(server, 13, n_cache_reuse=256)["timings"]
        assert asked["cache_n"] == len(PREFIX) + len(CHUNK)
    finally:
        assert server.stop() == 0


def test_the_openai_completions_honour_cache_prompt_and_n_cache_reuse(plain: Server) -> None:
    _post(plain, "/completion", {"prompt": [*PREFIX, *GAP, *CHUNK, 7], "n_predict": 0})
    body = {"prompt": [*PREFIX, *CHUNK, 8, 9], "max_tokens": 1}
    assert _post(plain, "/v1/completions", body)["timings"]["cache_shifted"] == len(CHUNK)
    fresh = _post(plain, "/v1/completions", {**body, "cache_prompt": False})
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    with plain.unix() as http:
        bad = http.post("/v1/completions", json={**body, "n_cache_reuse": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "n_cache_reuse"


def test_the_window_a_ring_warm_up_displaces_is_taken_back(plain: Server) -> None:
    """llama.vim's ring: a chunk enters and its warm-up (empty windows) puts it where the
    cache held the window around the cursor. The window is parked, not dropped, and the
    next completion takes it back from behind the new chunk instead of processing it."""
    window = "".join(f"    total = total + values[{n}] * {n}\n" for n in range(16))
    ring = [{"filename": "a.py", "text": "def mean(values):\n    return sum(values)\n"}]
    entered = [*ring, {"filename": "b.py", "text": "def spread(v):\n    return max(v)\n"}]
    fim = {"input_prefix": window, "input_suffix": "\n    return total\n", "prompt": ""}
    first = _post(plain, "/infill", {**fim, "input_extra": ring, "n_predict": 2})
    assert first["timings"]["prompt_n"] > len(window) // 2  # tiny vocabulary: ~a token a byte
    warm_up = {"input_prefix": "", "input_suffix": "", "prompt": "", "n_predict": 0}
    _post(plain, "/infill", {**warm_up, "input_extra": entered})
    with plain.unix() as http:
        health = http.get("/health").json()
    assert health["parked_tokens"] > len(window) // 2 and health["parked_bytes"] > 0
    second = _post(plain, "/infill", {**fim, "input_extra": entered, "n_predict": 2})
    timings = second["timings"]
    assert timings["cache_shifted"] > len(window) // 2
    assert timings["prompt_n"] < 16  # the few tokens between the new chunk and the window
