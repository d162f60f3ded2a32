"""`localspec complete --json-schema` and `--grammar`: constrained output for pipes, the same
in this process and through a server; a bad schema or grammar is one line and exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from tests.cli.test_complete import default_server, run, runtime_dir
from tests.server.conftest import Server

__all__ = ["default_server", "runtime_dir"]

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
    },
    "required": ["name", "tags"],
    "additionalProperties": False,
}
GRAMMAR = 'root ::= "def " [a-z] [a-z_]{0,6} "(" [a-z]? "):"\n'
GRAMMAR_TEXT = re.compile(r"def [a-z][a-z_]{0,6}\([a-z]?\):")
GREEDY = ("--temperature", "0", "--max-tokens", "300")


@pytest.fixture
def models(tiny_target: Path, tiny_draft_noisy: Path) -> tuple[str | Path, ...]:
    """The default server's models: given the same, `complete` uses it."""
    return ("--target", tiny_target, "--draft", tiny_draft_noisy)


@pytest.mark.parametrize("where", ["--no-server", "served"])
@pytest.mark.parametrize("shape", [(), ("--raw",)])
def test_json_schema_output_validates_here_and_through_the_server(
    default_server: Server,
    models: tuple[str | Path, ...],
    tmp_path: Path,
    where: str,
    shape: tuple[str, ...],
) -> None:
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    place = ("--no-server",) if where == "--no-server" else ()
    common = (*models, *GREEDY, *shape, *place)
    inline = run(*common, "--json-schema", json.dumps(SCHEMA), "A user:")
    from_file = run(*common, "--json-schema", schema_file, "A user:")
    assert inline.returncode == from_file.returncode == 0, inline.stderr + from_file.stderr
    assert inline.stdout == from_file.stdout
    jsonschema.validate(json.loads(inline.stdout), SCHEMA)


def test_both_paths_give_the_same_constrained_text(
    default_server: Server, models: tuple[str | Path, ...], tmp_path: Path
) -> None:
    grammar = tmp_path / "def.gbnf"
    grammar.write_text(GRAMMAR)
    common = (*models, *GREEDY, "--grammar", grammar, "--json")
    served = run(*common, "--raw", "--spec", "draft", stdin="# a function\n")
    local = run(*common, "--raw", "--spec", "draft", "--no-server", stdin="# a function\n")
    assert served.returncode == local.returncode == 0, served.stderr + local.stderr
    served_text = json.loads(served.stdout)["text"]
    assert served_text == json.loads(local.stdout)["text"]
    assert GRAMMAR_TEXT.fullmatch(served_text)
    assert json.loads(served.stdout)["stats"]["constraint"] == "gbnf"


@pytest.mark.parametrize("where", ["--no-server", "served"])
@pytest.mark.parametrize(
    "case",
    [
        ("--json-schema", '{"type": "strin"}', "strin"),
        ("--json-schema", '{"type": ', "not valid JSON"),
        ("--json-schema", "missing.json", "cannot read --json-schema"),
        ("--grammar", "root.gbnf", "Expected ')'"),
        ("--grammar", "missing.gbnf", "cannot read --grammar"),
    ],
)
def test_a_bad_constraint_is_one_line_and_exit_2(
    default_server: Server,
    models: tuple[str | Path, ...],
    tmp_path: Path,
    where: str,
    case: tuple[str, str, str],
) -> None:
    option, value, words = case
    (tmp_path / "root.gbnf").write_text('root ::= ("a"\n')
    if not value.startswith("{"):
        value = str(tmp_path / value)
    place = ("--no-server",) if where == "--no-server" else ()
    result = run(*models, option, value, *place, "hi")
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("localspec: error:") and words in line
    if where == "served" and words in ("strin", "Expected ')'"):  # the model's side says so
        assert "the server refused the request" in line


def test_one_constraint_at_a_time(tiny_target: Path) -> None:
    result = run("--target", tiny_target, "--json-schema", "{}", "--grammar", "g.gbnf", "hi")
    assert result.returncode == 2
    assert "give one constraint" in result.stderr
