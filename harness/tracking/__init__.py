"""Where results are reported while and after they run: W&B or no logger (`loggers`) and the Hydra callbacks that
draw the sweep summary when a multirun ends (`callbacks`)."""
