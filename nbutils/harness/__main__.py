import sys

from nbutils.harness.runner import main

sys.exit(main())
