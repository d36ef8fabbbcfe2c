"""Memory planning from a model config alone (no weights): the decode peak and the largest batch that fits
(`memory`), and the masked family's peak (`masked_memory`). `harness.runner.batch_plan` asks them per family."""
