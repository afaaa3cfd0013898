"""The ``streamshift`` command: thin argument parsing around one function per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from streamshift.errors import StreamshiftError
from streamshift.settings import describe, load_settings

Handler = Callable[[argparse.Namespace], int]


class UserError(StreamshiftError):
    """A command-line mistake; printed without a traceback, exit code 2."""


def _cmd_settings(args: argparse.Namespace) -> int:
    settings = load_settings()
    for name, default, doc in describe():
        field_name = name.removeprefix("STREAMSHIFT_").lower()
        print(f"{name:42} = {getattr(settings, field_name)!s:28}  # {doc} (default {default})")
    return 0


def _cmd_kafka(args: argparse.Namespace) -> int:
    from streamshift.kafka import LocalBroker

    broker = LocalBroker.from_settings(load_settings())
    if args.action == "start":
        print(f"starting Kafka broker on {broker.bootstrap} ...", file=sys.stderr, flush=True)
        if broker.start():
            print(f"Kafka broker {broker.status().describe()}")
        else:
            print(f"Kafka broker already running: {broker.status().describe()}")
    elif args.action == "stop":
        if broker.stop():
            print("Kafka broker stopped")
        else:
            print("Kafka broker was not running; nothing to stop")
    else:
        status = broker.status()
        print(f"Kafka broker {status.describe()}")
        return 0 if status.running else 3
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from streamshift.demo import run_demo

    return run_demo(load_settings(), keep_running=args.keep_running)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamshift",
        description="Lambda migration kit: one set of PySpark transforms for EOD batch "
        "and Kafka streaming. Settings come from STREAMSHIFT_* variables "
        "(see `streamshift settings`).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("settings", help="show every setting, its value and default")
    p.set_defaults(handler=_cmd_settings)

    p = sub.add_parser(
        "kafka",
        help="run the embedded single-node Kafka broker (KRaft) on 127.0.0.1",
        description="Start, stop or inspect the local Kafka broker. Its data lives under "
        "STREAMSHIFT_HOME/kafka; its port is the one in STREAMSHIFT_KAFKA_BOOTSTRAP_SERVERS.",
    )
    p.add_argument("action", choices=["start", "stop", "status"])
    p.set_defaults(handler=_cmd_kafka)

    p = sub.add_parser(
        "demo",
        help="run the demo on the embedded local stack",
        description="Generate a trading day, load it through the write path, apply "
        "corrections and print positions and the quarantine summary.",
    )
    p.add_argument("--keep-running", action="store_true", help="leave the broker running")
    p.set_defaults(handler=_cmd_demo)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except StreamshiftError as exc:
        print(f"streamshift: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("streamshift: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
