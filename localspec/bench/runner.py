"""Running every mode on every prompt, interleaved, through `Runtime.generate`.

Modes run prompt by prompt, all of one prompt back to back (so a ratio to `off` on that prompt
compares runs minutes apart at most), in an order shuffled afresh for every prompt and repeat
from a seeded generator: no mode systematically runs first, right after a long prefill, or last,
on a warmer machine, and a seed reruns the same orders. Each mode gets one short warm-up first.
localspec's modes share the one loaded runtime; baselines are opened only when asked for, and
any that cannot run is reported as skipped with the reason. A workload's constraint goes
into every localspec mode's request; baselines that take none skip those workloads.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from localspec.bench import memory
from localspec.bench.baselines import PromptLookupBaseline
from localspec.bench.contender import (
    Contender,
    ContenderError,
    Measured,
    Prompt,
    Sample,
    Skipped,
)
from localspec.bench.llama_server import open_server
from localspec.bench.modes import Kind, Mode
from localspec.bench.progress import Progress
from localspec.bench.report import first_difference
from localspec.bench.workloads import Workload
from localspec.errors import ConstraintError, UsageError
from localspec.messages import Message
from localspec.runtime import Runtime
from localspec.speculative.engine import Finished, GenerationRequest, SpecSettings
from localspec.speculative.suffix import SuffixStore
from localspec.speculative.ties import top_two_gap

WARMUP_TOKENS = 16
T = TypeVar("T")
G = TypeVar("G")


@dataclass(frozen=True)
class BenchOptions:
    repeats: int
    max_tokens: int
    llama_server: Path | None = None  # None: the server-* modes are reported as skipped
    seed: int = 0  # of the modes' shuffled order


@dataclass
class BenchResult:
    modes: list[str]  # those measured, in the order asked
    samples: list[Sample]
    skipped: list[Skipped]
    rss_method: str


class LocalspecContender:
    """One of localspec's own speculation modes on the shared runtime.

    Speed excludes prompt processing: the engine times the target's prefill apart, and the
    draft model, which would otherwise catch up on the prompt inside whichever draft-using
    mode happens to run first, gets the prompt here, untimed by the engine but reported as
    `draft_prefill_s`. The target gets all of the prompt but its last token here too, so
    that every mode decodes that token alone on the same cache: otherwise the mode that
    runs first on a prompt takes it in the prompt's batch and the others alone, the two
    round apart, and a near-tie in the answer tips (`auto` differed from `off` on gen-lru,
    a top-2 gap of 0.19, in every `bench --quick` where it ran first). Every mode thus
    starts from the same warm state, and its answer is comparable with `off`'s.
    """

    in_process = True
    constrains = True

    def __init__(self, mode: Mode, runtime: Runtime, spec: SpecSettings) -> None:
        self.mode = mode
        self._runtime = runtime
        self._spec = spec

    def run(self, prompt: Prompt, max_tokens: int) -> Measured:
        self._runtime.models.target_context.prefill(prompt.tokens[:-1])
        draft_prefill_s = 0.0
        draft = self._runtime.models.draft_context
        if draft is not None:
            started = time.perf_counter()
            draft.prefill(prompt.tokens[:-1])
            draft_prefill_s = time.perf_counter() - started
        request = GenerationRequest(
            prompt=prompt.tokens,
            max_tokens=max_tokens,
            spec=self._spec,
            route=prompt.route,
            constraint=prompt.workload.output_constraint(),
            regions=prompt.regions,
        )
        for event in self._runtime.generate(request):
            if isinstance(event, Finished):
                stats = event.stats
                return Measured(
                    tokens=event.tokens,
                    tokens_per_second=stats.tokens_per_second,
                    drafted=stats.drafted,
                    accepted=stats.accepted,
                    target_steps=stats.target_steps,
                    details={**stats.to_dict(), "draft_prefill_s": draft_prefill_s},
                )
        raise RuntimeError("generation ended without a Finished event")

    def close(self) -> None:
        """The runtime belongs to the caller."""


def render_prompts(
    runtime: Runtime, workloads: list[Workload], max_tokens: int
) -> tuple[list[Prompt], list[Skipped]]:
    """Chat workloads through the chat template, FIM workloads as infill prompts."""
    prompts: list[Prompt] = []
    skipped: list[Skipped] = []
    for workload in workloads:
        constraint = workload.output_constraint()
        if constraint is not None:
            try:
                runtime.check_constraint(constraint)
            except ConstraintError as exc:
                raise UsageError(f"workload {workload.id}: {exc}") from exc
        if not workload.is_fim:
            tokens = runtime.prompts.chat_prompt([Message("user", workload.prompt)])
            prompts.append(Prompt(workload, tokens, "complete"))
        elif runtime.prompts.supports_fim:
            infill = runtime.prompts.infill_prompt(
                workload.prefix, workload.suffix, extra=workload.extra, max_tokens=max_tokens
            )
            prompts.append(Prompt(workload, infill.tokens, "infill", infill.regions))
        else:
            skipped.append(
                Skipped(workload.id, "the target model has no fill-in-the-middle tokens")
            )
    if not prompts:
        raise UsageError("no workload can run with this model")
    # every mode must be able to generate all max_tokens: a run cut short by a full context
    # would compare different amounts of work
    longest = max(prompts, key=lambda p: len(p.tokens))
    if len(longest.tokens) + max_tokens > runtime.n_ctx:
        raise UsageError(
            f"workload {longest.workload.id} is {len(longest.tokens)} tokens; with "
            f"--max-tokens {max_tokens} it needs a context of {len(longest.tokens) + max_tokens}"
            f", but --ctx-size is {runtime.n_ctx}: raise --ctx-size or lower --max-tokens"
        )
    return prompts, skipped


def _open(
    modes: list[Mode],
    runtime: Runtime,
    options: BenchOptions,
    progress: Progress,
    stack: ExitStack,
) -> tuple[list[Contender], list[Skipped]]:
    contenders: list[Contender] = []
    skipped: list[Skipped] = []
    if any(m.uses_draft_model and m.kind is Kind.LOCALSPEC for m in modes):
        runtime.load_draft()
    threads = runtime.models.target_context.n_threads
    for mode in modes:
        if mode.kind is Kind.LOCALSPEC:
            assert mode.spec is not None
            contenders.append(LocalspecContender(mode, runtime, mode.spec))
        elif mode.kind is Kind.LCP_LOOKUP:
            progress.note(f"loading llama-cpp-python's Llama for {mode.name}")
            try:
                baseline = PromptLookupBaseline(mode, runtime)
            except ContenderError as exc:
                skipped.append(Skipped(mode.name, str(exc)))
            else:
                stack.callback(baseline.close)
                contenders.append(baseline)
        else:
            if options.llama_server is not None:
                progress.note(f"starting llama-server for {mode.name}")
            opened = open_server(mode, options.llama_server, runtime.settings, threads)
            if isinstance(opened, Skipped):
                skipped.append(opened)
            else:
                stack.callback(opened.close)
                contenders.append(opened)
    return contenders, skipped


def run_bench(
    runtime: Runtime,
    workloads: list[Workload],
    modes: list[Mode],
    options: BenchOptions,
    progress: Progress,
) -> BenchResult:
    prompts, skipped = render_prompts(runtime, workloads, options.max_tokens)
    with ExitStack() as stack:
        contenders, unavailable = _open(modes, runtime, options, progress, stack)
        skipped += unavailable
        contenders, failed = _warm_up(contenders, prompts[0], progress)
        skipped += failed
        samples, failed, rss_method = _interleave(
            contenders, prompts, options, progress, runtime.ngram.store
        )
        skipped += failed
    _measure_divergences(runtime, prompts, samples)
    measured = {s.mode for s in samples}
    return BenchResult([m.name for m in modes if m.name in measured], samples, skipped, rss_method)


def _measure_divergences(runtime: Runtime, prompts: list[Prompt], samples: list[Sample]) -> None:
    """For each run that differs from `off`, the top-2 logit gap plain decoding had where they
    part (`details["divergence"]`): a near-tie the kernels rounded apart is a small gap, a bug
    a large one. The gap is re-computed after a batched prefill of `off`'s tokens, so it is
    plain decoding's own up to the kernel noise."""
    off = {s.workload: s.tokens for s in samples if s.mode == "off"}
    prompt_of = {p.workload.id: p.tokens for p in prompts}
    for sample in samples:
        reference = off.get(sample.workload)
        if sample.mode == "off" or reference is None:
            continue
        at = first_difference(sample.tokens, reference)
        if at is None or at >= len(reference):
            continue
        logits = runtime.models.target_context.sync(prompt_of[sample.workload] + reference[:at])
        sample.details["divergence"] = {"at": at, "off_top2_gap": top_two_gap(logits)}


