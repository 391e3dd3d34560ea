"""``python -m topiclake.cli``."""

from topiclake.cli import main

main()
