"""One request must never take the server down: grammars and schemas that crashed llguidance
or that it refuses only while generating, stop strings whose matching grew with the square of
their length, headers that made the Host check raise, malformed HTTP, huge fields.

Every answer is JSON with a status below 500, the server answers `/health` after each, its
log holds no traceback, and its resident memory ends within 1.5x of where it started.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import Server, server_env, start_server
from tests.server.test_behaviour import error_of
from tests.server.test_fuzz import FUZZ

__all__ = ["server_env"]

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


def rss_kib(server: Server) -> int:
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))


@pytest.fixture(scope="module")
def hostile(server_env: None, tiny_target: Path) -> Iterator[Server]:
    running = start_server(tiny_target, None, "--ctx-size", "256", "--max-tokens", "4")
    with running.unix() as http:  # warm: the constraint compiler, the first generation
        assert http.post("/completion", json={"prompt": "x", "json_schema": {}}).is_success
    before = rss_kib(running)
    yield running
    assert rss_kib(running) < 1.5 * before
    assert running.stop() == 0
    assert not [line for line in running.log if "Traceback" in line], "\n".join(running.log)


def answer(server: Server, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of one request; the server still answers afterwards."""
    with server.unix() as http:
        response = http.post(path, json=body)
        assert http.get("/health").json()["status"] == "ok"
    assert response.status_code < 500, response.text
    return response.status_code, response.json()


