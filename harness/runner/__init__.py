"""Running one config: composing and checking it before any model loads (`configs`), decoding an eval's items
into per-sample records (`evaluate`), the run directory and its files (`store`), which weights were loaded
(`identity`) and what batching changed (`batch_check`). `harness.run` is the entry point that wires them."""
