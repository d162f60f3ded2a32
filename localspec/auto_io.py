"""The I/O side of `auto`: measuring this machine, and remembering what the tuner learned.

Calibration times the target verifying batches of 1..k_max+1 tokens, the draft producing one
token and catching up on a batch of tokens, and measures how much each batch size rounds the
target's logits away from one-token decoding (what tie-safe greedy verification needs), on
this machine with these models, threads and GPU layers. It takes a few seconds and is cached
in the user cache dir under a key of exactly those things plus the llama.cpp build, so a new
model, setting or build measures again. Acceptance statistics are kept per model pair and
route in the user data dir, so a new session starts from what earlier ones saw.

The tuner that decides with these (`localspec.speculative.tuner`) does no I/O; a runtime's
profile and per-route tuners, read and saved through here, are `localspec.calibration`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from localspec.llama.backend import WhichLogits
from localspec.llama.context import LlamaContext, Logits
from localspec.llama.mtp import MtpHead
from localspec.paths import cache_dir, data_dir, read_private_json, write_private
from localspec.speculative.costs import LiveCosts
from localspec.speculative.tuner import AcceptanceModel, HardwareProfile

_PROBE = 32  # tokens of context the probes decode after


def _probe_tokens(context: LlamaContext, count: int) -> list[int]:
    vocab = context.model.n_vocab
    return [(1000 + 37 * i) % vocab for i in range(count)]


def _probe_prefix(context: LlamaContext, prefix: list[int]) -> None:
    """Start a probe from `prefix` alone: decoded, not prefilled (a probe's prefix is no
    prompt for the prompt stores to keep)."""
    context.truncate(0)
    context.decode(prefix, logits="none")


def _median_seconds(
    context: LlamaContext,
    base: int,
    tokens: list[int],
    repeats: int,
    logits: WhichLogits = "all",
) -> float:
    """Median time of `repeats` decodes, after one untimed decode of the same shape.

    The first decode of a new batch shape builds llama.cpp's compute graph; timing it would
    overstate what every later step of that shape costs. `logits` as the timed work asks:
    verification reads every position's, a catch-up only the last.
    """
    times = []
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        context.decode(tokens, logits=logits)
        if attempt:
            times.append(time.perf_counter() - started)
        context.truncate(base)
    return statistics.median(times)


def measure_verify(context: LlamaContext, k_max: int, repeats: int = 3) -> tuple[float, ...]:
    """Seconds to verify a batch of b tokens, b = 1..k_max+1, made non-decreasing.

    Kernel changes make single measurements non-monotone (a batch of 6 measured faster than 5);
    a larger batch never really costs less, so each value is at least the one before.
    """
    probe = _probe_tokens(context, _PROBE + k_max + 1)
    _probe_prefix(context, probe[:_PROBE])
    costs: list[float] = []
    for batch in range(1, k_max + 2):
        cost = _median_seconds(context, _PROBE, probe[_PROBE : _PROBE + batch], repeats)
        costs.append(max(cost, costs[-1]) if costs else cost)
    context.truncate(0)  # probes leave nothing behind: a server's slot would keep it
    return tuple(costs)


def measure_draft(context: LlamaContext, repeats: int = 5) -> float:
    probe = _probe_tokens(context, _PROBE + 1)
    _probe_prefix(context, probe[:_PROBE])
    seconds = _median_seconds(context, _PROBE, probe[_PROBE:], repeats)
    context.truncate(0)
    return seconds


def measure_mtp(head: MtpHead, target: LlamaContext, repeats: int = 5, steps: int = 4) -> float:
    """Seconds per MTP draft step: the head's first step after the pending token, then
    `steps` more from its own state, as a draft of `steps + 1` tokens takes them (median of
    `repeats`, after an untimed one). Its following of the target is in every target decode,
    so the verification costs already hold it."""
    probe = _probe_tokens(target, _PROBE + 1)
    target.prefill(probe[:_PROBE])
    times = []
    for attempt in range(repeats + 1):
        started = time.perf_counter()
        head.first(probe)
        for token in probe[:steps]:
            head.advance(token)
        if attempt:
            times.append((time.perf_counter() - started) / (steps + 1))
    return statistics.median(times)


_CATCHUP = 64  # tokens caught up in one batch: a prompt's or a few hundred missed tokens' share


def measure_catchup(context: LlamaContext, repeats: int = 3) -> float:
    """Seconds per token for the draft to catch up on a batch of tokens it has not seen."""
    probe = _probe_tokens(context, _PROBE + _CATCHUP)
    _probe_prefix(context, probe[:_PROBE])
    seconds = _median_seconds(context, _PROBE, probe[_PROBE:], repeats, logits="last")
    context.truncate(0)
    return seconds / _CATCHUP


# Real code for the kernel-noise probe: rounding differences show on the logits a model gives
# text it understands, and random token ids would make every position a near-tie.
_NOISE_TEXT = (
    "def merge_sorted(left, right):\n"
    '    """Merge two sorted lists into one sorted list."""\n'
    "    result = []\n"
    "    i = j = 0\n"
    "    while i < len(left) and j < len(right):\n"
    "        if left[i] <= right[j]:\n"
    "            result.append(left[i])\n"
    "            i += 1\n"
    "        else:\n"
    "            result.append(right[j])\n"
    "            j += 1\n"
    "    result.extend(left[i:])\n"
    "    result.extend(right[j:])\n"
    "    return result\n"
)
_NOISE_PREFIX = 8  # tokens before the positions compared in the short probe
_NOISE_POSITIONS = 40  # positions compared per batch size: a few seconds on a 2-core CPU
# The long probe: from 512 cells of cache on, llama.cpp's CPU flash attention splits a
# one-token decode's keys among the threads and merges their partial sums, while a batch of
# 2 or more takes each row whole, so the two round apart only in long contexts (docs/exactness.md)
_NOISE_LONG_PREFIX = 560
_NOISE_LONG_POSITIONS = 24
_NOISE_TOP = 16  # a gap change matters only among tokens near the top
KV_DRIFT = float(np.finfo(np.float32).tiny)
"""The noise a batch size is given when its logits matched one-token decoding's but the keys
and values it wrote did not: not exact, though no top-token gap moved."""


def _gap_change(batched: Logits, single: Logits) -> float:
    """How much batching moved any of the top tokens' logits relative to the best one's."""
    top = np.argpartition(-single, _NOISE_TOP)[:_NOISE_TOP]
    best = top[np.argmax(single[top])]
    delta = batched[top] - single[top]
    return float(np.abs(delta - delta[list(top).index(best)]).max())


def measure_tie_noise(context: LlamaContext, k_max: int) -> tuple[float, ...]:
    """Per batch size b = 1..k_max+1, the largest top-gap change verifying b tokens at once
    makes against decoding them one at a time (0 for b = 1), at a short context and, where
    the context can hold it, a long one; 0 only where every row's logits and every key and
    value the batches wrote were bit-identical to one-token decoding's (`KV_DRIFT` where
    only the cache differed).

    Greedy verification decodes drafts in chunks of the widest size measured 0, one token at
    a time where only b = 1 is (`localspec.speculative.ties`).
    """
    tokens = context.model.tokenize(_NOISE_TEXT, add_special=True, parse_special=False)
    again = context.model.tokenize(_NOISE_TEXT, add_special=False, parse_special=False)
    while len(tokens) < _NOISE_LONG_PREFIX + _NOISE_LONG_POSITIONS:
        tokens += again
    noise = _noise_at(context, tokens, _NOISE_PREFIX, _NOISE_POSITIONS, k_max)
    if context.n_ctx >= _NOISE_LONG_PREFIX + _NOISE_LONG_POSITIONS:
        long = _noise_at(context, tokens, _NOISE_LONG_PREFIX, _NOISE_LONG_POSITIONS, k_max)
        noise = [max(short, far) for short, far in zip(noise, long, strict=True)]
    context.truncate(0)
    return tuple(noise)


def _noise_at(
    context: LlamaContext, tokens: list[int], base: int, count: int, k_max: int
) -> list[float]:
    """`measure_tie_noise` after `base` tokens of context, over the next `count` positions:
    each batch size decodes them window by window, and its logits and the cache it leaves
    are compared with one-token decoding's."""
    base = min(base, len(tokens) - 1)
    compared = tokens[base : base + count]
    _probe_prefix(context, tokens[:base])
    single = [context.decode([token], logits="last")[0] for token in compared]
    covered = {batch: len(compared) // batch * batch for batch in range(2, k_max + 2)}
    reference: dict[int, bytes] = {}
    for length in sorted(set(covered.values()), reverse=True):
        context.truncate(base + length)
        reference[length] = _cache_digest(context)
    noise = [0.0]
    for batch in range(2, k_max + 2):
        worst = 0.0
        context.truncate(base)
        for start in range(0, covered[batch], batch):
            rows = context.decode(compared[start : start + batch], logits="all")
            for row, reference_row in zip(rows, single[start : start + batch], strict=True):
                worst = max(worst, _gap_change(row, reference_row))
        same_cache = _cache_digest(context) == reference[covered[batch]]
        noise.append(worst if same_cache else max(worst, KV_DRIFT))
    context.truncate(base)
    return noise


def _cache_digest(context: LlamaContext) -> bytes:
    """A digest of the KV cache's bytes: the probe compares a cache with up to `k_max` others,
    and holding them whole would cost the peak memory a few hundred MB on a 4k context."""
    return hashlib.sha256(context.save_state().data).digest()


def _file_id(path: Path | None) -> str:
    if path is None:
        return "-"
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def calibration_key(
    target: Path,
    draft: Path | None,
    threads: int,
    gpu_layers: tuple[int, int],
    k_max: int,
    *,
    flash_attn: str,
    value_cache: str = "f16",
    mtp: bool = False,
) -> str:
    """What a calibration depends on; flash attention and the value cache's type
    (`value_cache`) change both the verification costs and the kernels whose rounding the tie
    noise measures; an MTP head (`mtp`) is the draft and is in every verification."""
    parts = [
        _file_id(target),
        "mtp" if mtp else _file_id(draft),
        str(threads),
        str(gpu_layers),
        str(k_max),
        f"flash-attn:{flash_attn}",
        f"value-cache:{value_cache}",
        llama_cpp.__version__,
        "tie-noise+catch-up+kv-long",  # profiles measured before these probes are measured again
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def pair_key(target: Path, draft: Path | None, *, mtp: bool = False) -> str:
    """What acceptance is kept under: the two files' names (an MTP head: "mtp")."""
    second = "mtp" if mtp else draft.name if draft else "-"
    return hashlib.sha256(f"{target.name}|{second}".encode()).hexdigest()[:16]


def _times(values: object, *, empty: bool = True) -> bool:
    """Whether `values` are seconds as the tuner measures them: finite and not negative."""
    if not isinstance(values, list | tuple) or (not values and not empty):
        return False
    return all(isinstance(v, int | float) and math.isfinite(v) and v >= 0 for v in values)


def _measured(profile: HardwareProfile) -> bool:
    """Whether a stored calibration holds what one measures (a hand-edited or damaged file
    may hold NaN, negative or no costs, which the tuner would divide by)."""
    optional = [t for t in (profile.draft_s, profile.catchup_s) if t is not None]
    return (
        _times(profile.verify_s, empty=False)
        and all(t > 0 for t in profile.verify_s)
        and _times(optional)
        and _times(profile.tie_noise)
    )


def _counts(rows: object) -> bool:
    """Whether `rows` are acceptance counts: pairs of finite, non-negative numbers."""
    return isinstance(rows, list) and all(
        isinstance(row, list) and len(row) == 2 and _times(row) for row in rows
    )


class TunerStore:
    """JSON files: calibrations (cache dir), acceptance statistics and live costs (data dir)."""

    def __init__(self) -> None:
        self.calibration_file = cache_dir() / "calibration.json"
        self.acceptance_file = data_dir() / "acceptance.json"
        # what steps cost as measured (machine, models and settings: the calibration's key)
        self.costs_file = data_dir() / "costs.json"

    @staticmethod
    def _read(path: Path) -> dict[str, Any]:
        try:
            data = read_private_json(path)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    @staticmethod
    def _write(path: Path, data: dict[str, Any]) -> None:
        # atomic (a killed process never leaves half a file) and private: what the tuner
        # learned says what the user works on
        write_private(path, json.dumps(data))

    def profile(self, key: str) -> HardwareProfile | None:
        raw = self._read(self.calibration_file).get(key)
        try:
            profile = HardwareProfile.from_dict(raw) if isinstance(raw, dict) else None
        except (KeyError, TypeError, ValueError):
            return None
        return profile if profile is not None and _measured(profile) else None

    def save_profile(self, key: str, profile: HardwareProfile) -> None:
        data = self._read(self.calibration_file)
        data[key] = profile.to_dict()
        self._write(self.calibration_file, data)

    def costs(self, key: str, catchup_s: float) -> LiveCosts | None:
        """The live costs a process learned for this calibration `key`, if one saved any
        (`localspec.speculative.costs`); None where there are none or they do not read."""
        raw = self._read(self.costs_file).get(key)
        try:
            return LiveCosts.from_dict(raw, catchup_s) if isinstance(raw, dict) else None
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def save_costs(self, key: str, costs: LiveCosts) -> None:
        data = self._read(self.costs_file)
        data[key] = costs.to_dict()
        self._write(self.costs_file, data)

    def forget_costs(self, key: str) -> None:
        """Drop the costs learned against a calibration that has just been measured again."""
        data = self._read(self.costs_file)
        if data.pop(key, None) is not None:
            self._write(self.costs_file, data)

    def acceptance(self, key: str) -> AcceptanceModel:
        raw = self._read(self.acceptance_file).get(key)
        model = AcceptanceModel()
        if isinstance(raw, dict):
            model.counts = {k: rows for k, rows in raw.items() if _counts(rows)}
        return model

    def save_acceptance(self, key: str, model: AcceptanceModel) -> None:
        data = self._read(self.acceptance_file)
        data[key] = model.counts
        self._write(self.acceptance_file, data)
