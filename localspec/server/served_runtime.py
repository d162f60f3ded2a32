"""All that the HTTP handlers use of the runtime, named, so they reach no further.

Generation goes through the worker (`localspec.server.worker`), which owns the runtime's
thread; a handler only builds prompts, checks requests against the model and reports what
the server runs. These protocols list exactly that: a handler that needs more of `Runtime`
must say so here, where it shows. `Runtime` and its `Models` (the target's `LlamaModel`)
satisfy them as they are; what the server reports of the KV cache it reads through
`Runtime.status` (`localspec.runtime_status`), never the context's attributes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from localspec.constraints.constraint import Constraint
from localspec.loading import RuntimeSettings
from localspec.prompting import Prompter
from localspec.runtime_status import RuntimeStatus


class TargetVocabulary(Protocol):
    """The target model as `/tokenize`, `/detokenize` and the tools' checks read it."""

    @property
    def path(self) -> Path: ...

    @property
    def n_vocab(self) -> int: ...

    @property
    def chat_template(self) -> str | None: ...

    def tokenize(
        self,
        text: str,
        *,
        add_special: bool = True,
        parse_special: bool = True,
        most: int | None = None,
    ) -> list[int]: ...

    def piece(self, token: int) -> bytes: ...

    def detokenize(self, tokens: list[int]) -> str: ...


class ServedModels(Protocol):
    @property
    def target_model(self) -> TargetVocabulary: ...


class ServedRuntime(Protocol):
    """The runtime as handlers see it: its settings and window, prompt building, the model
    facts above, and a constraint check that refuses a request before it is queued."""

    @property
    def settings(self) -> RuntimeSettings: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def prompts(self) -> Prompter: ...

    @property
    def models(self) -> ServedModels: ...

    @property
    def status(self) -> RuntimeStatus: ...

    def check_constraint(self, constraint: Constraint) -> None: ...
