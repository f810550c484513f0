"""The demonstration and the simulations as a plugin (entry point ``demo``).

``triomq_add_cli_commands`` adds:

- ``triomq demo [--transport inproc|tcp] [--keep]``: what ``make run``
  shows (``demo``): three controllers and a broker group of three in one
  process, the master killed mid-stream, and a report of what was
  acknowledged and consumed; with ``--acting-master`` (``acting``), static
  groups whose master is killed, a slave acting for it and the master's
  return through pre-online;
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
                    "report shows that no acknowledged message was lost. With "
                    "--acting-master, slave acting master instead: static groups, a slave "
                    "acting for its killed master, the master back through pre-online.")
    p.add_argument("--transport", choices=("inproc", "tcp"), default="inproc",
                   help="in-process streams or real TCP sockets (default inproc)")
    p.add_argument("--keep", action="store_true",
                   help="keep the nodes' stores afterwards and print where they are")
    p.add_argument("--acting-master", action="store_true",
                   help="a name server with support_acting_master, static group broker-a "
                        "(a0 master, a1 and a2 slaves) and broker-b; a0 is killed while "
                        "normal, delayed and transactional messages flow, a1 acts for it "
                        "(read-only route, due delayed messages escaped to broker-b), a0 "
                        "returns through pre-online; the report says when each happened, "
                        "what was consumed, and broker-a's consumer offsets (exit 1 if an "
                        "acknowledged message was not consumed or an offset went back)")
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
    from triomq.plugins.demo.acting import run_acting_demo
    from triomq.plugins.demo.demo import run_demo

    logging.basicConfig(level=logging.WARNING, format="  [%(name)s] %(message)s")
    scenario = run_acting_demo if args.acting_master else run_demo
    return trio.run(functools.partial(scenario, plugin_manager, args.transport,
                                      keep=args.keep))


def _sim(args: argparse.Namespace) -> int:
    from triomq.testing import clustersim, clustersim_acting, raftsim

    simulation = clustersim if args.cluster else clustersim_acting if args.acting else raftsim
    return simulation.main(["--seeds", str(args.seeds), "--start", str(args.start)])
