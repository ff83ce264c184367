"""``python -m supervisor.cli``: the same as the ``supervise`` entry point."""

import sys

from supervisor.cli import main

sys.exit(main())
