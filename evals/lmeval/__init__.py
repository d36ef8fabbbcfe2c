"""lm-eval bridge: generative lm-eval tasks decoded by our decoders (see evals.lmeval.eval)."""

from evals.lmeval.eval import LmEvalEval
from evals.lmeval.model import DecoderLM
from evals.lmeval.thoughts import split_thoughts

__all__ = ["DecoderLM", "LmEvalEval", "split_thoughts"]
