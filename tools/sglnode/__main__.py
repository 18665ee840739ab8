import sys

from sglnode.cli import main

sys.exit(main())
