"""The MTP proposer on real llama.cpp: a tiny Qwen3.5 whose GGUF carries a NextN block.

The same exactness as the draft model's (tests/speculative/test_engine.py): greedy MTP
speculation reproduces plain decoding token for token (a divergence tolerated only at a
near-tie of plain decoding's own), and sampled MTP speculation reproduces the target's
distribution (chi-square over the first two tokens), the head's drafts being a draft
distribution q that min(1, p/q) corrects. The "exact" head computes what the target does (see
tests/tiny_mtp_model.py), the "noisy" one agrees with it on about a third of its drafts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from localspec import (
    Finished,
    GenerationRequest,
    SamplingSettings,
    SpecMode,
    SpecSettings,
)
from localspec.errors import ModelLoadError
from localspec.llama import LlamaContext, LlamaModel, ModelSettings
from localspec.llama.mtp import MtpHead
from localspec.speculative.engine import Engine
from localspec.speculative.mtp import MTP_SOURCE, MtpProposer
from tests.speculative.test_engine import NEAR_TIE, PROMPTS, exact_joint, joint_pvalue
from tests.tiny_mtp_model import TinyMtpSpec, write_tiny_mtp_model

NOISY = 0.2  # the head's weight noise: about a third of its greedy drafts accepted
ROLLBACK = 16  # recurrent snapshots: the hybrid target drops rejected drafts without a rebuild


@dataclass
class Speculating:
    model: LlamaModel
    target: LlamaContext
    head: MtpHead
    engine: Engine


@pytest.fixture(scope="module", params=["exact", "noisy"])
def mtp(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Speculating]:
    noise = 0.0 if request.param == "exact" else NOISY
    path = tmp_path_factory.mktemp("mtp") / f"{request.param}.gguf"
    write_tiny_mtp_model(path, TinyMtpSpec(noise=noise))
    with (
        LlamaModel(path, ModelSettings(load_mtp=True)) as model,
        LlamaContext(model, 512, n_threads=1, rollback=ROLLBACK) as target,
        MtpHead(target, n_threads=1) as head,
    ):
        yield Speculating(model, target, head, Engine(target, model, draft=MtpProposer(head)))


def run(s: Speculating, tokens: list[int], spec: SpecSettings, **kwargs: object) -> Finished:
    request = GenerationRequest(prompt=tokens, ignore_eos=True, spec=spec, **kwargs)  # type: ignore[arg-type]
    done = list(s.engine.generate(request))[-1]
    assert isinstance(done, Finished)
    return done


def spec(mode: str, k: int = 4) -> SpecSettings:
    return SpecSettings(SpecMode(mode), draft_max=k, p_min=0.0)


def top2_gap(model: LlamaModel, tokens: list[int]) -> float:
    """Plain decoding's top-2 logit gap after `tokens`, one token at a time."""
    with LlamaContext(model, 512, n_threads=1) as fresh:
        for token in tokens[:-1]:
            fresh.decode([token], logits="none")
        logits = np.sort(fresh.decode(tokens[-1:], logits="last")[0])
    return float(logits[-1] - logits[-2])


@pytest.mark.parametrize("k", [1, 2, 4, 8])
def test_greedy_mtp_speculation_equals_plain_decoding(mtp: Speculating, k: int) -> None:
    tolerated = 0
    for prompt in PROMPTS:
        tokens = mtp.model.tokenize(prompt)
        plain = run(mtp, tokens, spec("off"), max_tokens=48)
        fast = run(mtp, tokens, spec("draft", k), max_tokens=48)
        assert fast.stats.drafted > 0
        # the head follows the target's cache: rollbacks and the next prompt included
        assert mtp.head.tokens == mtp.target.tokens
        if fast.tokens != plain.tokens:
            pairs = enumerate(zip(plain.tokens, fast.tokens, strict=True))
            at = next(i for i, (a, b) in pairs if a != b)
            gap = top2_gap(mtp.model, tokens + plain.tokens[:at])
            assert gap < NEAR_TIE, f"k={k} diverged at token {at} with top-2 gap {gap}"
            tolerated += 1
    assert tolerated <= 1


def test_acceptance_follows_the_head(mtp: Speculating, request: pytest.FixtureRequest) -> None:
    """The exact head drafts the target's own tokens; the noisy one part of them (on a prompt
    whose continuation does not fall into a one-token loop, which any head predicts)."""
    tokens = mtp.model.tokenize(PROMPTS[0])
    stats = run(mtp, tokens, spec("draft", 4), max_tokens=64).stats
    if "exact" in request.node.callspec.id:
        assert stats.acceptance_rate > 0.95
    else:
        assert 0.15 < stats.acceptance_rate < 0.8


@pytest.mark.parametrize("mtp", ["noisy"], indirect=True)
def test_sampled_mtp_speculation_reproduces_the_target_distribution(mtp: Speculating) -> None:
    """Chi-square on the first two tokens over 1500 seeded generations: max_tokens=3 lets the
    first step draft two tokens, so both counted tokens pass through min(1, p/q). The noisy
    head only: its q differs from p, the case the rule must correct."""
    tokens = mtp.model.tokenize("ab ab ab ab ab ab ab ab")
    joint = exact_joint(mtp.model, tokens, ROLLBACK)
    counts = dict.fromkeys(joint, 0)
    drafted = accepted = 0
    n = 1500
    for seed in range(n):
        settings = SamplingSettings(temperature=1.0, top_k=3, seed=seed)
        done = run(mtp, tokens, spec("draft", 3), max_tokens=3, sampling=settings)
        counts[done.tokens[0], done.tokens[1]] += 1
        drafted += done.stats.drafted
        accepted += done.stats.accepted
    assert drafted >= 2 * n  # drafts on every run
    assert 0.05 * drafted < accepted < 0.95 * drafted  # both outcomes of the rule occur
    assert joint_pvalue(joint, counts) > 0.001


