"""Entry point: `python -m harness.pareto PATH... --out DIR` redraws the run table and the figures
(the code lives in `harness.figures.pareto`)."""

from harness.figures.pareto import main

if __name__ == "__main__":
    main()
