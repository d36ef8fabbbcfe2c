"""The field's decoding strategies, each one rule module (a `MaskedSamplerConfig` subclass owning `step`) ported
from its authors' code (docs/samplers.md, "The field's strategies"; parity: `python -m harness.strategies_check`).

`STRATEGIES` maps each sampler name to its config; the sampler registry takes them beside the masked family's own
(harness/runner/configs.py `SAMPLERS`: `**MASKED_SAMPLERS, **STRATEGIES`): `samplers.masked` cannot import this
package (each strategy subclasses its config: a cycle).
"""

from samplers.strategies.dparallel import DParallelConfig
from samplers.strategies.eb_sampler import EBSamplerConfig
from samplers.strategies.fast_dllm_v2 import FastDllmV2Config
from samplers.strategies.klass import KlassConfig
from samplers.strategies.pc_sampler import PCSamplerConfig
from samplers.strategies.slowfast import SlowFastConfig
from samplers.strategies.wino import WinoConfig

STRATEGIES = {
    c.name: c
    for c in (
        FastDllmV2Config,
        DParallelConfig,
        EBSamplerConfig,
        PCSamplerConfig,
        WinoConfig,
        SlowFastConfig,
        KlassConfig,
    )
}
