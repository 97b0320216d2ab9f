"""``python -m services.checkpoint``: run the checkpoint service (see main.py, --help)."""

from services.checkpoint.main import main

raise SystemExit(main())
