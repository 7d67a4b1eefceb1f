from clawgym.synth.solutions import main

raise SystemExit(main())
