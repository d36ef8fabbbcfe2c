"""The decode engines: requests in, finished samples out. `decode` is the continuous-batching block-diffusion loop
(admit, step, commit, retire, pack over per-row slots of one shared cache), over its state in `rows`; `lockstep` its
whole-batch variant that replays transformers' `generate()` call order (the parity tool); `step_graph` /
`commit_graph` the compiled step and commit; `canvas_verify` self-speculative verification of a canvas in AR mode;
`stable_stream` streaming of a canvas's settled prefix. The AR engine lives with its model adapters in
`models.ar_engine`, which build it."""
