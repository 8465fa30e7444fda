"""Benchmarks. ``python -m bench`` (``make bench``) runs the side-by-side suite of issue 7.

Every figure the suite reports is a ratio of two things measured in the same run on the same
machine; see ``bench/run_all.py`` and ``docs/PERFORMANCE.md``. ``bench/stage_latency.py`` (per
stage latency) and ``bench/gpu/`` (GPU throughput) are separate scripts.
"""
