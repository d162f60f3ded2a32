"""The `infill` stage against llama.cpp's rules (`llama_sampler_infill_apply`): crafted
distributions for each branch, and a line-by-line port of the C loop on random candidates."""

from __future__ import annotations

import math

import numpy as np

from localspec.speculative.infill_sampler import MERGE_MAX, InfillVocab, _head, apply_infill
from localspec.speculative.sampling import SamplingSettings, distribution, greedy_token

EOG = 0  # every vocabulary here: token 0 ends the generation and renders as nothing


class Pieces:
    """A `Vocabulary` from a list of pieces; token 0 (and `more_eog`) end the generation."""

    def __init__(self, pieces: list[bytes], more_eog: frozenset[int] = frozenset()) -> None:
        self.pieces = pieces
        self.eog = {EOG, *more_eog}

    def piece(self, token: int) -> bytes:
        return self.pieces[token]

    def is_end_of_generation(self, token: int) -> bool:
        return token in self.eog


def infill(pieces: list[bytes], probs: list[float], *stages: str, **values: float) -> np.ndarray:
    """The draw's distribution after `stages` (default: the infill stage alone)."""
    settings = SamplingSettings(samplers=stages or ("infill",), **values)  # type: ignore[arg-type]
    z = np.log(np.array(probs, dtype=np.float32))
    return distribution(z, [], settings, InfillVocab(Pieces(pieces)))


def softmax_over(probs: list[float], kept: list[int]) -> np.ndarray:
    out = np.zeros(len(probs))
    out[kept] = np.array(probs)[kept] / sum(probs[i] for i in kept)
    return out


def test_likely_end_keeps_only_the_end_of_generation_tokens() -> None:
    # 3 * .1 * 4 candidates = 1.2 > .9 of text
    pieces = [b"", b"a", b"b", b"c"]
    np.testing.assert_allclose(infill(pieces, [0.1, 0.5, 0.3, 0.1]), [1, 0, 0, 0], atol=1e-7)
    # after top_k 2 the same end probability (.1 of .9 renormalised) is below the bar:
    # 3 * .125 * 2 = .75 < .875, and the text candidates go on to the thresholds
    got = infill(pieces, [0.1, 0.5, 0.3, 0.1], "top_k", "infill", top_k=2)
    np.testing.assert_allclose(got, softmax_over([0.1, 0.5, 0.3, 0.1], [1, 2]), atol=1e-6)


def test_prefix_merge_decides_survival_and_the_logits_decide_the_draw() -> None:
    #         eog   x      z      y      a      ab
    probs = [0.01, 0.22, 0.23, 0.19, 0.18, 0.17]
    pieces = [b"", b"x", b"z", b"y", b"a", b"ab"]
    # a absorbs ab (.35): x, z, a pass .2, y does not; renormalised over .81 each passes 1/4
    expected = softmax_over(probs, [0, 1, 2, 4])
    np.testing.assert_allclose(infill(pieces, probs), expected, atol=1e-6)


def test_merge_goes_into_the_more_probable_token() -> None:
    probs = [0.01, 0.3, 0.5, 0.19]
    pieces = [b"", b"a", b"ab", b"b"]  # "a" is a prefix of the more probable "ab"
    np.testing.assert_allclose(infill(pieces, probs), softmax_over(probs, [0, 2]), atol=1e-6)


def test_second_threshold_one_over_n_text_plus_one() -> None:
    probs = [0.02, 0.5, 0.27, 0.21]  # three pass .2; then 1/4: .21 does not
    pieces = [b"", b"a", b"b", b"c"]
    np.testing.assert_allclose(infill(pieces, probs), softmax_over(probs, [0, 1, 2]), atol=1e-6)


def test_no_confident_text_ends_the_generation() -> None:
    probs = [0.01, *[0.99 / 6] * 6]  # no prefixes, every text token below .2
    pieces = [b"", b"a", b"b", b"c", b"d", b"e", b"f"]
    np.testing.assert_allclose(infill(pieces, probs), [1, 0, 0, 0, 0, 0, 0])


