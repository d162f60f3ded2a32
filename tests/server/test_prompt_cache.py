"""The prompt cache through `localspec serve`: coming back to a prompt after an unrelated one
processes nothing of it again (`--cache-ram`, on by default), and `--cache-ram 0` is off."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import Server, start_server

FILE_A = "def parse(line):\n    key, value = line.split('=')\n    return key, value\n" * 3
FILE_B = "class Stack:\n    def push(self, item):\n        self.items.append(item)\n" * 3


@pytest.fixture(scope="module", params=["default", "0"])
def cache_server(
    request: pytest.FixtureRequest, server_env: None, tiny_target: Path
) -> Iterator[tuple[Server, bool]]:
    extra = () if request.param == "default" else ("--cache-ram", request.param)
    running = start_server(tiny_target, None, "--ctx-size", "1024", *extra)
    yield running, request.param == "default"
    assert running.stop() == 0


def _complete(server: Server, text: str, n_predict: int = 4) -> dict[str, Any]:
    body = {"prompt": text, "n_predict": n_predict, "temperature": 0, "spec": "off"}
    with server.unix() as http:
        response = http.post("/completion", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_coming_back_to_a_prompt_after_another(cache_server: tuple[Server, bool]) -> None:
    server, cache_on = cache_server
    _complete(server, "warm-up")  # the first request may calibrate; this one is not counted
    first = _complete(server, FILE_A)
    other = _complete(server, FILE_B)
    again = _complete(server, FILE_A)
    assert other["timings"]["cache_restored"] == 0
    assert again["content"] == first["content"]
    if cache_on:
        # all but the last prompt token, which a generation always decodes
        assert again["timings"]["prompt_n"] == 1
        assert again["timings"]["cache_restored"] == again["timings"]["cache_n"]
        assert again["localspec"]["restored_tokens"] == again["timings"]["cache_n"]
    else:
        assert again["timings"]["prompt_n"] >= first["timings"]["prompt_n"] - 1  # the BOS
        assert again["timings"]["cache_restored"] == 0


def test_a_warm_up_request_restores_too(cache_server: tuple[Server, bool]) -> None:
    """llama.vim's `n_predict: 0` requests: the saved state serves them as well."""
    server, cache_on = cache_server
    _complete(server, FILE_B + "# warm")
    _complete(server, FILE_A + "# elsewhere")
    warm = _complete(server, FILE_B + "# warm", n_predict=0)
    restored = warm["timings"]["cache_restored"]
    if cache_on:
        assert restored == warm["timings"]["cache_n"] == warm["tokens_cached"] - 1
        assert warm["timings"]["prompt_n"] == 0  # the last token stays pending, undecoded
    else:
        assert restored == 0


def test_props_show_the_prompt_cache(cache_server: tuple[Server, bool]) -> None:
    server, cache_on = cache_server
    _complete(server, FILE_A + "# one")
    _complete(server, FILE_B + "# two")
    with server.unix() as http:
        props = http.get("/props").json()
    cache = props["prompt_cache"]
    if cache_on:
        assert 0 < cache["limit_bytes"] <= 1024 * 2**20  # the default, or a quarter of RAM
        assert cache["entries"] >= 1
        assert 0 < cache["bytes"] <= cache["limit_bytes"]
    else:
        assert cache == {"limit_bytes": 0, "entries": 0, "bytes": 0}


def test_a_restarted_server_restores_a_long_prefix_from_disk(
    server_env: None, tiny_target: Path
) -> None:
    """An agent's long system prompt survives a restart: the second server processes only
    what follows it. The state files are private and stay within `--cache-disk`."""
    options = ("--ctx-size", "1024", "--cache-disk-min", "64", "--cache-disk", "1")
    prefix = FILE_A * 3
    first_server = start_server(tiny_target, None, *options)
    try:
        first = _complete(first_server, prefix + "# first question")
    finally:
        assert first_server.stop() == 0
    assert first["timings"]["prompt_n"] > 64  # the prefix was processed here
    stored = list((Path(os.environ["XDG_CACHE_HOME"]) / "localspec" / "prompts").rglob("*.kv"))
    assert len(stored) == 1
    assert stat.S_IMODE(stored[0].stat().st_mode) == 0o600
    assert stored[0].stat().st_size <= 2**20

    second_server = start_server(tiny_target, None, *options)
    try:
        second = _complete(second_server, prefix + "# second question")
    finally:
        assert second_server.stop() == 0
    timings = second["timings"]
    assert timings["cache_restored"] == timings["cache_n"] > 0
    prompt_tokens = second["localspec"]["prompt_tokens"]
    assert timings["prompt_n"] == prompt_tokens - timings["cache_n"]
    # only the differing question is processed again, not the prefix
    assert timings["prompt_n"] < 16
