"""Entry point: `python -m harness.films RUN_DIR --samples N` renders denoising films
(the code lives in `harness.figures.films`)."""

from harness.figures.films import main

if __name__ == "__main__":
    main()
