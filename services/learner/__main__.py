import sys

from services.learner.cli import main

sys.exit(main())
