"""`python -m harness.strategies_check`: see the package's docstring."""

from harness.strategies_check import main

raise SystemExit(main())
