"""`python -m harness.lmeval <lm-eval CLI arguments>`: lm-eval's own command line with our engine as `--model dllm`.

An entry point, so it sits at harness/'s top layer: the work (registering `dllm`, building the decoder) is in
`harness.runner.lmeval_cli`. It was `python -m evals.lmeval`, which loaded that module by name from below it in the
import layers (tests/test_architecture.py reads such loads as imports); evals cannot build decoders.
"""
