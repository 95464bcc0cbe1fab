"""``python -m harnesslearn.cli``."""

from harnesslearn.cli import main

main()
