"""`RuntimeStatus`, the server's one view of the target context, reads the context when asked
(`localspec.runtime_status`), on the tiny target."""

from __future__ import annotations

import ast
from pathlib import Path

from localspec.llama.context import LlamaContext
from localspec.llama.model import LlamaModel
from localspec.llama.prompt_store import PromptStore
from localspec.runtime_status import RuntimeStatus, SavedStates
from tests.llama.helpers import random_tokens

N = 32  # the chunk reuse threshold
SERVER = Path(__file__).resolve().parent.parent / "localspec" / "server"
CONTEXTS = {"target_context", "draft_context"}
"""`Models`' attributes that are llama.cpp contexts: the server reads them through
`Runtime.status` and holds them through `Runtime.hold_caches`, never by these names."""


def test_the_view_follows_the_context(model: LlamaModel, tmp_path: Path) -> None:
    """What a prefill processed, reused, parked and stored shows in the view it was read
    through before: the view holds no copy."""
    store = PromptStore(tmp_path / "states", 2**30, min_tokens=64)
    with LlamaContext(
        model, 512, n_batch=64, n_threads=1, prompt_cache_bytes=2**24, prompt_store=store
    ) as context:
        status = RuntimeStatus(context)
        assert (status.n_threads, status.piece) == (1, 64)
        assert (status.can_shift, status.flash_attn) == (context.can_shift, None)
        assert status.prompt_cache == SavedStates(2**24, 0, 0)
        assert status.prompt_store == SavedStates(2**30, 0, 0, 64)
        assert status.cached_tokens == 0 and status.prompt_progress == (0, 0)

        head, window = random_tokens(1, 10), random_tokens(2, 3 * N)
        context.prefill(head + window)
        assert status.cached_tokens == len(head) + len(window)
        assert status.prompt_store.entries == 1 and status.prompt_store.bytes > 0
        assert status.parked_tokens == 0 and status.parked_bytes == 0

        assert context.prefill(head + random_tokens(3, 8), reuse_min=N).reused == len(head)
        assert status.parked_tokens == len(window) and status.parked_bytes > 0
        assert context.prefill(head + window, reuse_min=N).reused == len(head) + len(window)
        assert status.parked_tokens == 0 and status.prompt_progress == (0, 0)


def test_stores_turned_off_read_as_zeros(model: LlamaModel) -> None:
    with LlamaContext(model, 256, n_batch=32, n_threads=1) as context:
        status = RuntimeStatus(context)
        assert status.prompt_cache == status.prompt_store == SavedStates()


def test_the_server_never_reaches_into_the_contexts() -> None:
    modules = sorted(SERVER.rglob("*.py"))
    assert len(modules) > 10  # the walk sees the server
    for path in modules:
        names = {
            node.attr
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute)
        }
        assert not names & CONTEXTS, f"{path.name} reaches {sorted(names & CONTEXTS)}"
