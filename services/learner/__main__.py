"""``python -m services.learner``: run the learner (see main.py, --help)."""

from services.learner.main import main

raise SystemExit(main())
