"""CPU time per verified position of the sampling arithmetic, without a model.

    python -m localspec.bench.sampling_micro [--rounds 15] [--positions 20]

What the engine's verification does per draft position once llama.cpp has produced the row
(`localspec.speculative.verify_step.verify_step`'s `target_at`, then `verify_draft`): greedy
takes the argmax (`greedy_token`), sampling builds the distribution and draws from it. The
rows are 151,936 float32 logits (Qwen's vocabulary) shaped like a language model's: a few
dozen tokens well above a normal background, and, as a worst case, a flat row.

Cases run interleaved, round after round, each round timing `--positions` rows, so drift in
the machine's speed spreads over every case alike; the report is the median and the
interquartile range over rounds, in microseconds of process CPU time per position.

The script only uses APIs older than itself, so an earlier checkout can be measured too:
`PYTHONPATH=<checkout> python localspec/bench/sampling_micro.py`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from localspec.speculative.sampling import Sampler, SamplingSettings, draw

N_VOCAB = 151_936
Row = npt.NDArray[np.float32]
LLAMA_DEFAULTS = SamplingSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)


def peaked_rows(count: int, seed: int = 0) -> list[Row]:
    """Rows like a language model's: a normal background, a few dozen clear favourites."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(count):
        row = rng.normal(0.0, 2.0, N_VOCAB)
        row[rng.choice(N_VOCAB, 30, replace=False)] += rng.uniform(8.0, 18.0, 30)
        rows.append(row.astype(np.float32))
    return rows


def flat_rows(count: int, seed: int = 1) -> list[Row]:
    """The worst case for top-p: mass spread over thousands of tokens."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0.0, 0.5, N_VOCAB).astype(np.float32) for _ in range(count)]


def _greedy(sampler: Sampler) -> Callable[[Row], object]:
    def position(row: Row) -> object:
        return sampler.greedy_token(row, [])

    return position


def _sampled(sampler: Sampler) -> Callable[[Row], object]:
    def position(row: Row) -> object:
        return draw(sampler.distribution(row, []), sampler.rng)

    return position


def cases(positions: int) -> dict[str, tuple[Callable[[Row], object], list[Row]]]:
    """Each case: what one verified position costs, and the rows it runs on."""
    peaked, flat = peaked_rows(positions), flat_rows(positions)
    rng = np.random.default_rng(0)
    top_p = SamplingSettings(temperature=1.0, top_p=0.95)
    return {
        "greedy (argmax)": (_greedy(Sampler(SamplingSettings(), rng)), peaked),
        "sampled, llama.cpp defaults": (_sampled(Sampler(LLAMA_DEFAULTS, rng)), peaked),
        "sampled, top-p 0.95 only": (_sampled(Sampler(top_p, rng)), peaked),
        "sampled, top-p 0.95, flat row": (_sampled(Sampler(top_p, rng)), flat),
    }


def measure(rounds: int, positions: int) -> dict[str, list[float]]:
    """Microseconds of CPU time per position, one figure per round for each case."""
    todo = cases(positions)
    times: dict[str, list[float]] = {name: [] for name in todo}
    for _ in range(rounds):
        for name, (position, rows) in todo.items():
            start = time.process_time_ns()
            for row in rows:
                position(row)
            times[name].append((time.process_time_ns() - start) / 1e3 / len(rows))
    return times


def report(times: dict[str, list[float]]) -> str:
    lines = [f"{'case':32} {'median us':>10} {'IQR us':>16}"]
    for name, values in times.items():
        q1, median, q3 = np.percentile(values, [25, 50, 75])
        lines.append(f"{name:32} {median:10.0f} {q1:7.0f} - {q3:6.0f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--positions", type=int, default=20)
    args = parser.parse_args(argv)
    measure(1, 2)  # warm numpy's code paths and caches
    print(report(measure(args.rounds, args.positions)))


if __name__ == "__main__":
    main()
