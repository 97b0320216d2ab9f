"""``python -m services.rollout``: run a rollout (see main.py, --help)."""

from services.rollout.main import main

raise SystemExit(main())
