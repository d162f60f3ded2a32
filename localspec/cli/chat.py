"""`localspec chat`: resolve the models like the other commands, then run the Textual app.

Files are found (or fetched, with progress on stderr) before the app starts; loading them
happens inside the app, so the terminal shows a loading indicator instead of freezing. The app
is imported only here: `localspec` itself never depends on the TUI.
"""

from __future__ import annotations

import argparse

from localspec.cli.options import draft_need, runtime_settings, sampling_settings, spec_settings
from localspec.errors import UsageError
from localspec.models import load_registry


def run(args: argparse.Namespace) -> int:
    from tui.app import ChatApp  # noqa: PLC0415  (the TUI's import cost is chat's alone)
    from tui.settings import ChatSettings, Launch  # noqa: PLC0415

    spec = spec_settings(args)
    sampling = sampling_settings(args)
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be at least 1")
    defaults = ChatSettings(
        system=args.system or "",
        spec_mode=spec.mode,
        draft_max=spec.draft_max,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=args.max_tokens,
    )
    settings = runtime_settings(args, draft_need(spec))
    launch = Launch(
        runtime=settings,
        model_label=args.target or args.model or load_registry().default_pair,
        defaults=defaults,
        sampling=sampling,
        spec=spec,
        stop=tuple(args.stop),
        conversation=args.conversation,
        offline=args.offline,
    )
    ChatApp(launch).run()
    return 0
