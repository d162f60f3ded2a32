"""`complete` without a server: load the models in this process and generate.

`args.constraint` (`--json-schema`, `--grammar`; see `constraint_args`) is compiled for the
model before anything is generated."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from localspec.cli.constraint_args import one_line, spaced
from localspec.cli.notice import notice
from localspec.cli.options import (
    draft_need,
    runtime_settings,
    sampling_settings,
    spec_settings,
    watched,
)
from localspec.cli.outcome import Outcome
from localspec.errors import ConstraintError, UsageError
from localspec.gpu import gpu_notice_once
from localspec.messages import Message
from localspec.runtime import Runtime
from localspec.speculative.engine import Finished, GenerationRequest, TextChunk
from localspec.speculative.sources import Span


def generate(args: argparse.Namespace, prompt: str, suffix: str | None) -> Iterator[str | Outcome]:
    spec = spec_settings(args)
    gpu_notice_once(notice)
    settings = watched(runtime_settings(args, draft_need(spec)), args)
    with Runtime(settings, notice) as runtime:
        runtime.watch.surface = "complete"
        constraint = spaced(args.constraint)
        if constraint is not None:
            try:
                runtime.check_constraint(constraint)
            except ConstraintError as exc:
                raise UsageError(one_line(str(exc))) from exc
        route = "complete"
        regions: tuple[Span, ...] = ()  # a FIM prompt's parts, for auto's n-gram lookup
        if suffix is not None:
            built = runtime.prompts.infill_prompt(prompt, suffix, max_tokens=args.max_tokens)
            tokens, route, regions = built.tokens, "infill", built.regions
        elif args.raw:
            tokens = runtime.prompts.tokenize(prompt)
        else:
            messages = [Message("system", args.system)] if args.system else []
            tokens = runtime.prompts.chat_prompt([*messages, Message("user", prompt)])
        request = GenerationRequest(
            prompt=tokens,
            max_tokens=args.max_tokens,
            sampling=sampling_settings(args),
            spec=spec,
            stop=tuple(args.stop),
            ignore_eos=args.ignore_eos,
            route=route,
            constraint=constraint,
            regions=regions,
        )
        for event in runtime.generate(request):
            if isinstance(event, TextChunk):
                if event.text:
                    yield event.text
            elif isinstance(event, Finished):
                stats = {**event.stats.to_dict(), "via": "in-process"}
                yield Outcome(event.finish_reason, stats)