def test_drafts_name_their_source(mtp: Speculating) -> None:
    tokens = mtp.model.tokenize(PROMPTS[0])
    events = list(
        mtp.engine.generate(
            GenerationRequest(prompt=tokens, max_tokens=8, ignore_eos=True, spec=spec("draft"))
        )
    )
    assert {getattr(e, "source", MTP_SOURCE) for e in events[:-1]} <= {MTP_SOURCE, "target"}


def test_a_head_needs_the_mtp_layers_loaded(tmp_path: Path) -> None:
    with_mtp = write_tiny_mtp_model(tmp_path / "mtp.gguf")
    without = write_tiny_mtp_model(tmp_path / "plain.gguf", TinyMtpSpec(mtp=False))
    with LlamaModel(with_mtp) as model, LlamaContext(model, 64, n_threads=1) as target:
        assert model.n_layer_nextn == 1
        with pytest.raises(ModelLoadError, match="load_mtp=True"):
            MtpHead(target)
    with (
        LlamaModel(without, ModelSettings(load_mtp=True)) as model,
        LlamaContext(model, 64, n_threads=1) as target,
        pytest.raises(ModelLoadError, match="no MTP"),
    ):
        MtpHead(target)
    with LlamaModel(with_mtp) as model, pytest.raises(ModelLoadError, match="batch of over 17"):
        LlamaContext(model, 64, n_batch=16, rollback=16)  # llama.cpp would abort instead


def test_the_head_follows_batches_rollbacks_and_restored_prompts(tmp_path: Path) -> None:
    """A prompt decoded in several batches is followed batch by batch (the exact head's first
    draft is then the target's own continuation); a prompt whose cache the target restores
    from a saved state, without decoding it, is filled in with zero states, its last
    `max_fill` positions only (a window): the output stays the target's."""
    path = write_tiny_mtp_model(tmp_path / "exact.gguf")
    with (
        LlamaModel(path, ModelSettings(load_mtp=True)) as model,
        LlamaContext(model, 512, n_batch=32, n_threads=1, rollback=ROLLBACK) as target,
        MtpHead(target, n_threads=1, max_fill=40) as head,
    ):
        engine = Engine(target, model, draft=MtpProposer(head))
        speculating = Speculating(model, target, head, engine)
        tokens = model.tokenize(PROMPTS[0] * 3)  # ~140 tokens: five batches
        plain = run(speculating, tokens, spec("off"), max_tokens=16)
        assert head.start == 0 and head.tokens == target.tokens
        fast = run(speculating, tokens, spec("draft", 4), max_tokens=16)
        assert fast.tokens == plain.tokens
        assert fast.stats.acceptance_rate > 0.95
        saved = target.save_state()
        run(speculating, model.tokenize(PROMPTS[1]), spec("draft", 4), max_tokens=4)
        target.restore_state(saved)  # the cache is back, the head saw no decode of it
        assert head.tokens != target.tokens
        again = run(speculating, tokens, spec("draft", 4), max_tokens=16)
        assert again.tokens == plain.tokens
        assert head.start == len(tokens) - 1 - 40  # the window: the prompt's last 40 pairs
        assert head.tokens == target.tokens[head.start :]
        # a short new prompt starts the head from position 0 again
        short = model.tokenize(PROMPTS[2])
        run(speculating, short, spec("draft", 4), max_tokens=4)
        assert head.start == 0 and head.tokens == target.tokens


def test_each_token_is_paired_with_the_target_state_before_it(tmp_path: Path) -> None:
    """With a head that passes its paired state to the LM head, its logits for the pending
    token are the target's logits at the position before (scaled): the pairing llama-server
    uses, (t_p, h_{p-1}), through a prompt in batches, a rollback and the head's own steps."""
    path = write_tiny_mtp_model(tmp_path / "state.gguf", TinyMtpSpec(reads="state"))
    with (
        LlamaModel(path, ModelSettings(load_mtp=True)) as model,
        LlamaContext(model, 512, n_batch=24, n_threads=1, rollback=ROLLBACK) as target,
        MtpHead(target, n_threads=1) as head,
    ):
        tokens = model.tokenize(PROMPTS[0])
        rows = target.decode(tokens[:-1], logits="all")  # rows[i]: the logits after tokens[i]

        def same_up_to_scale(a: np.ndarray, b: np.ndarray) -> bool:
            return float(np.corrcoef(a, b)[0, 1]) > 0.9999

        assert same_up_to_scale(head.first(tokens), rows[-1])
        assert not same_up_to_scale(head.first(tokens), rows[-2])  # the test can tell
        # its own step pairs the drafted token with its output state: the same direction
        assert same_up_to_scale(head.advance(tokens[0]), rows[-1])
        target.truncate(len(tokens) - 6)  # a rejected draft's rollback (no rebuild)
        target.decode(tokens[-6:-1], logits="none")
        assert same_up_to_scale(head.first(tokens), rows[-1])
        assert head.tokens == target.tokens
