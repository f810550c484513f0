"""The ``triomq`` command.

Sub-commands of the kernel:

- ``triomq plugins [--json]``: every registered plugin, its module, its
  distribution and the hooks it implements; then the schemes on offer.
- ``triomq config [--json]``: every configuration key with its default and doc.
- ``triomq <role> --config FILE``: run a node (``standalone``, ``nameserver``,
  ``controller`` or ``broker``) until SIGINT / SIGTERM.
- ``triomq demo``: the demonstration ``make run`` shows.
- ``triomq sim --seeds N [--start K] [--cluster]``: the deterministic
  simulation of a Raft cluster (or, with ``--cluster``, of controllers plus a
  broker group); prints ``N passed, M failed`` last and exits non-zero on any
  violation.

Plugins add their own sub-commands through ``triomq_add_cli_commands``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Sequence

import attrs
import trio

from framework import config as config_mod
from framework.config import ROLES, NodeConfig
from framework.errors import TriomqError
from framework.plugins import PluginManager


def build_parser(pm: PluginManager) -> argparse.ArgumentParser:
    """The argument parser, with every plugin's sub-commands added."""
    parser = argparse.ArgumentParser(prog="triomq", description=__doc__.splitlines()[0])
    parser.add_argument("--disable-plugin", action="append", default=[], metavar="NAME",
                        help="leave out a discovered plugin (repeatable)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("plugins", help="list registered plugins and what they provide")
    p.add_argument("--json", action="store_true", help="one JSON document for scripts")
    p.set_defaults(func=lambda args: _cmd_plugins(pm, args))

    p = sub.add_parser("config", help="list every configuration key with default and meaning")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="a table for the README")
    p.set_defaults(func=_cmd_config)

    for role in ROLES:
        p = sub.add_parser(role, help=f"run a {role} node until SIGINT/SIGTERM")
        p.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
        p.set_defaults(func=lambda args, role=role: _cmd_run(pm, role, args))

    p = sub.add_parser("demo", help="run the demonstration scenario")
    p.add_argument("--transport", choices=("inproc", "tcp"), default="inproc")
    p.set_defaults(func=lambda args: _cmd_demo(pm, args))

    p = sub.add_parser("sim", help="run a deterministic simulation over many seeds")
    p.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--cluster", action="store_true",
                   help="simulate controllers plus a broker group instead of Raft alone")
    p.set_defaults(func=_cmd_sim)

    pm.hook.triomq_add_cli_commands(subparsers=sub)
    return parser


def _cmd_plugins(pm: PluginManager, args: argparse.Namespace) -> int:
    infos = pm.plugins()
    provides = {
        "transports": pm.transport_schemes(),
        "log_stores": [":".join(k) for k in pm.store_kinds()],
    }
    if args.json:
        print(json.dumps({"plugins": [attrs.asdict(i) for i in infos], **provides}, indent=2))
        return 0
    for info in infos:
        print(f"{info.name}  ({info.module}, from {info.distribution or 'not a distribution'})")
        print(f"    hooks: {', '.join(info.hooks) or 'none'}")
    print(f"transports: {', '.join(provides['transports']) or 'none'}")
    print(f"log stores: {', '.join(provides['log_stores']) or 'none'}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    rows = list(config_mod.describe(NodeConfig))
    if args.json:
        print(json.dumps([{"key": k, "default": d, "doc": doc} for k, d, doc in rows], indent=2))
        return 0
    if args.markdown:
        print("| key | default | meaning |\n| --- | --- | --- |")
        for key, default, doc in rows:
            print(f"| `{key}` | `{default}` | {doc.replace('|', '/')} |")
        return 0
    for key, default, doc in rows:
        print(f"{key} = {default}\n    {doc}")
    return 0


def _cmd_run(pm: PluginManager, role: str, args: argparse.Namespace) -> int:
    from framework.runtime import run_node

    config = config_mod.load_toml(NodeConfig, args.config)
    if config.role not in ("standalone", role):
        raise TriomqError(f"{args.config}: role = {config.role!r}, but 'triomq {role}' was run")
    config = attrs.evolve(config, role=role)
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    trio.run(functools.partial(run_node, config, plugins=pm))
    return 0


def _cmd_sim(args: argparse.Namespace) -> int:
    from framework.testing import clustersim, raftsim

    simulation = clustersim if args.cluster else raftsim
    return simulation.main(["--seeds", str(args.seeds), "--start", str(args.start)])


def _cmd_demo(pm: PluginManager, args: argparse.Namespace) -> int:
    from framework.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s")
    return trio.run(run_demo, pm, args.transport)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``triomq`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    disabled = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--disable-plugin"]
    try:
        pm = PluginManager.discover(disable=disabled)
        args = build_parser(pm).parse_args(argv)
        return int(args.func(args) or 0)
    except TriomqError as exc:
        print(f"triomq: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
