"""``python -m npystore``: the ``npystore`` command (see :mod:`npystore.cli`)."""

from npystore.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
