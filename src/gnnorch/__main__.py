"""``python -m gnnorch ...``: see `gnnorch.cli`."""
import sys

from .cli import main

sys.exit(main())
