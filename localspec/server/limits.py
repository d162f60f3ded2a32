"""Limits on what one request may make the server hold or do, beyond the body's own
(`body`): stop strings (`StopLimits`). A request past a limit is a 400 naming it and the
`serve` option that raises it; the constraint limits live with the constraints
(`localspec.constraints.limits`), since `complete` compiles constraints too.
"""

from __future__ import annotations

from localspec.server.wire import ApiError
from localspec.speculative.textstream import StopLimits


def checked_stops(stops: tuple[str, ...], limits: StopLimits) -> tuple[str, ...]:
    """`stops`, or a 400 when there are more or longer ones than `limits` allow."""
    if len(stops) > limits.max_stops:
        raise ApiError(
            400,
            f"'stop' has {len(stops)} strings; this server accepts at most {limits.max_stops} "
            f"(`localspec serve --max-stops N` raises it)",
            param="stop",
            code="too_many_stops",
        )
    longest = max((len(stop) for stop in stops), default=0)
    if longest > limits.max_length:
        raise ApiError(
            400,
            f"'stop' holds a string of {longest} characters; this server accepts at most "
            f"{limits.max_length} (`localspec serve --max-stop-length CHARS` raises it)",
            param="stop",
            code="stop_too_long",
        )
    return stops
