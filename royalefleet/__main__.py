import sys

from royalefleet.cli import main

sys.exit(main())
