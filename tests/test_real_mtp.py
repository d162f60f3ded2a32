"""The real-model tier for MTP drafting (marker real_model): a GGUF that carries its MTP layers.

No such model is in the shared set the other real-model tests use, so this tier names its file
in LOCALSPEC_MTP_MODEL (a Qwen3.5/3.6 GGUF converted with its NextN block, e.g. from a
`*-MTP-GGUF` repository; `localspec models` says whether a file has one) and skips, saying so,
without it. What the tiny qwen35 shows exactly (tests/speculative/test_mtp.py), this checks on
trained weights: greedy MTP drafting gives plain decoding's answer (a divergence tolerated at a
near-tie only, as in tests/test_real_pair.py) and the trained head's drafts are mostly accepted.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from localspec import Message, Runtime, RuntimeSettings, SpecMode, SpecSettings
from localspec.llama.mtp_layers import mtp_layers
from tests.test_real_pair import NEAR_TIE, PROMPTS, generate, top2_gap

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    named = os.environ.get("LOCALSPEC_MTP_MODEL")
    if not named:
        pytest.skip("set LOCALSPEC_MTP_MODEL to a GGUF with MTP layers (e.g. Qwen3.5 with MTP)")
    path = Path(named)
    found = mtp_layers(path)
    assert found.usable, f"{path}: {found.describe()}"
    with Runtime(RuntimeSettings(target=path, mtp=True, n_ctx=2048)) as loaded:
        yield loaded


@pytest.mark.parametrize("k", [2, 4])
def test_greedy_mtp_drafting_matches_plain_decoding(runtime: Runtime, k: int) -> None:
    accepted = drafted = tolerated = 0
    for prompt in PROMPTS:
        plain = generate(runtime, prompt, SpecSettings(SpecMode.OFF))
        fast = generate(runtime, prompt, SpecSettings(SpecMode.DRAFT, draft_max=k, p_min=0.0))
        accepted += fast.stats.accepted
        drafted += fast.stats.drafted
        if fast.tokens == plain.tokens:
            continue
        at = next(
            (i for i, (a, b) in enumerate(zip(plain.tokens, fast.tokens, strict=False)) if a != b),
            min(len(plain.tokens), len(fast.tokens)),
        )
        prompt_tokens = runtime.prompts.chat_prompt([Message("user", prompt)])  # generate()'s
        gap = top2_gap(runtime, prompt_tokens + plain.tokens[:at])
        print(f"mtp k={k}: diverged at token {at} of {prompt[:30]!r}, top-2 gap {gap:.3f}")
        assert gap < NEAR_TIE
        tolerated += 1
    assert tolerated <= 1
    # a trained head, unlike a random one, gets a fair share of its drafts accepted (a loose floor)
    assert accepted > 0.3 * drafted, f"{accepted} of {drafted} drafted tokens accepted"
