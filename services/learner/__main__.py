import sys

from services.learner.service import main

sys.exit(main())
