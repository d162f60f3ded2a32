"""What-if: replay a benchmark's real outputs against other drafting policies and machines.

`localspec bench --json` keeps every mode's output tokens. Plain decoding's (`off`) are the
target's own greedy answers, and under greedy decoding they decide everything speculation
can gain: which n-gram drafts would be accepted follows from the tokens alone, and which
draft-model tokens would be follows from one teacher-forced pass of the draft over prompt
and answer (its greedy token and that token's probability at every position). That makes a
`Trace` per prompt, recorded here on real models, which `localspec.speculative.simulate` replays
under any `HardwareProfile`: this machine's calibration, the measured profiles shipped in
`localspec/profiles/`, any `localspec tune --save-profile` file, or an assumed GPU
(`localspec.bench.profiles`). No model is run per policy,
so a grid of policies costs seconds and has no timing noise.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from localspec.bench.contender import Prompt
from localspec.context_files import RESULTS_LIMIT, read_text_file
from localspec.errors import UsageError
from localspec.llama.context import LlamaContext
from localspec.runtime import route_key
from localspec.speculative.costs import LiveCosts
from localspec.speculative.draft_model import PairVocab, top_probability
from localspec.speculative.settings import DEFAULT_P_MIN, SpecSettings
from localspec.speculative.simulate import (
    HYBRID,
    AutoPolicy,
    FixedPolicy,
    ReplayPolicy,
    Trace,
    hindsight,
    replay,
    replay_guard,
)
from localspec.speculative.suffix import SuffixStore
from localspec.speculative.tuner import DRAFT, NGRAM, NONE, HardwareProfile

# Draft costs the profile leaves out, charged in every replay: each draft-model step costs
# about one more draft token (catching up on the target's own token, the step's own work;
# measured here: k drafted tokens took ~k + 0.9), and returning after sitting out costs the
# profile's catch-up per token (measured, else the tuner's CATCHUP_PRIOR draft tokens each).
DRAFT_STEP_OVERHEAD = 1.0
HINDSIGHT = "hindsight"
ALL = "all"
_CHUNK = 64  # logits rows per decode: contexts keep at most 65 output rows


@dataclass(frozen=True)
class Recorded:
    """A benchmark's plain-decoding outputs, by workload id, and the models that made them."""

    target: Path
    draft: Path | None
    n_ctx: int
    threads: int
    max_tokens: int
    outputs: dict[str, list[int]]


def read_results(path: Path) -> Recorded:
    """The `off` outputs of a `localspec bench --json` file, with a clear error if unusable."""
    try:
        doc = json.loads(read_text_file(path, limit=RESULTS_LIMIT))
        settings = doc["settings"]
        outputs = {
            str(run["workload"]): [int(t) for t in run["tokens"]]
            for run in doc["runs"]
            if run["mode"] == "off" and run.get("repeat", 0) == 0
        }
        draft = settings.get("draft")
        recorded = Recorded(
            target=Path(settings["target"]),
            draft=Path(draft) if draft else None,
            n_ctx=int(settings["n_ctx"]),
            threads=int(settings["threads"]),
            max_tokens=int(settings["max_tokens"]),
            outputs=outputs,
        )
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise UsageError(
            f"{path} is not a `localspec bench --json` results file ({exc!r}): "
            "run `localspec bench --json FILE` first"
        ) from exc
    if not outputs:
        raise UsageError(f"{path} has no `off` runs to replay")
    return recorded


def draft_predictions(
    context: LlamaContext,
    prompt: Sequence[int],
    output: Sequence[int],
    target_vocab: int | None = None,
) -> tuple[tuple[bool, ...], tuple[float, ...]]:
    """Whether the draft's greedy token equals the output at each position, and its
    probability, given the true text before it: one batched pass, no generation.

    Where the target's vocabulary (`target_vocab` ids) is padded apart from the draft's,
    the draft's rows are fitted to the target's ids as the live draft's are (`PairVocab`),
    and from a token the draft lacks on it predicts nothing, as the live draft drafts
    nothing from there (`DraftModelProposer.can_draft`)."""
    own = context.model.n_vocab
    fit = PairVocab(own, target_vocab).fit if target_vocab not in (None, own) else None
    feed = [*prompt, *output[:-1]]
    lacking = next((i for i, t in enumerate(feed) if t >= own), len(feed))
    if lacking < len(prompt):
        return (False,) * len(output), (0.0,) * len(output)
    unread = len(feed) - lacking
    context.prefill(prompt[:-1])
    feed = feed[len(prompt) - 1 : lacking]
    agrees: list[bool] = []
    confidence: list[float] = []
    for start in range(0, len(feed), _CHUNK):
        chunk = feed[start : start + _CHUNK]
        rows = context.decode(chunk, logits="all")
        for row, truth in zip(rows, output[start : start + len(chunk)], strict=True):
            best, probability = top_probability(row if fit is None else fit(row))
            agrees.append(best == truth)
            confidence.append(probability)
    return (*agrees, *(False,) * unread), (*confidence, *(0.0,) * unread)


