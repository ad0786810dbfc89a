"""``python -m ppdmodel`` runs the ``ppd`` command."""

import sys

from ppdmodel.cli import main

sys.exit(main())
