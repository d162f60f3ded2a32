"""The speculative engine: proposers, acceptance rule, sampling, statistics. No I/O."""
