"""Where runs execute: the GPUs a job may use (`devices`), Slurm preemption and requeue (`cluster`), Ray tasks
(`ray_launch`) and a run split into shards that merge into one result (`shards`)."""
