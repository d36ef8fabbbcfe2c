"""The field's decoding strategies, each one rule module (a `MaskedSamplerConfig` subclass owning `step`) ported
from its authors' code (docs/samplers.md, "The field's strategies"; parity: `python -m harness.strategies_check`).

`STRATEGIES` maps each sampler name to its config. They are not in `samplers.masked.MASKED_SAMPLERS` yet: that
module cannot import this package (each strategy subclasses its config: a cycle), and the engine on main composes
the masked rule itself, so a strategy run through it would decode another rule (`base.StrategyConfig.block_end`
refuses). Once the engine calls `step`, the registry takes them with one line where it is built
(harness/runner/configs.py: `**STRATEGIES` beside `**MASKED_SAMPLERS`).
"""

from samplers.strategies.dparallel import DParallelConfig
from samplers.strategies.eb_sampler import EBSamplerConfig
from samplers.strategies.fast_dllm_v2 import FastDllmV2Config
from samplers.strategies.pc_sampler import PCSamplerConfig

STRATEGIES = {c.name: c for c in (FastDllmV2Config, DParallelConfig, EBSamplerConfig, PCSamplerConfig)}
