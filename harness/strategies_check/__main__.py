from harness.strategies_check.checks import main

raise SystemExit(main())
