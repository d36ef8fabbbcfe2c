"""From run directories to numbers: the run table and summary (`aggregate`), Pareto fronts and areas (`fronts`),
paired "faster, not worse" tests (`dominance`), sampler search studies (`search`, `search_vs_grid`), batch
scaling and latency (`scaling`), output lengths (`lengths`) and hybrid decoding tables (`hybrid`)."""
