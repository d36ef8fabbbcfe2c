"""`python -m harness.strategies_check`: the ported strategies' rules against their authors' code
(`checks.py`: the table of checks and the command; `replay.py`, `fast_dllm_v2.py`: the runners)."""
