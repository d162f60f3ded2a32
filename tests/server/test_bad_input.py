"""Hostile and out-of-range bodies get a JSON 4xx naming the field, never a 500."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.server.conftest import Server, server_env, start_server
from tests.server.test_behaviour import error_of

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
INT32_MAX = 2**31 - 1

__all__ = ["server_env"]  # the module-scoped user folders a server of its own runs in


def post(server: Server, path: str, body: bytes) -> httpx2.Response:
    """One request on its own connection, then a health check: the server keeps serving."""
    with server.unix() as http:
        response = http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert http.get("/health").json()["status"] == "ok"
    return response


def refused(server: Server, path: str, body: bytes, status: int = 400) -> dict[str, object]:
    response = post(server, path, body)
    assert response.status_code == status, response.text
    return error_of(response)


@pytest.mark.parametrize("path", [CHAT, "/v1/completions", "/completion", "/infill"])
def test_a_body_nested_100000_deep_is_a_400(server: Server, path: str) -> None:
    depth = 100_000
    error = refused(server, path, b"[" * depth + b"]" * depth)
    assert "deeper than 64 levels" in str(error["message"])


def test_nesting_is_judged_at_the_documented_depth(server: Server) -> None:
    """64 levels are allowed anywhere in a body, 65 are not, even in a field the server
    ignores (`/props` documents the limit)."""

    def nested(levels: int) -> bytes:
        inner = "[" * (levels - 1) + "]" * (levels - 1)  # the body object is level 1
        return (
            json.dumps({"messages": HI, "max_tokens": 1, "x": "@"}).replace('"@"', inner).encode()
        )

    with server.unix() as http:
        assert http.get("/props").json()["max_json_depth"] == 64
    allowed = post(server, CHAT, nested(64))
    assert allowed.status_code == 200, allowed.text
    assert "deeper than 64" in str(refused(server, CHAT, nested(65))["message"])


def test_a_body_over_the_limit_is_a_413(server: Server) -> None:
    with server.unix() as http:
        limit = http.get("/props").json()["max_body"]
    assert limit >= 8 * 1024 * 1024 + 16 * 1024  # 8 MiB plus 16 bytes per context token
    body = b'{"prompt": "' + b"a" * limit + b'"}'
    error = refused(server, "/completion", body, status=413)
    assert error["code"] == "request_too_large"
    assert str(limit) in str(error["message"])

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        yield body[:1000]
        yield body[1000:]

    with server.unix() as http:
        response = http.post("/completion", content=chunked())
    assert response.status_code == 413


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"messages": HI, "stream": True, "stream_options": 5}, "stream_options"),
        (
            {"messages": HI, "stream": True, "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
        ),
    ],
)
def test_stream_options_of_the_wrong_shape_are_a_400(
    server: Server, body: dict[str, object], field: str
) -> None:
    """Found by fuzzing: they were accepted and read as absent."""
    error = refused(server, CHAT, json.dumps(body).encode())
    assert error["param"] == field


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (CHAT, {"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a\udfff"}]}]},
            "messages[0].content[0].text",
        ),
        (CHAT, {"messages": HI, "stop": ["ok", "\ud83d"]}, "stop[1]"),
        ("/v1/completions", {"prompt": "\udc00", "max_tokens": 2}, "prompt"),
        ("/v1/completions", {"prompt": "a", "suffix": "\ud800", "max_tokens": 2}, "suffix"),
        ("/completion", {"prompt": ["\ud800"], "n_predict": 2}, "prompt[0]"),
        ("/infill", {"input_prefix": "\ud800", "n_predict": 2}, "input_prefix"),
        ("/infill", {"input_suffix": "x\udbff", "n_predict": 2}, "input_suffix"),
        (
            "/infill",
            {"input_extra": [{"filename": "a\ud800.py", "text": "x"}], "n_predict": 2},
            "input_extra[0].filename",
        ),
        ("/completion", {"prompt": "a", "n_predict": 2, "\ud800": 1}, "\\ud800"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_the_field(
    server: Server, path: str, body: dict[str, object], field: str
) -> None:
    error = refused(server, path, json.dumps(body).encode())  # ASCII: "\ud800" escapes
    assert error["param"] == field
    assert "surrogate" in str(error["message"])


@pytest.mark.parametrize(
    ("path", "field", "value", "bounds"),
    [
        (CHAT, "max_tokens", 10**22, "between 1 and 2147483647"),
        (CHAT, "max_completion_tokens", 0, "between 1 and 2147483647"),
        ("/v1/completions", "max_tokens", 2**31, "between 1 and 2147483647"),
        ("/completion", "n_predict", 10**22, "between -1 and 2147483647"),
        ("/completion", "n_predict", -2, "between -1 and 2147483647"),
        ("/completion", "seed", 2**64, f"between -1 and {2**63 - 1}"),
        ("/completion", "seed", -7, f"between -1 and {2**63 - 1}"),
        ("/completion", "top_k", 10**22, f"between 0 and {INT32_MAX}"),
        ("/completion", "top_k", -1, f"between 0 and {INT32_MAX}"),
        ("/completion", "n_indent", 10**22, f"between 0 and {INT32_MAX}"),
        ("/completion", "t_max_predict_ms", -5, f"between 0 and {INT32_MAX}"),
        ("/completion", "n_predict", 1.5, "must be an integer"),
    ],
)
def test_out_of_range_integers_are_a_400_with_the_range(
    server: Server, path: str, field: str, value: object, bounds: str
) -> None:
    body: dict[str, object] = {"messages": HI} if path == CHAT else {"prompt": "a", "n_predict": 2}
    body[field] = value
    error = refused(server, path, json.dumps(body).encode())
    assert error["param"] == field
    assert bounds in str(error["message"])


@pytest.mark.parametrize(
    ("field", "bounds"),
    [
        ("draft_max", "between 0 and 2147483647"),
        ("ngram_min_match", "between 1 and"),
        ("max_draft_tokens", "between 0 and"),
    ],
)
def test_out_of_range_speculation_fields_name_the_nested_field(
    server: Server, field: str, bounds: str
) -> None:
    body = {"prompt": "a", "n_predict": 2, "spec": {"mode": "ngram", field: -(10**22)}}
    error = refused(server, "/completion", json.dumps(body).encode())
    assert error["param"] == f"spec.{field}"
    assert bounds in str(error["message"])


def test_minus_one_still_means_until_the_context_is_full(server: Server) -> None:
    with server.unix() as http:
        answer = http.post(
            "/completion", json={"prompt": "a", "n_predict": -1, "ignore_eos": True}
        ).json()
    assert answer["localspec"]["stop"] == "context"


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1" + b"0" * 400])
@pytest.mark.parametrize("field", ["temperature", "top_p", "repeat_penalty", "presence_penalty"])
def test_numbers_that_are_not_finite_are_a_400(server: Server, number: bytes, field: str) -> None:
    body = b'{"messages": [{"role": "user", "content": "hi"}], "%s": %s}' % (
        field.encode(),
        number,
    )
    error = refused(server, CHAT, body)
    assert error["param"] == field
    assert "finite" in str(error["message"])


def test_an_integer_of_thousands_of_digits_is_a_400(server: Server) -> None:
    body = b'{"prompt": "a", "n_predict": ' + b"9" * 5000 + b"}"
    assert "not valid JSON" in str(refused(server, "/completion", body)["message"])


def test_a_surrogate_in_a_field_the_server_ignores_is_refused_too(server: Server) -> None:
    """Checked before any field is read: no part of a body reaches the tokenizer, a log
    line or an error message as invalid text."""
    error = refused(server, CHAT, b'{"messages": [], "note": "\\ud800"}')
    assert error["param"] == "note"


def test_max_body_sets_the_limit(server_env: None, tiny_target: Path) -> None:
    small = start_server(tiny_target, None, "--spec", "off", "--max-body", "2000", auth=False)
    try:
        with small.unix() as http:
            assert http.get("/props").json()["max_body"] == 2000
        fits = json.dumps({"prompt": "a" * 1000, "n_predict": 1}).encode()
        assert post(small, "/completion", fits).status_code == 200
        error = refused(small, "/completion", b'{"prompt": "' + b"a" * 2000 + b'"}', status=413)
        assert "at most 2000" in str(error["message"]) and "--max-body" in str(error["message"])
    finally:
        assert small.stop() == 0


def test_a_client_gone_mid_body_is_not_logged_as_a_bug(server_env: None, tiny_target: Path) -> None:
    own = start_server(tiny_target, None, "--spec", "off", auth=False)
    try:
        with socket.socket(socket.AF_UNIX) as raw:
            raw.connect(str(own.socket_path))
            head = b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            raw.sendall(head + b"Content-Length: 1000\r\n\r\n" + b'{"prompt": "')
        body = json.dumps({"prompt": "a", "n_predict": 1}).encode()
        assert post(own, "/completion", body).status_code == 200  # served the next one
    finally:
        assert own.stop() == 0
    assert not [line for line in own.log if "Traceback" in line], "\n".join(own.log)
