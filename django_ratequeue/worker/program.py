"""The remote worker's command line: read the key, load the handlers, serve until a
signal says stop."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

# Siblings are imported relatively: the package is django_ratequeue.worker when installed
# and ``worker`` in the zipapp (manage.py ratequeue_worker_app).
from .client import Client, Refused
from .handlers import load_handlers
from .serving import Worker

logger = logging.getLogger("django_ratequeue.worker")

# Where the key is read from when --key and --key-file are not given.
KEY_VARIABLE = "RATEQUEUE_WORKER_KEY"


def read_key(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """Return the worker key, from ``--key-file``, ``--key`` or :data:`KEY_VARIABLE`, in
    that order. The variable is taken out of the environment: the processes handlers
    start do not inherit it."""
    if args.key and args.key_file:
        parser.error("give --key or --key-file, not both")
    from_environment = os.environ.pop(KEY_VARIABLE, "")
    key = args.key or from_environment
    if args.key_file:
        try:
            key = Path(args.key_file).read_text()
        except OSError as error:
            parser.error(f"cannot read --key-file: {error}")
    if not key.strip():
        parser.error(
            f"no worker key: set {KEY_VARIABLE}, or give --key-file (or --key, which shows "
            "it to anyone who lists this machine's processes)"
        )
    return key.strip()


def arguments() -> argparse.ArgumentParser:
    """Return the parser of the worker's command line."""
    # In the zipapp, the program is the archive's name.
    prog = (
        "python -m django_ratequeue.worker" if __package__ == "django_ratequeue.worker" else None
    )
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--url", required=True, help="Where the ratequeue URLs are mounted.")
    parser.add_argument(
        "--key-file", help=f"A file holding the worker key (or set {KEY_VARIABLE})."
    )
    parser.add_argument("--key", help="The worker key (visible in the process list).")
    parser.add_argument("--handlers", required=True, nargs="+", help="Handler module(s).")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--queues", nargs="*", help="Only these of the key's queues.")
    parser.add_argument("--grace", type=float, default=30.0, help="Seconds, on SIGTERM.")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the worker as its command line ``argv`` says; return its exit status."""
    parser = arguments()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    key = read_key(parser, args)
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    handlers = load_handlers(args.handlers)
    if not handlers:
        parser.error(f"{', '.join(args.handlers)} registered no handler")
    stopping = threading.Event()

    def stop(signum: int, frame: Any) -> None:
        logger.info("Stopping: finishing running attempts (grace %ss)", args.grace)
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    worker = Worker(
        Client(args.url, key, stopping), handlers, args.concurrency, args.queues, args.grace
    )
    logger.info("Worker %s serving %s", worker.name, ", ".join(sorted(handlers)))
    try:
        worker.serve()
    except Refused as refused:
        logger.error("The server refused this worker: %s", refused)
        return 2
    return 0