def refused(server: Server, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = answer(server, path, body)
    assert status == 400, reply
    return reply["error"]  # type: ignore[no-any-return]


def gbnf_chain(rules: int) -> str:
    chain = "\n".join(f"r{i} ::= r{i + 1}" for i in range(rules))
    return f'root ::= r0\n{chain}\nr{rules} ::= "a"'


def ref_chain(refs: int) -> dict[str, Any]:
    defs: dict[str, Any] = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(refs)}
    defs[f"d{refs}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def test_a_grammar_of_20000_chained_rules_is_a_400_naming_the_byte_limit(hostile: Server) -> None:
    error = refused(hostile, "/completion", {"prompt": "x", "grammar": gbnf_chain(20_000)})
    assert "--max-grammar-bytes" in error["message"] and "262144" in error["message"]
    assert error["param"] == "grammar"


def test_a_chain_of_rules_under_the_byte_limit_is_a_400_naming_the_rule_limit(
    hostile: Server,
) -> None:
    error = refused(hostile, "/completion", {"prompt": "x", "grammar": gbnf_chain(4_000)})
    assert "--max-constraint-rules" in error["message"] and "1000" in error["message"]


def test_a_ref_chain_of_6000_defs_is_a_400(hostile: Server) -> None:
    schema = {"name": "x", "schema": ref_chain(6_000)}
    body = {"messages": HI, "response_format": {"type": "json_schema", "json_schema": schema}}
    error = refused(hostile, CHAT, body)
    assert "$refs" in error["message"] and error["param"] == "response_format.json_schema.schema"


def test_a_schema_deeper_than_any_body_as_text_is_a_400_naming_the_depth_limit(
    hostile: Server,
) -> None:
    deep = '{"type": "object", "properties": {"a": ' * 2000 + "{}" + "}}" * 2000
    error = refused(hostile, "/completion", {"prompt": "x", "json_schema": deep})
    assert "--max-constraint-depth" in error["message"]


@pytest.mark.parametrize(
    "grammar", ['root ::= "a"{1000000}', 'root ::= "a" root', 'root ::= "ab"{1000000}']
)
def test_grammars_llguidance_gives_up_on_while_generating_are_400s(
    hostile: Server, grammar: str
) -> None:
    error = refused(hostile, "/completion", {"prompt": "x", "grammar": grammar})
    assert "gave up" in error["message"] and error["code"] == "invalid_constraint"


@pytest.mark.parametrize("pattern", ["^a{1000000}$", "^((a{100}){100}){100}$", "^(a|aa)*b$"])
def test_huge_or_backtracking_patterns_in_a_schema_are_never_a_500(
    hostile: Server, pattern: str
) -> None:
    schema = {"type": "string", "pattern": pattern}
    status, _ = answer(hostile, "/completion", {"prompt": "x", "json_schema": schema})
    assert status in (200, 400)


def test_a_schema_requiring_a_property_of_itself_is_never_a_500(hostile: Server) -> None:
    """Refused by llguidance late, if at all: a 400 before output, an error event after."""
    schema = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
    body = {"prompt": "x", "json_schema": schema, "n_predict": 64}
    status, _ = answer(hostile, "/completion", body)
    assert status in (200, 400)
    with hostile.unix() as http:
        with http.stream("POST", "/completion", json={**body, "stream": True}) as response:
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert response.status_code < 500
        events = [json.loads(line[6:]) for line in lines]
        assert all(event.get("error", {}).get("type") != "server_error" for event in events)


def test_an_enum_of_100000_values_is_a_400_naming_the_byte_limit(hostile: Server) -> None:
    schema = {"enum": [f"value{i}" for i in range(100_000)]}
    error = refused(hostile, "/completion", {"prompt": "x", "json_schema": schema})
    assert "--max-grammar-bytes" in error["message"]


def test_a_nul_in_a_grammar_is_never_a_500(hostile: Server) -> None:
    status, _ = answer(hostile, "/completion", {"prompt": "x", "grammar": 'root ::= "\x00a"'})
    assert status in (200, 400)


def test_a_stop_string_of_a_megabyte_is_a_400_naming_the_limit(hostile: Server) -> None:
    error = refused(hostile, "/completion", {"prompt": "x", "stop": ["x" * 1_048_576]})
    assert error["code"] == "stop_too_long" and "--max-stop-length" in error["message"]


def test_100000_stop_strings_are_a_400_naming_the_limit(hostile: Server) -> None:
    error = refused(hostile, CHAT, {"messages": HI, "stop": [f"s{i}" for i in range(100_000)]})
    assert error["code"] == "too_many_stops" and error["param"] == "stop"


def test_stop_strings_at_the_limits_are_served(hostile: Server) -> None:
    stops = ["y" * 4096] + [f"never{i}" for i in range(63)]
    status, _ = answer(hostile, "/completion", {"prompt": "x", "stop": stops})
    assert status == 200


@pytest.mark.parametrize("field", ["logit_bias", "n_probs", "logprobs", "top_logprobs"])
def test_huge_unsupported_fields_are_never_a_500(hostile: Server, field: str) -> None:
    value: Any = {str(i): 1.0 for i in range(100_000)} if field == "logit_bias" else 10**9
    status, _ = answer(hostile, CHAT, {"messages": HI, field: value})
    assert status in (200, 400)


def raw_http(server: Server, request: bytes) -> tuple[int, dict[str, Any]]:
    """Bytes sent as they are over TCP; the status line and JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        connection.sendall(request)
        reply = b""
        while chunk := connection.recv(65536):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.mark.parametrize(
    "headers",
    [
        b"Host: [\r\n",
        b"Host: [::1\r\n",
        b"Host: 127.0.0.1\r\nOrigin: http://[\r\n",
        b"Host: 127.0.0.1\r\nOrigin: http://[::1\r\n",
    ],
)
def test_hosts_and_origins_that_are_no_url_are_a_json_403(hostile: Server, headers: bytes) -> None:
    request = b"GET /v1/models HTTP/1.1\r\n" + headers + b"Connection: close\r\n\r\n"
    status, body = raw_http(hostile, request)
    assert status == 403 and body["error"]["type"] == "permission_error"


def test_an_origin_that_is_no_url_is_a_json_403_on_the_unix_socket(hostile: Server) -> None:
    with hostile.unix() as http:
        response = http.get("/v1/models", headers={"Origin": "http://["})
    assert response.status_code == 403 and error_of(response)["code"] == "foreign_origin"


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: \x00\r\n\r\n",
    ],
    ids=["duplicate-host", "bad-request-line", "bad-header", "nul-in-header"],
)
def test_malformed_http_is_a_json_400(hostile: Server, request_bytes: bytes) -> None:
    status, body = raw_http(hostile, request_bytes)
    assert status == 400 and body["error"]["code"] == "malformed_http"
    with hostile.unix() as http:
        assert http.get("/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    "headers",
    [b"X-Big: " + b"a" * 65536 + b"\r\n", b"X-Many: 1\r\n" * 5000],
    ids=["64k-header", "5000-headers"],
)
def test_huge_headers_are_answered_in_json(hostile: Server, headers: bytes) -> None:
    """h11 takes a head that arrives whole, whatever its size; none is an error."""
    request = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n"
    status, body = raw_http(hostile, request)
    assert status == 200 and body["status"] == "ok"


def test_a_body_that_never_arrives_leaves_the_server_serving(hostile: Server) -> None:
    """Slowloris: a body promised and cut short, the connection then closed."""
    with socket.create_connection(("127.0.0.1", hostile.port), timeout=30) as connection:
        connection.sendall(
            b"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
            b"Authorization: Bearer " + (hostile.token or "").encode() + b'\r\n\r\n{"pro'
        )
    with hostile.unix() as http:
        assert http.get("/health").json()["status"] == "ok"


HOSTILE_FUZZ = settings(
    FUZZ,
    max_examples=40,
    suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture],
)
GRAMMAR_PARTS = [
    "root ::= ",
    '"a"',
    "(",
    ")",
    "|",
    "*",
    "+",
    "?",
    "{1000000}",
    "{2,}",
    "[a-z]",
    "[^\\x00]",
    "\x00",
    " root",
    "\n",
    'r ::= "b"',
    " r",
    "::=",
    '"\\u',
]
SCHEMA_KEYS = [
    "type",
    "properties",
    "required",
    "items",
    "$ref",
    "pattern",
    "enum",
    "anyOf",
    "minLength",
    "maxLength",
    "additionalProperties",
    "$defs",
    "const",
]
schema_value = st.recursive(
    st.one_of(
        st.sampled_from(["object", "string", "#", "#/$defs/a", "a{99999}", "^(a|aa)*$"]),
        st.integers(-1, 10**6),
        st.booleans(),
        st.none(),
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(SCHEMA_KEYS), inner, max_size=4)
    ),
    max_leaves=12,
)
HEADER_CHARS = st.text(st.sampled_from("[]:@%/?#. \t1a-\x7fé"), max_size=12)


@HOSTILE_FUZZ
@given(st.lists(st.sampled_from(GRAMMAR_PARTS), max_size=12).map("".join))
def test_random_grammars_are_never_a_500(hostile: Server, grammar: str) -> None:
    status, _ = answer(hostile, "/completion", {"prompt": "x", "grammar": grammar})
    assert status in (200, 400)


@HOSTILE_FUZZ
@given(schema_value)
def test_random_schemas_are_never_a_500(hostile: Server, schema: Any) -> None:
    status, _ = answer(hostile, "/completion", {"prompt": "x", "json_schema": schema})
    assert status in (200, 400)


@HOSTILE_FUZZ
@given(HEADER_CHARS, HEADER_CHARS)
def test_random_hosts_and_origins_get_json(hostile: Server, host: str, origin: str) -> None:
    head = f"Host: {host}\r\nOrigin: http://{origin}\r\n".encode("latin-1")
    request = b"GET /v1/models HTTP/1.1\r\n" + head + b"Connection: close\r\n\r\n"
    status, body = raw_http(hostile, request)
    assert status in (200, 400, 401, 403) and ("error" in body or "data" in body)
