import sys

from services.rollout.service import main

sys.exit(main())