def _warm_up(
    contenders: list[Contender], prompt: Prompt, progress: Progress
) -> tuple[list[Contender], list[Skipped]]:
    """One short untimed generation per mode: first-touch costs (page faults, auto mode's
    one-time calibration, a server's first request) are not what the bench measures."""
    progress.note(f"warming up {len(contenders)} modes")
    ready: list[Contender] = []
    failed: list[Skipped] = []
    for contender in contenders:
        try:
            contender.run(prompt, WARMUP_TOKENS)
        except ContenderError as exc:
            failed.append(Skipped(contender.mode.name, f"failed during warm-up: {exc}"))
        else:
            ready.append(contender)
    return ready, failed


def _runs(contender: Contender, prompt: Prompt) -> bool:
    """Whether `contender` runs `prompt`: a constrained workload needs a mode that applies it."""
    return contender.constrains or prompt.workload.constraint is None


def _unconstrained(contenders: list[Contender], prompts: list[Prompt]) -> list[Skipped]:
    """The modes that skip the constrained workloads, each said once."""
    constrained = ", ".join(p.workload.id for p in prompts if p.workload.constraint is not None)
    if not constrained:
        return []
    reason = f"applies no output constraint: skipped {constrained}"
    return [Skipped(c.mode.name, reason) for c in contenders if not c.constrains]


