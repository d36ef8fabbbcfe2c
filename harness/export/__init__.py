"""Exports of finished runs and sweeps in the community's formats: `python -m harness.export FORMAT PATH...`.

Formats (each from the runs' own samples, `harness.export.runs`): `eee` (Every Eval Ever records), `hf` (Hugging
Face `.eval_results/` YAML), `d3llm` (d3LLM's AUP leaderboard CSV and points), `parallelbench` (the leaderboard's
`data/` files, `harness.analysis.parallelbench_export`). docs/run_card.md says where each figure goes.
"""
