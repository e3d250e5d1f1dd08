"""``python -m npystore``: the ``npystore`` command (see :mod:`npystore.cli`)."""

from npystore.cli import run

if __name__ == "__main__":
    run()
