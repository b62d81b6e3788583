import sys

from jobs.simulator.cli import main

sys.exit(main(sys.argv[1:]))
