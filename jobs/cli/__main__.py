import sys

from jobs.cli.main import main

sys.exit(main())
