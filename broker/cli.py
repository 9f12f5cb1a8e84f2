"""Command line of the broker process.

    python -m broker --id N --listen HOST:PORT --zookeeper HOSTS[/chroot] --data-dir DIR
                     [--advertise HOST:PORT] [--config FILE] [--set KEY=VALUE]...
                     [--log-file FILE] [--log-level LEVEL] [--debug-bug NAME]...

Bad flags, settings or bug names print one line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys


from broker.config import PLANTED_BUGS, SETTINGS, BrokerConfig, ConfigError, apply_settings, parse_host_port, parse_properties
from broker.server import Broker


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"broker: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m broker", description="The project's own Kafka-compatible broker.",
                epilog="settings: " + ", ".join(sorted(SETTINGS)) + ".  planted bugs: "
                + "; ".join(f"{k} ({v})" for k, v in PLANTED_BUGS.items()))
    p.add_argument("--id", type=int, required=True, help="broker id (a non-negative integer, unique in the cluster)")
    p.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to accept clients on")
    p.add_argument("--advertise", metavar="HOST:PORT",
                   help="address clients and other brokers should use (default: --listen)")
    p.add_argument("--zookeeper", required=True, metavar="HOSTS",
                   help="ZooKeeper connect string, e.g. 10.0.0.1:2181,10.0.0.2:2181/own")
    p.add_argument("--data-dir", required=True, metavar="DIR", help="where logs and the HW checkpoint live")
    p.add_argument("--config", metavar="FILE", help="properties file of Kafka-named settings")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="one setting (repeatable)")
    p.add_argument("--log-file", metavar="FILE", help="log file (default: DATA_DIR/broker.log)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"], help="log level")
    p.add_argument("--debug-bug", action="append", default=[], metavar="NAME",
                   help="plant a known bug, for testing the harness (repeatable): " + ", ".join(PLANTED_BUGS))
    return p


def config_from_args(argv: list[str] | None) -> tuple[BrokerConfig, argparse.Namespace]:
    args = build_parser().parse_args(argv)
    if args.id < 0:
        raise ConfigError(f"broker: --id must be a non-negative integer, got {args.id}")
    cfg = BrokerConfig(broker_id=args.id)
    cfg.host, cfg.port = parse_host_port(args.listen, "--listen")
    adv = args.advertise or args.listen
    cfg.advertised_host, cfg.advertised_port = parse_host_port(adv, "--advertise")
    if cfg.advertised_host in ("0.0.0.0", "::"):
        raise ConfigError("broker: listening on a wildcard address needs --advertise HOST:PORT")
    if not args.zookeeper.strip():
        raise ConfigError("broker: --zookeeper is empty")
    cfg.zookeeper = args.zookeeper.strip()
    cfg.data_dir = os.path.abspath(args.data_dir)
    if args.config:
        try:
            with open(args.config) as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"broker: cannot read --config {args.config}: {e.strerror}") from None
        apply_settings(cfg, parse_properties(text, args.config), args.config)
    sets = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"broker: --set expects KEY=VALUE, got {item!r}")
        sets[key.strip()] = value.strip()
    apply_settings(cfg, sets, "--set")
    for name in args.debug_bug:
        if name not in PLANTED_BUGS:
            raise ConfigError(f"broker: unknown --debug-bug {name!r} (known: {', '.join(PLANTED_BUGS)})")
    cfg.debug_bugs = frozenset(args.debug_bug)
    cfg.log_file = args.log_file or os.path.join(cfg.data_dir, "broker.log")
    return cfg, args


def setup_logging(path: str, level: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s.%(msecs)03d %(levelname)s [%(name)s] %(message)s",
                                           "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("kazoo").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, args = config_from_args(argv)
        try:
            os.makedirs(cfg.data_dir, exist_ok=True)
        except OSError as e:
            raise ConfigError(f"broker: cannot create --data-dir {cfg.data_dir}: {e.strerror}") from None
        setup_logging(cfg.log_file, args.log_level)
    except ConfigError as e:
        print(f"broker: error: {str(e).removeprefix('broker: ')}", file=sys.stderr)
        return 2
    try:
        asyncio.run(Broker(cfg).run())
    except OSError as e:
        logging.getLogger("broker").error("fatal: %s", e)
        print(f"broker: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0
