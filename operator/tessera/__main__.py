"""`python -m tessera`: the same as the `tessera` command.
Imports only the CLI."""

import sys

from tessera.cli import main

sys.exit(main())
