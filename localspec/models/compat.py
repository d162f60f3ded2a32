"""Can these two GGUF files work as a speculative pair? Checked from their vocabularies only."""

from __future__ import annotations

from pathlib import Path

from localspec.errors import IncompatibleDraftError, LocalspecError
from localspec.llama.model import LlamaModel, ModelSettings, ensure_same_vocabulary

_SPECIAL_ROLES = ("eot", "fim_prefix", "fim_suffix", "fim_middle", "fim_pad")


def pair_problems(target: Path, draft: Path) -> list[str]:
    """What stops `draft` from drafting for `target` (empty when the pair is compatible).

    Loads vocabularies only (no weights), so checking a 14B pair takes about a second.
    """
    problems: list[str] = []
    vocab_only = ModelSettings(n_gpu_layers=0, vocab_only=True)
    try:
        with LlamaModel(target, vocab_only) as t, LlamaModel(draft, vocab_only) as d:
            try:
                ensure_same_vocabulary(t, d)
            except IncompatibleDraftError as exc:
                problems.append(str(exc))
            for role in _SPECIAL_ROLES:
                if t.special_token(role) != d.special_token(role):
                    problems.append(
                        f"special token {role}: target {t.special_token(role)}, "
                        f"draft {d.special_token(role)}"
                    )
            if not t.chat_template:
                problems.append("the target has no chat template (chat needs --raw)")
    except LocalspecError as exc:
        problems.append(str(exc))
    return problems
