import sys

from nbutils.kaggle.publish import main

sys.exit(main())
