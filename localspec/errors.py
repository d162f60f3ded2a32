"""Every error localspec raises on purpose, each with a message that tells the user what to do.

Surfaces turn these into exit codes (CLI), JSON error bodies (server) or notifications (TUI);
anything that is not a `LocalspecError` is a bug and is reported as one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar


class LocalspecError(Exception):
    """Base class: an expected failure with a message meant for the user."""

    exit_code = 1


class UsageError(LocalspecError):
    """The request itself is wrong (bad option value, malformed input)."""

    exit_code = 2


class InvalidSettingsError(UsageError):
    """A sampling or speculation setting is out of range."""


class ModelFileError(LocalspecError):
    """A model file is missing, unreadable, truncated or not a GGUF file."""


class ModelLoadError(LocalspecError):
    """llama.cpp refused to load a model or create its context."""


class IncompatibleDraftError(LocalspecError):
    """The draft model cannot propose tokens for the target (different vocabulary)."""


class PromptTooLongError(UsageError):
    """The prompt does not fit the context window; localspec never truncates silently."""

    def __init__(self, prompt_tokens: int, n_ctx: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx
        super().__init__(
            f"the prompt is {prompt_tokens} tokens but the context window holds {n_ctx} "
            f"(and at least one token must be left to generate): shorten the prompt or raise "
            f"the context size with --ctx-size"
        )


class ChatTemplateError(UsageError):
    """The model's own chat template does not compile, or fails on this conversation.

    A usage error, like a model without a template: the request cannot be rendered as it is,
    and nothing is wrong with the server or the engine.
    """

    def __init__(self, model: str, problem: str, line: int | None) -> None:
        self.model, self.problem, self.line = model, problem, line
        where = "" if line is None else f" (line {line})"
        super().__init__(
            f"{model}: its chat template failed{where}: {problem}. If the template rejects this "
            f"conversation (e.g. a system message), change the conversation; otherwise use a "
            f"GGUF with a working template (the model's registry entry: `localspec models`), "
            f"or send the prompt as plain text (--raw)"
        )


class DecodeError(LocalspecError):
    """llama_decode failed (out of KV-cache space or an internal llama.cpp error)."""


class DownloadError(LocalspecError):
    """A model file could not be fetched from the Hub or any mirror."""


class ChecksumError(DownloadError):
    """A fetched file does not have the size or SHA-256 the registry promises; it was removed."""


class DiskSpaceError(DownloadError):
    """Not enough free disk space for a download (checked before it starts)."""


class EditError(LocalspecError):
    """An answer's edits cannot be applied as they are; nothing was written.

    `problems` holds one line per failing block or file, each naming the block (its number and
    line in the answer) and saying how to fix it; the message is those lines.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class ContextFileError(UsageError):
    """A file given as context (`--file`, `/add`, `@path`) cannot be sent: missing,
    unreadable, binary, not UTF-8, or outside the working directory."""


class ConstraintError(UsageError):
    """A JSON schema, regex or grammar that cannot constrain a generation: not valid JSON, a
    schema keyword the constraint library does not implement, a grammar syntax error.

    `problem` is the constraint library's own message, with the place it failed where it
    gives one; surfaces turn the error into a 400 or exit status 2 before generating.
    """

    # what each kind is called, and where its supported syntax is described
    _GUIDES: ClassVar[dict[str, tuple[str, str]]] = {
        "json_schema": ("JSON schema", "guidance-ai/llguidance/blob/main/docs/json_schema.md"),
        "regex": ("regex", "guidance-ai/llguidance/blob/main/docs/syntax.md"),
        "gbnf": ("GBNF grammar", "ggml-org/llama.cpp/blob/master/grammars/README.md"),
        "lark": ("Lark grammar", "guidance-ai/llguidance/blob/main/docs/syntax.md"),
    }

    def __init__(self, kind: str, problem: str) -> None:
        self.kind, self.problem = kind, problem
        name, guide = self._GUIDES.get(kind, ("constraint", "guidance-ai/llguidance"))
        super().__init__(
            f"the {name} cannot constrain the output: {problem.strip()}\n"
            f"fix the {name} (supported: https://github.com/{guide}) or send the request "
            f"without it"
        )


class BenchServerError(LocalspecError):
    """A server the benchmark started for itself (`bench editor`) failed; the message has
    its reason and the end of its log."""
