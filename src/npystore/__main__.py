"""``python -m npystore``: the ``npystore`` command (see :mod:`npystore.tools.cli`)."""

from npystore.tools.cli import run

if __name__ == "__main__":
    run()
