"""``python -m jaxtrainer``: the ``jaxtrainer`` command."""

import sys

from jaxtrainer.commands.cli import main

sys.exit(main())
