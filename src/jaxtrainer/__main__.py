"""``python -m jaxtrainer``: the ``jaxtrainer`` command."""

import sys

from jaxtrainer.commands._cli import main

sys.exit(main())
