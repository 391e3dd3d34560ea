"""``python -m topiclake``: the same command line as the ``topiclake`` script (:mod:`topiclake.cli`)."""

from topiclake.cli import main

if __name__ == "__main__":
    main()
