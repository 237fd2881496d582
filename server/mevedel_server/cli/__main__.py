"""``python -m mevedel_server.cli`` runs the ``mevedel`` command."""

import sys

from .main import main

sys.exit(main())
