"""Where results are reported while and after they run: W&B or no logger (`loggers`, offline files read back by
`wandb_offline`) and the Hydra callbacks that draw the sweep summary when a multirun ends (`callbacks`)."""
