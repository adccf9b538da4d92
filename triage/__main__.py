"""``python -m triage ...``: the same as the ``triage`` command."""

import sys

from triage.cli import main

sys.exit(main())
