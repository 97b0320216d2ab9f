import sys

from royalefleet.grafana.files import main

sys.exit(main())
