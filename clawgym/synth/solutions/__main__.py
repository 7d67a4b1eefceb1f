"""python -m clawgym.synth.solutions [FAMILY ...] --seeds N: the program checker (clawgym.synth.solutions._check)."""

from clawgym.synth.solutions._check import main

raise SystemExit(main())
