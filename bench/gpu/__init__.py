"""The GPU part: the prepared device check (`gpu_check`, `make gpu-check`), the roofline cost model traced from the
running code (`gpu_plan`, `cost_model`, `op_trace`, ...; `make gpu-plan`) and the Triton kernel build report
(`kernel_build`). May import `bench.cpu` (shared helpers, released-shape twins), never the reverse."""
