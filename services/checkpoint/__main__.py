"""``python -m services.checkpoint``: run the checkpoint service (see service.py, --help)."""

from services.checkpoint.service import main

raise SystemExit(main())
