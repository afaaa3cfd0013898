"""``python -m streamshift.cli``: the ``streamshift`` command."""

import sys

from streamshift.cli import main

sys.exit(main())
