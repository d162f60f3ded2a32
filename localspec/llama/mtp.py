"""An MTP draft head: the NextN block a target GGUF carries, run as llama.cpp's MTP context.

Qwen3.5/3.6, GLM-4.5, DeepSeek-V3 and others ship NextN ("multi-token prediction") blocks
trained to predict the token after next from the target's hidden state and the next token's
embedding. llama.cpp runs them in a second context of type `LLAMA_CONTEXT_TYPE_MTP` over the
target model's own weights (loaded with `ModelSettings(load_mtp=True)`), with a KV cache of
its own that holds only the NextN layer. No second model file, no second vocabulary.

MTP position p holds the pair (token t_p, target hidden state h_{p-1}) and its output predicts
t_{p+1}; position 0 pairs t_0 with zeros, as llama-server does. The target gives its hidden
states ("nextn embeddings", `llama_get_embeddings_nextn`) for every token it decodes, and this
head consumes them in a decode hook of the target context (`LlamaContext.decode_hooks`), as
llama-server's `process()` does after each target batch: the MTP cache follows the target's
at the cost of one NextN layer per target token, and no hidden state is kept for long (the
last `KEEP_ROWS`, for the pair after a rollback). To draft, the pending token is paired with
the target's last hidden state, then each drafted token with the head's own output state.

Positions the target filled without decoding (a restored prompt state, shifted chunks, a
server's slot taking its turn) have no hidden state here: they are paired with zeros, which
makes the drafts there worse, never the output (verification alone decides what is emitted).
At most `max_fill` of them are filled, the last ones: a longer stretch leaves the head a
window of the text that starts there (as a draft model's context window does), rather than a
prompt's worth of NextN work for states that are not there anyway.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Sequence

import llama_cpp.llama_cpp as lc
import llama_cpp.llama_cpp_ext as ext
import numpy as np
import numpy.typing as npt

from localspec.errors import DecodeError, ModelLoadError
from localspec.lifetime import Closing
from localspec.llama.backend import DecodeTimes, set_fields
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.params import default_threads

_log = logging.getLogger(__name__)

Rows = npt.NDArray[np.float32]

KEEP_ROWS = 256
"""Target hidden states kept after a decode: a rollback re-pairs from one of the last few."""


class MtpHead(Closing):
    """The NextN head of `target`'s model, kept in step with `target`'s KV cache."""

    def __init__(
        self, target: LlamaContext, *, n_threads: int | None = None, max_fill: int | None = None
    ) -> None:
        """`max_fill`: the most positions filled without states at once (default a batch)."""
        model = target.model
        if model.n_layer_nextn == 0:
            raise ModelLoadError(f"{model.path.name} carries no MTP (NextN) layers")
        if not model.settings.load_mtp:
            raise ModelLoadError(
                f"{model.path.name} was loaded without its MTP layers: load it with "
                f"ModelSettings(load_mtp=True)"
            )
        params = lc.llama_context_default_params()
        threads = n_threads or default_threads()
        set_fields(
            params,
            n_ctx=target.n_ctx,
            n_batch=target.n_batch,
            n_ubatch=target.n_batch,
            n_seq_max=1,
            n_outputs_max=1,  # a draft step reads one row; catching up reads none
            n_threads=threads,
            n_threads_batch=threads,
            no_perf=True,
            ctx_type=lc.LLAMA_CONTEXT_TYPE_MTP,
            ctx_other=target.handle,
        )
        handle = lc.llama_init_from_model(model.handle, params)
        if not handle:
            raise ModelLoadError(
                f"llama.cpp could not create an MTP context for {model.path.name}: its "
                f"architecture may have no MTP graph in this build (see --verbose)"
            )
        self.handle = handle
        self.target = target
        self.n_ctx = target.n_ctx
        self.n_batch = target.n_batch
        self.n_vocab = model.n_vocab
        self.n_embd = int(lc.llama_model_n_embd_out(model.handle))
        self.timings = DecodeTimes()
        self._memory = lc.llama_get_memory(handle)
        self._batch = lc.llama_batch_ext_init(handle)
        self._pos = (lc.llama_pos * 4)()  # M-RoPE models read 4 positions, text tokens 1
        self.max_fill = max_fill or self.n_batch
        self._start = 0  # the first position holding a pair (> 0: a window, see the module)
        self._tokens: list[int] = []  # the token at each position from `_start` with a pair
        self._held = 0  # the end of the positions in the MTP cache (pairs, then draft steps)
        self._rows = np.zeros((0, self.n_embd), dtype=np.float32)  # recent target states
        self._rows_start = 0  # the position of `_rows[0]`
        self._state = np.zeros(self.n_embd, dtype=np.float32)  # the last draft step's output
        # every row of the target's batches (unmasked); only output rows of the head's own
        ext.llama_set_embeddings_nextn(target.handle, True, False)
        ext.llama_set_embeddings_nextn(handle, True, True)
        target.decode_hooks.append(self._follow)

    def close(self) -> None:
        if self.handle is not None:
            if self._follow in self.target.decode_hooks:
                self.target.decode_hooks.remove(self._follow)
            if self.target.handle is not None:
                ext.llama_set_embeddings_nextn(self.target.handle, False, False)
            lc.llama_batch_ext_free(self._batch)
            lc.llama_free(self.handle)
            self.handle = None

    @property
    def tokens(self) -> Sequence[int]:
        """The tokens whose pairs the head's cache holds, from position `start` (the target's
        cache from there, once followed)."""
        return tuple(self._tokens)

    @property
    def start(self) -> int:
        """The first position the head's cache holds a pair for (0 unless it is a window)."""
        return self._start

    # -- following the target ---------------------------------------------------------------
    def _follow(self, base: int, tokens: Sequence[int]) -> None:
        """The target decoded `tokens` at `base`..: pair each with the state before it. It
        runs inside the target's decode, so a failure of the head's own work must not fail
        the target's: the head starts over empty (its drafts get worse until it has caught
        up again; the answer is the target's either way)."""
        try:
            self._pair_decoded(base, tokens)
        except DecodeError as exc:
            _log.warning("the MTP head starts over: %s", exc)
            self._reset()

    def _reset(self) -> None:
        lc.llama_memory_clear(self._memory, True)
        self._held, self._start = 0, 0
        self._tokens.clear()
        self._forget_rows(0)

    def _pair_decoded(self, base: int, tokens: Sequence[int]) -> None:
        pointer = ext.llama_get_embeddings_nextn(self.target.handle)
        rows: Rows = np.ctypeslib.as_array(pointer, shape=(len(tokens), self.n_embd)).copy()
        self._catch_up(self.target.tokens[:base])
        self._pairs(base, tokens, np.concatenate([self._row(base - 1)[None], rows[:-1]]))
        self._forget_rows(base)
        if self._rows_start + len(self._rows) < base:  # a gap: what is kept does not join
            self._rows = self._rows[:0]
        self._rows = np.concatenate([self._rows, rows])[-KEEP_ROWS:]
        self._rows_start = base + len(tokens) - len(self._rows)

    def _forget_rows(self, position: int) -> None:
        """Drop the kept states from `position` on: they belong to tokens no longer there."""
        self._rows = self._rows[: max(0, position - self._rows_start)]

    def _row(self, position: int) -> Rows:
        """The target's hidden state at `position` if still kept, zeros otherwise."""
        at = position - self._rows_start
        if position < 0 or not 0 <= at < len(self._rows):
            return np.zeros(self.n_embd, dtype=np.float32)
        row: Rows = self._rows[at]
        return row

    def _catch_up(self, tokens: Sequence[int]) -> None:
        """Make the cache hold a pair for every one of `tokens` (the target's cache): reuse
        the common prefix, drop the rest (draft steps included), fill what is missing."""
        start = self._start
        end = min(start + len(self._tokens), len(tokens))
        keep = max(end, start)
        if self._tokens[: keep - start] != list(tokens[start:keep]):  # a restored cache
            pairs = zip(self._tokens, tokens[start:keep], strict=True)
            keep = start + next(i for i, (a, b) in enumerate(pairs) if a != b)
            self._forget_rows(keep)
        if keep == start or len(tokens) - keep > self.max_fill:
            # nothing to reuse, or too much to fill: a window of the last max_fill positions
            self._truncate(0)  # an empty cache may start at any position
            self._forget_rows(0)
            self._start = keep = max(0, len(tokens) - self.max_fill)
        self._truncate(keep)
        if keep < len(tokens):
            missing = tokens[keep:]
            states = np.stack([self._row(p - 1) for p in range(keep, len(tokens))])
            self._pairs(keep, missing, states)

    def _truncate(self, length: int) -> None:
        """Forget the positions from `length` on (pairs and draft steps)."""
        if length < self._held:
            if not lc.llama_memory_seq_rm(self._memory, 0, length, -1):
                raise DecodeError(f"the MTP head's cache could not drop positions {length}..")
            self._held = length
        del self._tokens[max(0, length - self._start) :]

    def _pairs(self, base: int, tokens: Sequence[int], states: Rows) -> None:
        """Decode (tokens[i], states[i]) at base + i, without outputs."""
        self._truncate(base)
        for start in range(0, len(tokens), self.n_batch):
            end = min(start + self.n_batch, len(tokens))
            self._decode(base + start, tokens[start:end], states[start:end], output=False)
        self._tokens.extend(tokens)

    # -- drafting ----------------------------------------------------------------------------
    def first(self, tokens: Sequence[int]) -> Logits:
        """The head's logits for the token after the pending one, `tokens[-1]`; the target's
        cache holds `tokens[:-1]` (the engine's invariant). Later draft steps `advance`."""
        held = tokens[:-1]
        self._catch_up(held)
        return self._step(len(held), tokens[-1], self._row(len(held) - 1))

    def advance(self, token: int) -> Logits:
        """The logits after the drafted `token`, paired with the last step's output state."""
        return self._step(self._held, token, self._state)

    def _step(self, position: int, token: int, state: Rows) -> Logits:
        if position >= self.n_ctx:
            raise DecodeError(f"an MTP draft step at {position} is past the {self.n_ctx} context")
        self._truncate(position)  # an earlier draft's steps
        self._decode(position, [token], state[None], output=True)
        self._state = np.ctypeslib.as_array(
            ext.llama_get_embeddings_nextn_ith(self.handle, 0), shape=(self.n_embd,)
        ).copy()
        logits: Logits = np.ctypeslib.as_array(
            lc.llama_get_logits_ith(self.handle, 0), shape=(self.n_vocab,)
        ).copy()
        return logits

    def _decode(self, base: int, tokens: Sequence[int], states: Rows, *, output: bool) -> None:
        """One `llama_process` of (token, state) pairs at consecutive positions from `base`;
        `output`: the last one's logits and output state are read afterwards."""
        batch, states = self._batch, np.ascontiguousarray(states, dtype=np.float32)
        lc.llama_batch_ext_clear(batch)
        row_bytes = self.n_embd * states.itemsize
        for i, token in enumerate(tokens):
            idx = lc.llama_batch_ext_add_token(batch, 0, token)
            self._pos[0] = base + i
            lc.llama_batch_ext_set_pos(batch, idx, self._pos)
            row = ctypes.cast(states.ctypes.data + i * row_bytes, ctypes.POINTER(ctypes.c_float))
            lc.llama_batch_ext_set_embd_token(batch, idx, lc.llama_embd(row, 1, self.n_embd))
            lc.llama_batch_ext_set_output_logits(batch, idx, output and i == len(tokens) - 1)
        started = time.perf_counter_ns()
        rc = lc.llama_process(self.handle, lc.LLAMA_PROCESS_TYPE_DECODE, batch)
        self.timings.decode_ns += time.perf_counter_ns() - started
        if rc != 0:
            self._truncate(base)
            raise DecodeError(f"the MTP head failed to decode at {base} (code {rc})")
        self._held = base + len(tokens)
