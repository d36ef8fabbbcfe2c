"""The decode engines: requests in, finished samples out; `decoders.decoder_for` picks one per model and sampler. `loop`
is the continuous-batching loop every diffusion family runs (admit, pack, step, commit, retire); `decode` the
uniform-state (DiffusionGemma) family's steps over per-row slots of one shared cache, its state in `rows`; `lockstep`
its whole-batch variant that replays transformers' `generate()` call order (the parity tool); `step_graph` /
`commit_graph` the compiled step and commit; `canvas_verify` self-speculative verification of a canvas in AR mode;
`stable_stream` streaming of a canvas's settled prefix. `masked` holds the masked (absorbing-state) family's steps;
`diffusers_decoder` runs diffusers' DiffusionGemmaPipeline as a second implementation. The AR engine lives with its
model adapters in `models.ar_engine`, which build it (moving it here would make the adapters import upwards)."""
