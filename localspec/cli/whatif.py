"""`localspec whatif`: a benchmark's real answers replayed under other policies and machines.

Reads a `localspec bench --json` file, loads the models it names (the draft for one
teacher-forced pass per prompt), and prints each policy's predicted speed relative to plain
decoding, per category, on this machine's calibration, on every measured profile shipped in
`localspec/profiles/`, on an assumed GPU (labelled so), and on any profile saved with another
machine's `localspec tune --save-profile`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from localspec.bench.profiles import (
    ASSUMED_GPU,
    ASSUMED_GPU_LABEL,
    read_profile,
    shipped_profiles,
)
from localspec.bench.runner import render_prompts
from localspec.bench.whatif import format_predictions, predict, read_results, record_traces
from localspec.bench.workloads import load_workloads
from localspec.errors import UsageError
from localspec.loading import RuntimeSettings
from localspec.paths import write_private
from localspec.runtime import Runtime
from localspec.speculative.tuner import HardwareProfile


def _note(message: str) -> None:
    print(f"localspec whatif: {message}", file=sys.stderr, flush=True)


def whatif_command(args: argparse.Namespace) -> int:
    if args.json is not None and not args.json.parent.is_dir():  # before the replay, not after
        raise UsageError(f"cannot write {args.json}: the folder {args.json.parent} does not exist")
    recorded = read_results(args.results)
    profiles: dict[str, HardwareProfile] = {}
    extra = {f"{path} (localspec tune)": read_profile(path) for path in args.profile}
    workloads = [w for w in load_workloads(args.workloads) if w.id in recorded.outputs]
    missing = set(recorded.outputs) - {w.id for w in workloads}
    if missing:
        raise UsageError(
            f"{args.results} has answers to workloads not in the workload file: "
            f"{', '.join(sorted(missing))}; pass the --workloads file the bench ran"
        )
    settings = RuntimeSettings(
        target=recorded.target,
        draft=recorded.draft,
        n_ctx=recorded.n_ctx,
        n_threads=recorded.threads,
        ngram_cache=False,
    )
    with Runtime(settings, notify=_note) as runtime:
        prompts, _ = render_prompts(runtime, workloads, recorded.max_tokens)
        if recorded.draft is not None:
            runtime.load_draft()
            _note(f"teacher-forcing the draft over {len(prompts)} answers")
        traces = record_traces(
            prompts,
            recorded.outputs,
            runtime.models.draft_context,
            recorded.max_tokens,
            runtime.models.target_model.n_vocab,
        )
        if not args.no_machine:
            profiles["this machine (calibrated)"] = runtime.hardware_profile()
    profiles.update(shipped_profiles())
    profiles[ASSUMED_GPU_LABEL] = ASSUMED_GPU
    profiles.update(extra)
    predictions = {name: predict(traces, profile) for name, profile in profiles.items()}
    print(format_predictions(predictions))
    if args.json:
        try:
            write_private(Path(args.json), json.dumps(predictions, indent=1), own_folder=False)
        except OSError as exc:
            raise UsageError(f"cannot write {args.json}: {exc.strerror}") from exc
    return 0
