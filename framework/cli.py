"""The ``triomq`` command.

Sub-commands of the kernel:

- ``triomq plugins [--json]``: every registered plugin, its module, its
  distribution and the hooks it implements; then the schemes on offer.
- ``triomq config [--json]``: every configuration key with its default and doc.
- ``triomq <role> --config FILE``: run a node (``standalone`` or a role a
  plugin declares) until SIGINT / SIGTERM.
- ``triomq store verify|dump|recover DIR``: the store tools
  (``triomq.store_cli``), on any store plugin's commit log.

Plugins add their own sub-commands through ``triomq_add_cli_commands``
(``triomq demo`` and ``triomq sim`` come from the ``demo`` plugin).
Output piped into a reader that stops early (``triomq config | head``) ends
the command quietly.
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import logging
import os
import re
import select
import sys
from collections.abc import Sequence

import attrs
import trio

from triomq import store_cli
from triomq.config import STANDALONE, NodeConfig
from triomq.errors import TriomqError
from triomq.plugin_manager import PluginManager
from triomq.settings import read_toml


def build_parser(pm: PluginManager) -> argparse.ArgumentParser:
    """The argument parser, with every plugin's sub-commands added."""
    parser = argparse.ArgumentParser(
        prog="triomq",
        description="Run and inspect triomq nodes (brokers, controllers, name servers) "
                    "and their stores.")
    parser.add_argument("--disable-plugin", action="append", default=[], metavar="NAME",
                        help="leave out a discovered plugin (repeatable)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("plugins", help="list registered plugins and what they provide")
    p.add_argument("--json", action="store_true", help="one JSON document for scripts")
    p.set_defaults(func=lambda args: _cmd_plugins(pm, args))

    p = sub.add_parser("config", help="list every configuration key with default and meaning")
    p.add_argument("--json", action="store_true")
    p.add_argument("--markdown", action="store_true", help="a table for the README")
    p.set_defaults(func=_cmd_config, plugin_manager=pm)

    for role in (STANDALONE, *pm.roles()):
        p = sub.add_parser(role, help=f"run a {role} node until SIGINT/SIGTERM")
        p.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
        p.set_defaults(func=lambda args, role=role: _cmd_run(pm, role, args))

    store_cli.add_commands(sub, pm)
    p = sub.add_parser("admin", help="administration of controllers, name servers and brokers "
                                     "(mqadmin style)")
    commands = p.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")
    pm.hook.triomq_add_admin_commands(commands=commands)
    pm.hook.triomq_add_cli_commands(subparsers=sub, plugin_manager=pm)
    return parser


def _cmd_plugins(pm: PluginManager, args: argparse.Namespace) -> int:
    infos = pm.plugins()
    provides = {
        "transports": pm.transport_schemes(),
        "log_stores": [":".join(k) for k in pm.store_kinds()],
        "roles": pm.roles(),
        "config_sections": list(pm.config_sections()),
    }
    if args.json:
        print(json.dumps({"plugins": [attrs.asdict(i) for i in infos], **provides}, indent=2))
        return 0
    for info in infos:
        print(f"{info.name}  ({info.module}, from {info.distribution or 'not a distribution'})")
        print(f"    hooks: {', '.join(info.hooks) or 'none'}")
    print(f"transports: {', '.join(provides['transports']) or 'none'}")
    print(f"log stores: {', '.join(provides['log_stores']) or 'none'}")
    print(f"roles: {', '.join(provides['roles']) or 'none'}")
    print(f"config sections: {', '.join(provides['config_sections']) or 'none'}")
    return 0


def _cmd_config(args: argparse.Namespace) -> int:
    rows = list(NodeConfig.keys(plugins=args.plugin_manager))
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
    """Run a node. A configuration or environment error (a file that cannot be read,
    a port in use, a store path that cannot be written) is one line and exit 2: the
    node binds every address it will listen on before any service starts (see
    ``triomq.runtime``), so a port in use stops it before any store file is written."""
    from triomq.runtime import run_node

    try:
        data = read_toml(args.config)
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not UTF-8 text ({exc.reason})"
        raise TriomqError(f"config file {args.config!r} cannot be read: {reason}") from None
    config = NodeConfig.from_mapping(data, plugins=pm)
    if config.role not in ("standalone", role):
        raise TriomqError(f"{args.config}: role = {config.role!r}, but 'triomq {role}' was run")
    config = attrs.evolve(config, role=role)
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        trio.run(functools.partial(run_node, config, plugins=pm))
    except (TriomqError, OSError) as exc:
        # One line: some causes (a TOML or TLS library's message) span several.
        raise TriomqError(" ".join(str(exc).split())) from exc
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``triomq`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    disabled = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--disable-plugin"]
    try:
        pm = PluginManager.discover(disable=disabled)
        args = build_parser(pm).parse_args(argv)
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        if not _stdout_reader_gone():
            raise
        # Whatever is still buffered would fail again when Python exits.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except TriomqError as exc:
        print(f"triomq: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = _extra_providing(exc.name or "")
        if extra is None:
            raise
        print(f"triomq: error: this command needs {exc.name}, from the {extra!r} extra: "
              f"pip install 'triomq[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _extra_providing(module: str) -> str | None:
    """The extra of triomq's distribution that installs ``module``, if one does."""
    top = module.partition(".")[0].lower().replace("_", "-")
    try:
        requirements = importlib.metadata.requires("triomq") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", requirement)
        if name and extra and name.group().lower().replace("_", "-") == top:
            return extra.group(1)
    return None


def _stdout_reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has closed it (and not, say, a
    socket of the command's own that broke)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR is reported without being asked for
    return any(events & select.POLLERR for _, events in poller.poll(0))


if __name__ == "__main__":
    sys.exit(main())