def schedule(
    modes: list[T], groups: Sequence[G], repeats: int, seed: int
) -> Iterator[tuple[int, G, list[T]]]:
    """(repeat, group, modes in a shuffled order) for every group in every repeat.

    `modes` is read at each step, so a mode the caller removes (it failed) drops out of the
    orders still to come; the orders drawn depend only on the seed and what is left."""
    rng = random.Random(seed)
    for repeat in range(repeats):
        for group in groups:
            order = list(modes)
            rng.shuffle(order)
            yield repeat, group, order


def _interleave(
    contenders: list[Contender],
    prompts: list[Prompt],
    options: BenchOptions,
    progress: Progress,
    store: SuffixStore | None = None,
) -> tuple[list[Sample], list[Skipped], str]:
    """Every prompt in every mode, in shuffled orders, repeat after repeat.

    The suffix `store` learns as in a user's session, where each request is new: each
    repeat starts it empty (no mode drafts an answer it saw in the last repeat), and what
    one prompt's runs would teach it is stored only after all of its modes ran."""
    samples: list[Sample] = []
    failed = _unconstrained(contenders, prompts)
    active = list(contenders)
    per_run = memory.reset_peak()
    runs = sum(_runs(contender, prompt) for contender in active for prompt in prompts)
    progress.start(options.repeats * runs)
    session = -1
    for repeat, prompt, order in schedule(active, prompts, options.repeats, options.seed):
        if store is not None and repeat != session:
            store.clear()
            session = repeat
        with store.holding() if store is not None else nullcontext():
            for position, contender in enumerate(c for c in order if _runs(c, prompt)):
                try:
                    sample = _measure(contender, prompt, options.max_tokens, repeat, position)
                except ContenderError as exc:
                    name = contender.mode.name
                    failed.append(Skipped(name, f"failed on {prompt.workload.id}: {exc}"))
                    kept = [s for s in samples if s.mode != name]
                    planned = options.repeats * sum(_runs(contender, p) for p in prompts)
                    progress.drop(planned - (len(samples) - len(kept)))
                    samples = kept
                    active.remove(contender)
                    continue
                samples.append(sample)
                progress.run_done(prompt.workload.id, sample.mode, sample.tokens_per_second)
    progress.finish()
    return samples, failed, memory.PER_RUN if per_run else memory.LIFETIME


def _measure(
    contender: Contender, prompt: Prompt, max_tokens: int, repeat: int, position: int
) -> Sample:
    """One timed run, with the peak memory of this process (reset before it) or of the
    baseline's own."""
    if contender.in_process:
        memory.reset_peak()
    measured = contender.run(prompt, max_tokens)
    peak = memory.process_peak_bytes() if contender.in_process else measured.peak_rss_bytes
    return Sample(
        mode=contender.mode.name,
        workload=prompt.workload.id,
        category=prompt.workload.category,
        repeat=repeat,
        position=position,
        tokens=measured.tokens,
        tokens_per_second=measured.tokens_per_second,
        drafted=measured.drafted,
        accepted=measured.accepted,
        target_steps=measured.target_steps,
        peak_rss_bytes=peak,
        details=measured.details,
    )
