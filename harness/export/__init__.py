"""Exports of finished runs and sweeps in the community's formats: `python -m harness.export FORMAT PATH...`.

Formats (each from the runs' own samples, `harness.export.runs`): `eee` (Every Eval Ever records), `hf` (Hugging
Face `.eval_results/` YAML), `d3llm` (d3LLM's AUP leaderboard CSV and points), `parallelbench` (not yet: waits for
the ParallelBench tasks). docs/run_card.md says where each figure goes.
"""
