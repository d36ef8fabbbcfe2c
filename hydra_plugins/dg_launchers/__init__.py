"""Hydra launchers: `hydra/launcher=ray` (one Ray task per sweep point) and the local launchers' GPU guard."""
