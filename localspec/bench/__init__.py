"""The benchmark behind `localspec bench`: workloads, modes, the interleaved runner, baselines
(llama-cpp-python's prompt lookup, llama.cpp's llama-server) and the report.

Everything localspec itself runs goes through `Runtime.generate`, the one generation API, so
the bench measures exactly what the other surfaces use.
"""
