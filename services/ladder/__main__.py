"""``python -m services.ladder``: run the ladder (see main.py, --help)."""

from services.ladder.main import main

raise SystemExit(main())
