import sys

from nbutils.data.splits import main

sys.exit(main())
