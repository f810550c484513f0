"""The demonstration and the simulations as a plugin (entry point ``demo``).

``triomq_add_cli_commands`` adds:

- ``triomq demo [--transport inproc|tcp] [--keep]``: what ``make run``
  shows (``demo``): three controllers and a broker group of three in one
  process, the master killed mid-stream, and a report of what was
  acknowledged and consumed;
- ``triomq sim --seeds N [--start K] [--cluster | --acting]``: the
  deterministic simulation of a Raft cluster (or, with ``--cluster``, of
  controllers plus a broker group; with ``--acting``, of a static group
  whose slaves act for their absent master, ``triomq.testing``); progress
  on stderr for long sweeps (a bar on a terminal), ``N passed, M failed``
  last, a non-zero exit on any violation.

The kernel's ``triomq`` command knows neither: it only calls the hook.
"""

from __future__ import annotations

import argparse
import functools
import logging

import trio

from triomq.hookspecs import hookimpl
from triomq.plugin_manager import PluginManager


@hookimpl
def triomq_add_cli_commands(subparsers: argparse._SubParsersAction,
                            plugin_manager: PluginManager) -> None:
    p = subparsers.add_parser(
        "demo", help="run the demonstration scenario",
        description="Three controllers and a broker group of three replicas in one process; "
                    "the master is killed mid-stream, the controllers elect another, and the "
                    "report shows that no acknowledged message was lost.")
    p.add_argument("--transport", choices=("inproc", "tcp"), default="inproc",
                   help="in-process streams or real TCP sockets (default inproc)")
    p.add_argument("--keep", action="store_true",
                   help="keep the nodes' stores afterwards and print where they are")
    p.set_defaults(func=functools.partial(_demo, plugin_manager))

    p = subparsers.add_parser("sim", help="run a deterministic simulation over many seeds")
    p.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    p.add_argument("--start", type=int, default=0, help="first seed (default 0)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--cluster", action="store_true",
                       help="simulate controllers plus a broker group instead of Raft alone")
    which.add_argument("--acting", action="store_true",
                       help="simulate a static broker group whose slaves act for their absent "
                            "master (slave acting master, pre-online, strict locks)")
    p.set_defaults(func=_sim)


def _demo(plugin_manager: PluginManager, args: argparse.Namespace) -> int:
    from triomq.plugins.demo.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s")
    return trio.run(functools.partial(run_demo, plugin_manager, args.transport,
                                      keep=args.keep))


def _sim(args: argparse.Namespace) -> int:
    from triomq.testing import clustersim, clustersim_acting, raftsim

    simulation = clustersim if args.cluster else clustersim_acting if args.acting else raftsim
    return simulation.main(["--seeds", str(args.seeds), "--start", str(args.start)])
