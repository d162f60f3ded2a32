"""`localspec serve`'s generation options are the defaults of requests that leave those fields
out (a request's own fields win), `/props` shows them, and options that cannot take effect are
refused at startup with one line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import localspec.cli.serve as serve_module
from localspec.cli import main
from localspec.llama.pieces import PROMPT_HOLD_S
from localspec.server import ServeSettings
from tests.server.conftest import LOCALSPEC, Server, short_socket_dir, start_server

PROMPT = "def main():"
GREEDY_TOKENS = 24


@pytest.fixture(scope="module")
def greedy(server_env: None, tiny_target: Path) -> str:
    """The tiny target's greedy continuation of PROMPT, from a server with no defaults set."""
    probe = start_server(tiny_target, None, "--spec", "off")
    try:
        with probe.unix() as http:
            body = {"prompt": PROMPT, "n_predict": GREEDY_TOKENS, "ignore_eos": True}
            text: str = http.post("/completion", json=body).json()["content"]
    finally:
        assert probe.stop() == 0
    return text


def stop_in(text: str) -> str:
    """Two characters from the middle of `text` that a command line carries unchanged."""
    for start in range(len(text) // 3, len(text) - 2):
        candidate = text[start : start + 2]
        if candidate.isprintable() and "\\" not in candidate:
            return candidate
    raise AssertionError(f"no usable stop string in {text!r}")


@pytest.fixture(scope="module")
def configured(
    server_env: None, tiny_target: Path, tiny_draft_exact: Path, greedy: str
) -> Iterator[tuple[Server, str]]:
    stop = stop_in(greedy)
    options = ["--spec", "off", "--max-tokens", "5", "--temperature", "1.5", "--seed", "3"]
    options += ["--top-k", "40", "--top-p", "0.9", "--min-p", "0.01", "--repeat-penalty", "1.0"]
    options += ["--ignore-eos", f"--stop={stop}"]  # "=": a stop may start with "-"
    running = start_server(tiny_target, tiny_draft_exact, *options)
    yield running, stop
    assert running.stop() == 0


def post(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with server.unix() as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_props_shows_the_defaults(configured: tuple[Server, str]) -> None:
    server, stop = configured
    with server.unix() as http:
        props = http.get("/props").json()
    params = props["default_generation_settings"]["params"]
    assert params["n_predict"] == 5
    assert params["temperature"] == 1.5
    assert params["seed"] == 3
    assert (params["top_k"], params["top_p"], params["min_p"]) == (40, 0.9, 0.01)
    assert params["repeat_penalty"] == 1.0
    assert params["stop"] == [stop]
    assert params["ignore_eos"] is True
    assert params["spec"]["mode"] == "off"
    assert props["default_generation_settings"]["n_ctx"] == 4096  # --ctx-size left out
    assert props["max_body"] > 0


def test_a_request_without_fields_obeys_the_defaults(configured: tuple[Server, str]) -> None:
    server, _stop = configured
    hi = [{"role": "user", "content": "hi"}]
    plain = post(server, "/v1/chat/completions", {"messages": hi, "stop": []})
    assert plain["usage"]["completion_tokens"] == 5  # --max-tokens 5 with --ignore-eos
    assert plain["choices"][0]["finish_reason"] == "length"
    assert plain["localspec"]["mode"] == "off"
    explicit = post(
        server,
        "/v1/chat/completions",
        {"messages": hi, "stop": [], "temperature": 1.5, "seed": 3, "top_k": 40, "top_p": 0.9},
    )
    greedy = post(server, "/v1/chat/completions", {"messages": hi, "stop": [], "temperature": 0})
    text = plain["choices"][0]["message"]["content"]
    assert text == explicit["choices"][0]["message"]["content"]  # sampled, with seed 3
    assert text != greedy["choices"][0]["message"]["content"]


def test_a_request_s_own_fields_override_the_defaults(configured: tuple[Server, str]) -> None:
    server, _stop = configured
    answer = post(
        server, "/completion", {"prompt": PROMPT, "n_predict": 2, "stop": [], "temperature": 0}
    )
    assert answer["tokens_predicted"] == 2
    assert answer["localspec"]["stop"] == "length"
    chat = post(
        server,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stop": []},
    )
    assert chat["usage"]["completion_tokens"] == 3


def test_the_default_stop_applies_unless_a_request_sets_its_own(
    configured: tuple[Server, str], greedy: str
) -> None:
    server, stop = configured
    greedy_body = {"prompt": PROMPT, "n_predict": GREEDY_TOKENS, "temperature": 0}
    cut = post(server, "/completion", greedy_body)
    assert cut["content"] == greedy.split(stop, maxsplit=1)[0]
    assert cut["localspec"]["stop"] == "stop"
    whole = post(server, "/completion", {**greedy_body, "stop": []})
    assert whole["content"] == greedy


def test_a_draft_given_with_spec_off_serves_requests_that_ask_for_it(
    configured: tuple[Server, str],
) -> None:
    server, _stop = configured
    body = {"prompt": PROMPT, "n_predict": 8, "stop": [], "temperature": 0}
    answer = post(server, "/completion", {**body, "spec": {"mode": "draft", "p_min": 0.0}})
    assert answer["timings"]["draft_n"] > 0


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (["--no-socket"], "--no-socket needs --port"),
        (["--no-auth"], "--no-auth applies to TCP"),
        (["--port", "70000"], "--port must be between 0 and 65535"),
        (["--port", "0", "--no-socket", "--socket", "/tmp/ls-x.sock"], "contradict"),
        (["--prompt-hold", "2", "--parallel", "1"], "--prompt-hold needs --parallel 2 or more"),
        (["--max-tokens", "0"], "--max-tokens must be at least 1"),
        (["--temperature", "-1"], "temperature must be a finite number >= 0"),
        (["--top-p", "0"], "top_p must be in (0, 1]"),
    ],
)
def test_options_that_cannot_take_effect_are_refused_at_startup(
    server_env: None, tiny_target: Path, options: list[str], words: str
) -> None:
    socket = short_socket_dir() / "s.sock"
    command = [LOCALSPEC, "serve", "--target", str(tiny_target), "--spec", "off"]
    if "--socket" not in options:
        command += ["--socket", str(socket)]
    done = subprocess.run(
        [*command, *options], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("localspec: error: ")
    assert words in lines[0]
    assert not socket.exists()


@pytest.mark.parametrize(
    ("options", "hold"), [([], PROMPT_HOLD_S), (["--prompt-hold", "2.5"], 2.5)]
)
def test_the_prompt_hold_reaches_the_server(
    tiny_target: Path, monkeypatch: pytest.MonkeyPatch, options: list[str], hold: float
) -> None:
    """`serve --prompt-hold` is what the server's worker gets (`ServeSettings`)."""
    got: list[ServeSettings] = []
    monkeypatch.setattr(serve_module, "serve", lambda settings, *_: got.append(settings))
    argv = ["serve", "--target", str(tiny_target), "--no-socket", "--port", "0", *options]
    assert main(argv) == 0
    assert [settings.prompt_hold for settings in got] == [hold]