def test_greedy_after_infill_takes_what_infill_left() -> None:
    probs = [0.01, 0.19, 0.18, 0.17, 0.16, 0.29]
    pieces = [b"", b"x", b"a", b"ab", b"abc", b"q"]  # a gathers .51; x (.19) is dropped
    settings = SamplingSettings(samplers=("infill", "temperature"), temperature=0.0)
    z = np.log(np.array(probs, dtype=np.float32))
    vocab = InfillVocab(Pieces(pieces))
    assert greedy_token(z, [], settings, vocab) == 5  # q .29 still has the highest logit
    probs[5] = 0.15
    probs[1] = 0.33
    z = np.log(np.array(probs, dtype=np.float32))
    assert greedy_token(z, [], settings, vocab) == 1
    pieces[2:5] = [b"a", b"b", b"c"]  # without the merge only x passes: still x
    assert greedy_token(z, [], settings, InfillVocab(Pieces(pieces))) == 1


def reference(pieces: list[bytes], eog: set[int], logits: list[float]) -> set[int]:
    """llama.cpp's loop as written (sorted candidates, quadratic merge); the kept ids."""
    order = sorted(range(len(logits)), key=lambda t: -logits[t])
    z = [logits[t] for t in order]
    e = [math.exp(v - z[0]) for v in z]
    p = [v / sum(e) for v in e]
    is_eog = [t in eog for t in order]
    p_eog = sum(v for v, end in zip(p, is_eog, strict=True) if end)
    if 3 * p_eog * len(order) > 1 - p_eog:
        return {t for t, end in zip(order, is_eog, strict=True) if end}
    for i0 in range(len(order)):
        for i1 in range(len(order)):
            if z[i0] == -math.inf:
                break
            if i0 == i1 or z[i1] == -math.inf:
                continue
            a, b = pieces[order[i0]], pieces[order[i1]]
            if a and b.startswith(a):
                dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                p[dst] += p[src]
                z[src], p[src] = -math.inf, 0.0
    first = [i for i in range(len(order)) if p[i] >= 0.2 or is_eog[i]]
    n_text = sum(not is_eog[i] for i in first)
    if n_text == 0:
        return {EOG}
    total = sum(p[i] for i in first)
    kept = [i for i in first if p[i] / total >= 1 / (n_text + 1) or is_eog[i]]
    return {order[i] for i in kept if z[i] != -math.inf}


def test_matches_a_port_of_llama_cpp_on_random_candidates() -> None:
    rng = np.random.default_rng(4081)
    letters = [bytes([c]) for c in b"ab"]
    branches = {"end": 0, "one": 0, "several": 0}
    for _ in range(300):
        n = int(rng.integers(4, 24))
        pieces = [b""] + [
            b"".join(letters[i] for i in rng.integers(0, 2, size=rng.integers(1, 4)))
            for _ in range(n - 1)
        ]
        eog = {EOG, *(t for t in range(1, n) if rng.random() < 0.05)}
        sharp = float(rng.choice([0.5, 2.0, 4.0]))
        logits = rng.normal(size=n) * sharp
        logits[0] -= float(rng.choice([0.0, 3.0, 8.0]))
        vocab = InfillVocab(Pieces(pieces, frozenset(eog - {EOG})))
        z64 = logits.astype(np.float64)
        _, keep = apply_infill(z64, np.ones(n, dtype=bool), vocab)
        expected = reference(pieces, eog, list(z64))
        assert set(np.flatnonzero(keep)) == expected, (pieces, eog, logits)
        kind = "end" if expected <= eog else "several" if len(expected - eog) > 1 else "one"
        branches[kind] += 1
    assert min(branches.values()) > 10, branches


def test_a_whole_vocabulary_merges_only_its_head() -> None:
    """152k candidates, no top_k before: only the most probable are compared pairwise."""
    n = 152_064
    vocab = Pieces([b""] + [b"t%d" % t for t in range(1, n)])  # t1 is a prefix of t10, ...
    z = np.full(n, -30.0)
    z[[1, 10, 2]] = [5.0, 3.0, 4.8]  # .51, .07, .42: t1 gathers t10; both pass 1/3
    settings = SamplingSettings(samplers=("infill",))
    p = distribution(z.astype(np.float32), [], settings, InfillVocab(vocab))
    assert set(np.flatnonzero(p)) == {0, 1, 2}
    p_all = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
    head = _head(z, p_all)
    assert head.size <= MERGE_MAX
    assert list(head[:3]) == [1, 2, 10]
