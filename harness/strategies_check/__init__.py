"""`python -m harness.strategies_check`: the ported strategies' rules against their authors' code
(`checks.py`: Fast-dLLM v2, dParallel, EB-Sampler, PC-Sampler; `llada_checks.py`: WINO, SlowFast, KLASS, through
`rule_loop` and our engine; `__main__`: both tables; `replay.py`, `fast_dllm_v2.py`, `llada.py`, `end_to_end.py`: the
runners)."""
