"""`python -m localspec`: the `localspec` command without its entry-point script (the
benchmark starts `complete` processes this way, with the interpreter it runs under)."""

from localspec.cli import main

raise SystemExit(main())
