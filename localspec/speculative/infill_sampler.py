"""llama.cpp's `infill` sampler stage (`llama_sampler_infill_apply`), on plain arrays.

Fill-in-the-middle clients (llama.vim: `["top_k", "top_p", "infill"]`) put it last so that an
editor gets either a confident piece of text or nothing. On the candidates the chain has left:

1. softmax; if 3 * p(EOG) * n_candidates > p(text), keep only the end-of-generation tokens;
2. otherwise, where one candidate's piece is a prefix of another's, merge the less probable of
   the two into the more probable (in llama.cpp's order: by decreasing logit, each candidate
   against every other, a merged one taking no further part);
3. drop text tokens below 0.2; if no text token is left, end the generation (one EOG token);
4. renormalise and drop text tokens below 1 / (n_text + 1). EOG tokens are always kept.

As in llama.cpp, the merged probabilities only decide which candidates survive: the draw that
follows is a softmax of the survivors' logits, as llama.cpp's `dist` recomputes it.

The prefix merge compares candidates pairwise. After a top_k cut there are few of them; over a
whole vocabulary (152k tokens) it is restricted to the most probable candidates that hold all
but `TAIL_MASS` of the probability, at most `MERGE_MAX` of them. The neglected tail is below
the 0.2 threshold anyway, so the result can differ from llama.cpp's only where its mass, folded
into a kept candidate, would have pushed that candidate across a threshold.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from localspec.speculative.protocols import Vocabulary

F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]
Ids = npt.NDArray[np.intp]

MERGE_MAX = 1024
"""The most candidates the prefix merge compares (all of them up to this many)."""
TAIL_MASS = 1e-4
"""Above `MERGE_MAX` candidates: the probability the least probable ones left out may hold."""
TEXT_MIN = 0.2
"""llama.cpp's first threshold for a text candidate's merged probability."""


class InfillVocab:
    """What the stage needs of the vocabulary: pieces (control tokens render as nothing, as
    llama.cpp's `token_to_piece` without special rendering) and the end-of-generation set,
    built once from the `Vocabulary` on first use and kept (one per engine)."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self._eog: Mask | None = None

    def eog(self, n_vocab: int) -> Mask:
        if self._eog is None or self._eog.shape[0] != n_vocab:
            is_eog = self.vocabulary.is_end_of_generation
            self._eog = np.fromiter((is_eog(t) for t in range(n_vocab)), bool, n_vocab)
        return self._eog

    def piece(self, token: int) -> bytes:
        return self.vocabulary.piece(token)

    def end(self, n_vocab: int) -> int | None:
        """The token the stage ends a generation with: llama.cpp takes the vocabulary's EOT
        (else EOS); every EOG token ends a generation alike, so this is the first of them."""
        ends = np.flatnonzero(self.eog(n_vocab))
        return int(ends[0]) if ends.size else None


def apply_infill(z: F64, keep: Mask, vocab: InfillVocab) -> tuple[F64, Mask]:
    """The stage on logits `z` and the candidate mask `keep`; returns the new pair."""
    cand = np.flatnonzero(keep & np.isfinite(z))
    result = infill_keep(cand, z[cand], vocab, z.shape[0], lambda t: bool(np.isfinite(z[t])))
    if result is None:
        return z, keep
    kept, ended = result
    if not ended:
        return z, _mask(z, kept)
    out = z.copy()
    out[kept] = 1.0
    return out, _mask(z, kept)


def infill_keep(
    cand: Ids, logits: F64, vocab: InfillVocab, n_vocab: int, finite: Callable[[int], bool]
) -> tuple[Ids, bool] | None:
    """The stage on candidates `cand` (ascending) with `logits`: None where it changes
    nothing, else the tokens it keeps and whether that is the end token, whose logit becomes
    1 (`finite(token)`: whether a token outside `cand` still has a finite logit)."""
    live = np.isfinite(logits)
    cand, logits = cand[live], logits[live]
    if cand.size == 0:
        return None
    p = np.exp(logits - logits.max())
    p /= p.sum()
    is_eog = vocab.eog(n_vocab)[cand]
    if 3.0 * p[is_eog].sum() * cand.size > p[~is_eog].sum():
        return cand[is_eog], False
    head = _head(logits, p)
    merged = p[head]  # a copy, merged in place
    dead = np.zeros(cand.size, dtype=bool)
    dead[head] = ~_merge([vocab.piece(int(t)) for t in cand[head]], merged)
    p[head] = merged
    first = ~dead & ((p >= TEXT_MIN) | is_eog)
    n_text = int((first & ~is_eog).sum())
    if n_text == 0:
        return _end(cand[np.argmax(logits)], vocab, n_vocab, finite)
    share = p / p[first].sum()
    second = first & ((share >= 1.0 / (n_text + 1)) | is_eog)
    return cand[second], False


def _mask(z: F64, tokens: Ids) -> Mask:
    keep = np.zeros(z.shape[0], dtype=bool)
    keep[tokens] = True
    return keep


def _head(logits: F64, p: F64) -> npt.NDArray[np.intp]:
    """The candidates the prefix merge compares, by decreasing logit (ties: lower id first,
    llama.cpp's order up to its unstable sort): all, or the most probable (module docstring).
    A text candidate left out has p below `TEXT_MIN`, so only its mass is neglected."""
    if p.size <= MERGE_MAX:
        return np.argsort(-logits, kind="stable")
    top = np.sort(np.argpartition(-logits, MERGE_MAX)[:MERGE_MAX])
    top = top[np.argsort(-logits[top], kind="stable")]
    reach = int(np.searchsorted(np.cumsum(p[top]), 1.0 - TAIL_MASS)) + 1
    return top[:reach]


def _merge(pieces: list[bytes], p: F64) -> Mask:
    """llama.cpp's prefix merge, in its loop order, on probabilities sorted by decreasing
    logit (`p` updated in place); returns which candidates are still alive. Only pairs where
    one piece starts with the other change anything, so the loop visits just those."""
    first_of: dict[bytes, list[int]] = {}
    for i, piece in enumerate(pieces):
        if piece:
            first_of.setdefault(piece, []).append(i)
    longer: list[list[int]] = [[] for _ in pieces]  # i0 -> the i1 whose piece starts with i0's
    for i1, piece in enumerate(pieces):
        for end in range(1, len(piece) + 1):
            for i0 in first_of.get(piece[:end], ()):
                if i0 != i1:
                    longer[i0].append(i1)
    alive = np.ones(len(pieces), dtype=bool)
    for i0, others in enumerate(longer):
        for i1 in others:
            if not alive[i0]:
                break
            if not alive[i1]:
                continue
            dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
            p[dst] += p[src]
            p[src] = 0.0
            alive[src] = False
    return alive


def _end(
    best: np.intp, vocab: InfillVocab, n_vocab: int, finite: Callable[[int], bool]
) -> tuple[Ids, bool]:
    """No text candidate is confident enough: end the generation (llama.cpp's EOT). Where the
    vocabulary has no EOG token, or a constraint forbids it, the most probable candidate."""
    end = vocab.end(n_vocab)
    if end is None or not finite(end):
        return np.array([best], dtype=np.intp), False
    return np.array([end], dtype=np.intp), True
