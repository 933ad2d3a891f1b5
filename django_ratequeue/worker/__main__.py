"""Run the remote worker: ``python -m django_ratequeue.worker`` (see the package)."""

from django_ratequeue.worker.program import main

if __name__ == "__main__":  # not when imported, as pkgutil.walk_packages does
    raise SystemExit(main())
