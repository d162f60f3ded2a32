"""Tests of `localspec bench`: workloads, modes, runner, baselines and report."""