def record_traces(
    prompts: Sequence[Prompt],
    outputs: dict[str, list[int]],
    draft: LlamaContext | None,
    max_tokens: int | None = None,
    target_vocab: int | None = None,
) -> list[Trace]:
    """One trace per prompt that has a recorded output; draft columns only with a draft
    (`target_vocab`: the target's vocabulary size, see `draft_predictions`). An output
    shorter than the run's `max_tokens` ended by itself (None: every one did)."""
    traces = []
    for prompt in prompts:
        output = outputs.get(prompt.workload.id)
        if not output:
            continue
        if draft is not None:
            agrees, confidence = draft_predictions(draft, prompt.tokens, output, target_vocab)
        else:
            agrees, confidence = (False,) * len(output), ()
        traces.append(
            Trace(
                tuple(prompt.tokens),
                tuple(output),
                agrees,
                prompt.workload.category,
                confidence,
                prompt.regions,
                ended=max_tokens is None or len(output) < max_tokens,
                route=route_key(prompt.route, prompt.workload.output_constraint()),
            )
        )
    return traces


def policies(
    profile: HardwareProfile, spec: SpecSettings, with_draft: bool
) -> dict[str, Callable[[], ReplayPolicy]]:
    """The modes `localspec bench` runs, as replayable policies, at their default settings."""
    found: dict[str, Callable[[], ReplayPolicy]] = {
        "ngram": partial(FixedPolicy, NGRAM, spec.ngram_draft_max, spec.ngram_min_match),
    }
    if with_draft:
        for k in (1, 2, 4, 8):  # 1-2: what may pay on short answers (an editor's FIM)
            found[f"draft:{k}"] = partial(FixedPolicy, DRAFT, k, 1, DEFAULT_P_MIN)
        found["hybrid"] = partial(
            FixedPolicy, HYBRID, spec.draft_max, spec.ngram_min_match, DEFAULT_P_MIN
        )
    found["auto"] = partial(AutoPolicy, profile)
    found["auto+no-suffix"] = partial(AutoPolicy, profile, suffix=False)
    return found


def predict(
    traces: Sequence[Trace], profile: HardwareProfile, spec: SpecSettings | None = None
) -> dict[str, dict[str, float]]:
    """Per category (and "all"): each policy's median predicted speed relative to plain
    decoding, plus `hindsight`, the most any policy with these proposers could reach (see
    `replay_session`)."""
    ratios: dict[str, dict[str, list[float]]] = {}
    for trace, row in zip(traces, replay_session(traces, profile, spec), strict=True):
        table = ratios.setdefault(trace.category, {})
        for name, ratio in row.items():
            table.setdefault(name, []).append(ratio)
    everything: dict[str, list[float]] = {}
    for table in ratios.values():
        for name, values in table.items():
            everything.setdefault(name, []).extend(values)
    ratios[ALL] = everything
    return {
        category: {name: statistics.median(values) for name, values in table.items()}
        for category, table in ratios.items()
    }


def replay_session(
    traces: Sequence[Trace], profile: HardwareProfile, spec: SpecSettings | None = None
) -> list[dict[str, float]]:
    """Each trace's speed under each policy relative to plain decoding, the traces replayed
    as one session in their order, as the runtime would have served them:

    - the suffix store holds the earlier traces' prompts and answers (as the bench's store
      does), never the replayed trace's own;
    - a policy that learns (auto) goes on from what the earlier traces of the same route
      (`Trace.route`: complete, infill, a constraint's kind) taught it, as the runtime
      keeps one tuner per route for its whole life, and one set of measured costs for
      all its routes (one machine). A tuner made new for every answer would price each
      one's first steps from its priors, which no session after its first request does.
    """
    with_draft = profile.draft_s is not None and any(t.draft_confidence for t in traces)
    if not with_draft:
        profile = replace(profile, draft_s=None)
    spec = spec or SpecSettings()
    chosen = policies(profile, spec, with_draft)
    guard = replay_guard(profile, SpecSettings())  # the replayed policies' own settings
    session = ReplaySession()
    store = SuffixStore()
    rows = []
    for trace in traces:
        with store.holding():
            plain = replay(trace, FixedPolicy(NONE, 0), profile, store=store).tokens_per_second
            speeds = {
                name: replay(
                    trace,
                    session.policy(name, trace.route, make),
                    profile,
                    draft_step_overhead=DRAFT_STEP_OVERHEAD,
                    catchup_per_token=profile.catchup_per_token,
                    store=store,
                ).tokens_per_second
                for name, make in chosen.items()
            }
            speeds[HINDSIGHT] = hindsight(
                trace,
                profile,
                draft_step_overhead=DRAFT_STEP_OVERHEAD,
                store=store,
                chunk=guard.exact_width if guard else None,
            ).tokens_per_second
        rows.append({name: speed / plain for name, speed in speeds.items()})
    return rows


class ReplaySession:
    """The replayed session's policies: one per (mode, route), and per mode one set of
    measured costs that every route's tuner shares, as the runtime's do."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], ReplayPolicy] = {}
        self._costs: dict[str, LiveCosts] = {}

    def policy(self, name: str, route: str, make: Callable[[], ReplayPolicy]) -> ReplayPolicy:
        found = self._kept.get((name, route))
        if found is None:
            found = self._kept[name, route] = make()
            if isinstance(found, AutoPolicy):
                found.tuner.costs = self._costs.setdefault(name, found.tuner.costs)
        return found


def format_predictions(predictions: dict[str, dict[str, dict[str, float]]]) -> str:
    """One Markdown table per profile: categories down, policies across."""
    blocks = []
    for profile_name, table in predictions.items():
        names = list(next(iter(table.values())))
        lines = [
            f"predicted speed vs. plain decoding on {profile_name}",
            "",
            "| category | " + " | ".join(names) + " |",
            "| --- |" + " ---: |" * len(names),
        ]
        for category, row in table.items():
            lines.append(f"| {category} | " + " | ".join(f"{row[n]:.2f}x" for n in names) + " |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
