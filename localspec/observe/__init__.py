"""Watching speculation over days: what each finished generation showed (`Observation`), the
guards that act on it (a p95 latency and cost guard, acceptance drift), and its history.

Nothing here runs a model: the runtime hands each finished generation over as an
`Observation`, and surfaces export it (`/metrics`), persist it (`localspec stats`) or show it.
"""
