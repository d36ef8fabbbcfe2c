"""The decode engines: requests in, finished samples out; `decoders.decoder_for` builds the one the family registry
(`contract.families`) names for a model and sampler. `loop` is the continuous-batching loop every family runs (admit,
pack, step, commit, retire); `decode` the uniform-state (DiffusionGemma) family's steps over per-row slots of one
shared cache, its state in `rows`; `lockstep` its whole-batch variant that replays transformers' `generate()` call
order (the parity tool); `step_graph` / `commit_graph` the compiled step and commit; `canvas_verify` self-speculative
verification of a canvas in AR mode; `stable_stream` streaming of a canvas's settled prefix. `masked` holds the masked
(absorbing-state) family's steps; `ar` the AR families' (AR, AR + draft / MTP, a diffusion checkpoint's own AR mode);
`diffusers_decoder` runs diffusers' DiffusionGemmaPipeline as a second implementation."""
