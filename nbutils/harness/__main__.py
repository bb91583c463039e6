import sys

from nbutils.harness.cli import main

sys.exit(main())
