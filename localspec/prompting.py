"""Turning what a surface has (text, a conversation, an editor's cursor) into the target's tokens.

Prompts are the target model's business alone: its tokenizer, the chat template inside its
GGUF, its fill-in-the-middle tokens, and the window they must fit. They need no engine, no
draft and no calibration, so they live apart from `Runtime`, which builds a `Prompter` for
its target and hands its methods on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from localspec.chat_template import render_chat, template_messages
from localspec.errors import PromptTooLongError, UsageError
from localspec.fim import ExtraChunk, InfillPrompt, infill_prompt, supports_fim
from localspec.llama.model import LlamaModel, TooManyTokensError
from localspec.messages import Message


class Prompter:
    """Prompts for `model` within a window of `n_ctx` tokens."""

    def __init__(self, model: LlamaModel, n_ctx: int) -> None:
        self.model = model
        self.n_ctx = n_ctx

    def tokenize(self, text: str, *, fit: bool = False) -> list[int]:
        """Raw text to tokens, with the model's BOS where it wants one (`fit`: as
        `chat_prompt`'s)."""
        return self._tokens(text, add_special=True, fit=fit)

    def chat_prompt(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        fit: bool = False,
    ) -> list[int]:
        """Render `messages` (and `tools`, OpenAI's function definitions) with the GGUF's own
        chat template and tokenize the result. `fit`: a prompt the window cannot hold (with a
        token to generate) raises `PromptTooLongError` before its tokens are built."""
        text = self._render_chat(messages, tools)
        return self._tokens(text, add_special=self._add_bos(text), fit=fit)

    def _tokens(self, text: str, *, add_special: bool, fit: bool) -> list[int]:
        if not fit:
            return self.model.tokenize(text, add_special=add_special)
        try:
            return self.model.tokenize(text, add_special=add_special, most=self.n_ctx - 1)
        except TooManyTokensError as exc:
            raise PromptTooLongError(exc.count, self.n_ctx) from None

    def chat_prompt_length(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> int:
        """How many tokens `chat_prompt` makes, none built (`count_tokens` of any size): a
        text of over `PIECE_CHARS` characters is counted a piece at a time, which may be a
        few tokens off where two pieces meet."""
        text = self._render_chat(messages, tools)
        return self.model.count_in_pieces(text, add_special=self._add_bos(text))[0]

    def _add_bos(self, text: str) -> bool:
        """Templates that write the BOS themselves must not get a second from the tokenizer."""
        model = self.model
        return not (model.add_bos and text.startswith(model.token_text(model.bos)))

    def chat_text(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> str:
        """The rendered conversation (with its `tools`' definitions) without the BOS the
        tokenizer adds, as llama-server's `/apply-template` gives it: tokenized with the BOS,
        it is `chat_prompt`'s tokens."""
        model = self.model
        text = self._render_chat(messages, tools)
        bos = model.token_text(model.bos)
        return text.removeprefix(bos) if model.add_bos else text

    def _render_chat(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] = ()
    ) -> str:
        model = self.model
        template = model.chat_template
        if not template:
            raise UsageError(
                f"{model.path.name} has no chat template: use --raw to send the "
                f"prompt as plain text"
            )
        return render_chat(
            template,
            template_messages(messages),
            model=model.path.name,
            bos=model.token_text(model.bos),
            eos=model.token_text(model.eos),
            tools=tools,
        )

    def infill_prompt(
        self,
        prefix: str,
        suffix: str,
        *,
        prompt: str = "",
        extra: Sequence[ExtraChunk] = (),
        max_tokens: int = 256,
        filename: str = "",
    ) -> InfillPrompt:
        """A fill-in-the-middle prompt (see `localspec.fim`) leaving room for `max_tokens`.

        Room for at most half the context is reserved, so a large `max_tokens` cannot push
        out a prompt that fits; generation then stops when the context is full.
        """
        reserve = max(1, min(max_tokens, self.n_ctx // 2))
        return infill_prompt(
            self.model,
            prefix,
            suffix,
            prompt=prompt,
            extra=extra,
            budget=self.n_ctx - reserve,
            filename=filename,
        )

    @property
    def supports_fim(self) -> bool:
        return supports_fim(self.model)
