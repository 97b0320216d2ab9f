import sys

from royalefleet.k8s.files import main

sys.exit(main())
