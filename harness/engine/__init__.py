"""The decode engines: requests in, finished samples out; `decoders.decoder_for` picks one per model and sampler.
`decode` is the continuous-batching uniform-state (DiffusionGemma) loop (admit, pack, step, tally, commit, retire over
per-row slots of one shared cache), over its state in `rows`; `lockstep` its whole-batch variant that replays
transformers' `generate()` call order (the parity tool); `step_graph` / `commit_graph` the compiled step and commit;
`canvas_verify` self-speculative verification of a canvas in AR mode; `stable_stream` streaming of a canvas's settled
prefix. `masked` decodes the masked (absorbing-state) family; `diffusers_decoder` runs diffusers'
DiffusionGemmaPipeline as a second implementation. The AR engine lives with its model adapters in
`models.ar_engine`, which build it (moving it here would make the adapters import upwards)."""
