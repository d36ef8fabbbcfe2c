"""Benchmarks: side-by-side ratios against transformers' reference paths, JSON under outputs/bench/."""
