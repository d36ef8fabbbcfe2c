"""CPU benchmarks: ratios measured side by side in one process against a reference (transformers' `generate()`, a
plain loop, diffusers), run by `make bench` (`bench.cpu.run_all`). Imports nothing of `bench.gpu`."""
