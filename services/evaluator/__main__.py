"""``python -m services.evaluator``: run the evaluator (see main.py, --help)."""

from services.evaluator.main import main

raise SystemExit(main())
