"""`localspec.remote` against a real `localspec serve` on the tiny models: the engine's
events come back as they were (localspec), or as a llama-server's or any OpenAI server's
would be read (the same server told to be taken for one); closing the stream cancels."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import (
    UNREPORTED,
    ChatRequest,
    Finished,
    GenerationRequest,
    Message,
    RemoteServer,
    RemoteSettings,
    Runtime,
    RuntimeSettings,
    SamplingSettings,
    ServerKind,
    SpecMode,
    SpecSettings,
    TextChunk,
)
from localspec.client import ServerAddress, ServerAuthError, ServerUnavailableError, parse_address
from localspec.errors import UsageError
from localspec.remote import Requirement, wire_body
from tests.server.conftest import Server, server_env, start_server, wait_until_idle

__all__ = ["server_env"]  # the module-scoped user folders the server below runs in

HI = [Message("system", "Be brief."), Message("user", "Write a function that adds numbers")]
DRAFT = SpecSettings(mode=SpecMode.DRAFT, draft_max=3)
GREEDY = SamplingSettings()


@pytest.fixture(scope="module")
def served(server_env: None, tiny_target: Path, tiny_draft_exact: Path) -> Iterator[Server]:
    # its own speculation is the requests': llama-server's is set when it starts too
    running = start_server(
        tiny_target, tiny_draft_exact, "--ctx-size", "1024", "--spec", "draft", "--draft-max", "3"
    )
    yield running
    assert running.stop() == 0


def remote(server: Server, kind: ServerKind | None = None, **settings: object) -> RemoteServer:
    address = ServerAddress(url=server.url, token=server.token)
    return RemoteServer(RemoteSettings(address, kind, **settings))  # type: ignore[arg-type]


def answer(server: RemoteServer, request: ChatRequest) -> tuple[list[TextChunk], Finished]:
    events = list(server.chat(request))
    *chunks, last = events
    assert isinstance(last, Finished)
    assert all(isinstance(c, TextChunk) for c in chunks)
    return chunks, last  # type: ignore[return-value]


def cancelled(server: Server) -> int:
    wait_until_idle(server, timeout=60)
    with server.unix() as http:
        count: int = http.get("/health").json()["cancelled"]
    return count


def test_a_localspec_server_gives_back_the_engine_events(
    served: Server, tiny_target: Path, tiny_draft_exact: Path
) -> None:
    """The chunks are the server's engine steps: the same text, tokens, spans and figures as
    the same request in-process."""
    server = remote(served)
    assert server.kind is ServerKind.LOCALSPEC
    assert (server.n_ctx, server.served.label) == (1024, "target")
    request = ChatRequest(HI, max_tokens=24, sampling=GREEDY, spec=DRAFT)
    chunks, done = answer(server, request)
    settings = RuntimeSettings(tiny_target, tiny_draft_exact, n_ctx=1024, n_threads=1)
    with Runtime(settings) as runtime:
        prompt = runtime.prompts.chat_prompt(HI)
        assert server.prompt_tokens(HI) == len(prompt) == done.stats.prompt_tokens
        local = list(runtime.generate(_engine_request(prompt, request)))
    local_chunks = [e for e in local if isinstance(e, TextChunk)]
    assert [(c.text, c.tokens, c.source, c.from_draft, c.drafted) for c in chunks] == [
        (c.text, c.tokens, c.source, c.from_draft, c.drafted) for c in local_chunks
    ]
    local_done = local[-1]
    assert isinstance(local_done, Finished)
    assert (done.text, done.tokens, done.finish_reason) == (
        local_done.text,
        local_done.tokens,
        local_done.finish_reason,
    )
    assert done.stats.mode == "draft"
    assert done.stats.accepted == done.stats.drafted == local_done.stats.drafted > 0


def _engine_request(prompt: list[int], request: ChatRequest) -> GenerationRequest:
    return GenerationRequest(prompt, request.max_tokens, GREEDY, DRAFT, route="chat")


@pytest.mark.parametrize("kind", [ServerKind.LLAMA_CPP, ServerKind.OPENAI])
def test_other_kinds_read_what_such_a_server_reports(served: Server, kind: ServerKind) -> None:
    """llama.cpp: the speculation counts of the last chunk's `timings`; any other server:
    none (UNREPORTED, the app's dashes). The text is the same either way."""
    request = ChatRequest(HI, max_tokens=24, sampling=GREEDY, spec=DRAFT)
    _, ours = answer(remote(served), request)
    server = remote(served, kind, window=1024)
    chunks, done = answer(server, request)
    assert done.text == ours.text == "".join(c.text for c in chunks)
    assert {c.source for c in chunks} == {UNREPORTED}
    assert done.stats.prompt_tokens == ours.stats.prompt_tokens
    assert done.stats.generated_tokens == ours.stats.generated_tokens
    assert server.n_ctx == 1024
    if kind is ServerKind.LLAMA_CPP:  # /props said the window; speculation comes from timings
        assert server.prompt_tokens(HI) == ours.stats.prompt_tokens
        assert done.stats.mode == "llama.cpp"
        assert (done.stats.drafted, done.stats.accepted) == (
            ours.stats.drafted,
            ours.stats.accepted,
        )
    else:
        assert server.prompt_tokens(HI) is None  # unknown before the answer
        assert done.stats.mode == UNREPORTED
        assert done.stats.drafted == done.stats.accepted == 0


@pytest.mark.parametrize("kind", [ServerKind.LOCALSPEC, ServerKind.LLAMA_CPP])
def test_tokenize_and_detokenize_through_the_client(served: Server, kind: ServerKind) -> None:
    server = remote(served, kind)
    text = "def add(a, b):\n    return a + b"
    tokens = server.tokenize(text, add_special=False)
    assert server.detokenize(tokens) == text
    rendered = server.apply_template(HI)
    assert server.prompt_tokens(HI) == len(server.tokenize(rendered)) > len(tokens)


def test_a_generic_server_without_a_window_has_none(served: Server) -> None:
    assert remote(served, ServerKind.OPENAI).n_ctx == 0


@pytest.mark.parametrize("how", ["close", "should_stop"])
def test_leaving_the_stream_cancels_the_generation_on_the_server(served: Server, how: str) -> None:
    before = cancelled(served)
    server = remote(served)
    request = ChatRequest(HI, max_tokens=100_000, ignore_eos=True, spec=SpecSettings(SpecMode.OFF))
    chunks = 0

    def stop() -> bool:
        return chunks >= 3

    events = server.chat(request, stop if how == "should_stop" else None)
    finished = None
    for event in events:
        if isinstance(event, TextChunk):
            chunks += 1
        if how == "close" and chunks >= 3:
            events.close()
            break
        if isinstance(event, Finished):
            finished = event
            assert event.finish_reason == "cancelled"
            assert len(event.tokens) == 3
    assert (finished is not None) == (how == "should_stop")  # closing it ends it silently
    # a hang guard: the server notices the closed connection at its next step
    deadline = time.monotonic() + 60
    while cancelled(served) != before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled(served) == before + 1


def test_a_wrong_key_and_no_server_are_one_error_each(served: Server) -> None:
    wrong = RemoteServer(RemoteSettings(ServerAddress(url=served.url, token="nope")))
    with pytest.raises(ServerAuthError, match="refused the API key"):
        wrong.connect()
    gone = RemoteServer(RemoteSettings(parse_address("http://127.0.0.1:9")))
    with pytest.raises(ServerUnavailableError, match=r"no server answers at http://127\.0\.0\.1:9"):
        gone.connect()


def test_a_required_setting_the_server_does_not_run_is_refused(served: Server) -> None:
    asked = Requirement("n_ctx", 2048, "--ctx-size 2048", "?", lambda v: f"runs with {v}")
    with pytest.raises(UsageError, match="runs with 1024, so --ctx-size 2048 cannot apply"):
        remote(served, requires=(asked,)).connect()
    unreported = Requirement("n_threads", 3, "--threads 3", "does not report its --threads", str)
    with pytest.raises(UsageError, match="does not report its --threads"):
        remote(served, ServerKind.LLAMA_CPP, requires=(unreported,)).connect()


def test_the_body_a_generic_server_gets() -> None:
    body = {
        "messages": [],
        "temperature": 0.0,
        "top_k": 0,
        "min_p": 0.05,
        "repeat_penalty": 1.1,
        "ignore_eos": False,
        "stop": [],
        "spec": {"mode": "draft"},
    }
    assert wire_body(ServerKind.LOCALSPEC, body) == body
    assert "spec" not in wire_body(ServerKind.LLAMA_CPP, body)
    assert wire_body(ServerKind.OPENAI, body) == {
        "messages": [],
        "temperature": 0.0,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
    }


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("http://127.0.0.1:8080", "/v1/models"),
        ("https://example.com/v1", "/v1/models"),
        ("https://example.com/llm/v1/", "/llm/v1/models"),
    ],
)
def test_a_url_prefix_is_kept_and_a_trailing_v1_dropped(url: str, path: str) -> None:
    assert parse_address(url).path("/v1/models") == path


@pytest.mark.parametrize(
    "url", ["ftp://x", "https://user:secret@example.com", "http://h:1/?q=1", "https://"]
)
def test_urls_that_are_not_a_server_are_refused(url: str) -> None:
    with pytest.raises(UsageError, match="give a server as http://HOST:PORT"):
        parse_address(url)


def test_which_api_key_a_url_gets(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """--api-key, else $LOCALSPEC_API_KEY, else (loopback only) serve's token, else
    $OPENAI_API_KEY: localspec's own token never leaves the machine."""
    from localspec.paths import token_path  # noqa: PLC0415

    token_path().parent.mkdir(parents=True, exist_ok=True)
    token_path().write_text("local-token\n")
    monkeypatch.delenv("LOCALSPEC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    assert parse_address("http://127.0.0.1:1", "given").token == "given"
    assert parse_address("http://127.0.0.1:1").token == "local-token"
    assert parse_address("https://example.com").token == "openai-key"
    monkeypatch.setenv("LOCALSPEC_API_KEY", "env-key")
    assert parse_address("https://example.com").token == "env-key"
