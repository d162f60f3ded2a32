"""Constrained output over a real server on tiny models: OpenAI's `response_format`, llama.cpp's
`json_schema` and `grammar`, and the 400s of schemas and grammars that cannot constrain.

The tiny models are random, so valid output here is the constraint's doing. Every schema
bounds its strings, numbers and arrays, so a random model finishes within `ENOUGH` tokens;
a schema that cannot finish in time ends with "length", never with output called complete.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from tests.server.conftest import Server
from tests.server.test_behaviour import error_of

CHAT = "/v1/chat/completions"
ASK = [{"role": "user", "content": "Describe a user as JSON."}]
ENOUGH = 400  # tokens: the longest answer these schemas allow is about 150 (byte vocabulary)
SCHEMAS: dict[str, dict[str, Any]] = {
    "flat": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 10},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "admin": {"type": "boolean"},
        },
        "required": ["name", "age", "admin"],
        "additionalProperties": False,
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {"role": {"enum": ["dev", "ops", "qa"]}},
                "required": ["role"],
                "additionalProperties": False,
            },
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 4},
                "maxItems": 3,
            },
        },
        "required": ["user", "tags"],
        "additionalProperties": False,
    },
    "choice": {"enum": ["red", "green", "blue"]},
    "number": {"type": "number", "minimum": -5, "maximum": 5},
}
SCHEMA_PARAM = "response_format.json_schema.schema"
GRAMMAR = 'root ::= ("yes" | "no") ", " [0-9] [0-9]? " items"'
GRAMMAR_TEXT = re.compile(r"(yes|no), [0-9][0-9]? items")


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


def valid(text: str, schema: dict[str, Any]) -> Any:
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


@pytest.mark.parametrize("spec", ["off", "ngram", "draft", "auto"])
@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_chat_output_validates_against_its_schema(server: Server, name: str, spec: str) -> None:
    schema = SCHEMAS[name]
    body = {
        "messages": ASK,
        "response_format": response_format(schema),
        "max_tokens": ENOUGH,
        "temperature": 0.9,
        "seed": 7,
        "spec": spec,
    }
    with server.unix() as http:
        answer = http.post(CHAT, json=body).json()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    valid(choice["message"]["content"], schema)
    assert answer["localspec"]["constraint"] == "json_schema"


def test_json_object_is_an_object(server: Server) -> None:
    body = {
        "messages": ASK,
        "response_format": {"type": "json_object"},
        "max_tokens": ENOUGH,
        "temperature": 0,
    }
    with server.unix() as http:
        choice = http.post(CHAT, json=body).json()["choices"][0]
    if choice["finish_reason"] == "stop":  # any object: a random model may write a long one
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["finish_reason"] == "length"


def test_streamed_constrained_text_equals_the_whole_answer(server: Server) -> None:
    body = {
        "messages": ASK,
        "response_format": response_format(SCHEMAS["nested"]),
        "max_tokens": ENOUGH,
        "temperature": 0,
    }
    with server.unix() as http:
        whole = http.post(CHAT, json=body).json()["choices"][0]["message"]["content"]
        with http.stream("POST", CHAT, json={**body, "stream": True}) as response:
            events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(event) for event in events if event != "[DONE]"]
    streamed = "".join(
        chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"]
    )
    assert streamed == whole
    valid(whole, SCHEMAS["nested"])


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/completion", {"prompt": "The answer:", "n_predict": ENOUGH}),
        ("/v1/completions", {"prompt": "The answer:", "max_tokens": ENOUGH}),
        ("/infill", {"input_prefix": "x = ", "input_suffix": "\n", "n_predict": ENOUGH}),
    ],
)
def test_llamacpp_grammar_and_json_schema_on_every_endpoint(
    server: Server, path: str, extra: dict[str, Any]
) -> None:

    def text_of(answer: dict[str, Any]) -> str:
        return str(answer["choices"][0]["text"] if path.startswith("/v1") else answer["content"])

    schema = SCHEMAS["flat"]
    constrained = (
        {"response_format": response_format(schema)}
        if path.startswith("/v1")
        else {"json_schema": schema}
    )
    with server.unix() as http:
        grammar = http.post(path, json={**extra, "grammar": GRAMMAR, "temperature": 0}).json()
        as_json = http.post(path, json={**extra, **constrained, "temperature": 0}).json()
    assert GRAMMAR_TEXT.fullmatch(text_of(grammar)), grammar
    valid(text_of(as_json), schema)


def test_a_schema_that_cannot_finish_in_time_ends_with_length(server: Server) -> None:
    schema = {"type": "string", "minLength": 50}
    body = {"messages": ASK, "response_format": response_format(schema), "max_tokens": 10}
    with server.unix() as http:
        choice = http.post(CHAT, json=body).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    with pytest.raises(ValueError):
        json.loads(choice["message"]["content"])


@pytest.mark.parametrize(
    ("path", "fields", "param", "words"),
    [
        (CHAT, {"response_format": response_format({"type": "strin"})}, SCHEMA_PARAM, "strin"),
        (CHAT, {"response_format": {"type": "xml"}}, "response_format.type", "json_schema"),
        (CHAT, {"response_format": {"type": "json_schema"}}, "response_format.json_schema", ""),
        (
            CHAT,
            {"response_format": response_format({"type": "object"}), "grammar": GRAMMAR},
            "grammar",
            "send one",
        ),
        ("/completion", {"json_schema": "{not json"}, "json_schema", "JSON"),
        ("/completion", {"json_schema": 3}, "json_schema", "JSON schema"),
        ("/completion", {"grammar": "root ::= undefined_rule"}, "grammar", "undefined_rule"),
        ("/completion", {"grammar": 'root ::= ("a"'}, "grammar", "GBNF"),
        ("/infill", {"grammar": 'root ::= ("a"'}, "grammar", "GBNF"),
        (
            "/v1/completions",
            {"response_format": response_format({"minLength": "x"})},
            SCHEMA_PARAM,
            "minLength",
        ),
    ],
)
def test_bad_schemas_and_grammars_are_400s_and_the_server_keeps_serving(
    server: Server, path: str, fields: dict[str, Any], param: str, words: str
) -> None:
    body = {"messages": ASK, "prompt": "x", "input_prefix": "x", "max_tokens": 4, **fields}
    with server.unix() as http:
        response = http.post(path, json=body)
        assert response.status_code == 400, response.text
        error = error_of(response)
        assert error["param"] == param
        assert words in str(error["message"])
        assert http.get("/health").json()["status"] == "ok"
        again = http.post(CHAT, json={"messages": ASK, "max_tokens": 2})
        assert again.status_code == 200


class User(BaseModel):
    name: Annotated[str, Field(max_length=8)]
    age: Annotated[int, Field(ge=0, le=99)]
    team: Literal["core", "web"]
    admin: bool


def test_the_openai_clients_parse_with_a_pydantic_model(server: Server) -> None:
    api = openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.token, max_retries=0)
    answer = api.chat.completions.parse(
        model="target",
        messages=[{"role": "user", "content": "A user, please."}],
        response_format=User,
        max_tokens=ENOUGH,
        temperature=0,
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(choice.message.parsed, User)
