"""`python -m evals.lmeval <lm-eval CLI arguments>`: lm-eval's own command line with our engine as `--model dllm`.

The work is in `harness.runner.lmeval_cli` (it builds decoders, which sit above evals in the import layers); this entry
point only starts it, by name, as Hydra's `_target_` strings do.
"""

import importlib

if __name__ == "__main__":
    importlib.import_module("harness.runner.lmeval_cli").main()
