"""Hydra sweeper `hydra/sweeper=optuna_moo`: multi-objective sampler search on current Optuna (see
harness.analysis.search)."""
