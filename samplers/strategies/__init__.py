"""The field's decoding strategies, one rule module each (a `samplers.masked.MaskedSamplerConfig` subclass that owns
its `step`; see `samplers.masked_rule`). Each module names the authors' repository and commit it follows."""
