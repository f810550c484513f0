"""``triomq admin``: controller administration, after RocketMQ's mqadmin.

::

    triomq admin get-controller-metadata --controller tcp://10.0.0.1:9878
    triomq admin get-sync-state-set --broker-name broker-a --controller ...
    triomq admin elect-master --broker-name broker-a --broker-id 2 --controller ...
    triomq admin clean-broker-metadata --broker-name broker-a --broker-ids 3 --controller ...
    triomq admin get-broker-epoch --broker-name broker-a --controller ...

``--controller`` takes ``host:port`` or ``tcp://host:port``, is repeatable
and may list several joined by ``;`` (``triomq.cli_address``). As
mqadmin does, the command first asks the controllers named for the
group's metadata (GET_METADATA_INFO) and then talks to the leader it
names, so one controller of the group is enough. ``--timeout`` bounds the
controllers' part of the command. Every command prints a readable table,
or one JSON document with ``--json``. A refusal prints the controller's
code and reason and exits 1; no controller answering, or none knowing a
leader, is ``triomq.cli_address.Unreachable`` (one line, exit 2).
``--access-key`` and ``--secret-key`` (or ``TRIOMQ_ACCESS_KEY`` and
``TRIOMQ_SECRET_KEY``) sign the requests, for controllers that require
admin credentials.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any, TextIO

import trio

from triomq.cli_address import Unreachable, dial_address, dial_addresses
from triomq.cli_connection import client_config
from triomq.cli_credentials import add_credential_options, sign_requests
from triomq.cli_table import table as text_table
from triomq.controller.client import ControllerClient, ControllerError, ControllerUnavailable
from triomq.controller.core.codes import RequestCode, ResponseCode
from triomq.controller.core.results import Replica, SyncStateData
from triomq.controller.core.wire import (
    OPEN_END,
    ControllerMetadata,
    ReplicaInfo,
    WireError,
    decode_epoch_cache,
    read_metadata,
    rpc_address,
)
from triomq.errors import ConfigError
from triomq.plugin_manager import PluginManager
from triomq.protocol.remoting import RemotingCommand
from triomq.rpc import RpcClient, RpcError
from triomq.runtime import open_node

__all__ = ["add_admin_commands", "run_admin"]


def add_admin_commands(commands: argparse._SubParsersAction) -> None:
    """Add the controller commands of ``triomq admin``."""

    def command(name: str, help_text: str, *, group: bool = True) -> argparse.ArgumentParser:
        p = commands.add_parser(name, help=help_text)
        p.add_argument("--controller", action="append", required=True, metavar="ADDRESS",
                       help="a controller, host:port or tcp://host:port (repeatable; "
                            "several may be joined by ';')")
        p.add_argument("--json", action="store_true", help="one JSON document for scripts")
        p.add_argument("--timeout", type=float, default=5.0,
                       help="seconds the controllers may take to answer (default 5)")
        add_credential_options(p)
        if group:
            p.add_argument("--broker-name", required=True, help="the broker group")
            p.add_argument("--cluster-name", default="DefaultCluster")
        p.set_defaults(func=_run_sync)
        return p

    command("get-controller-metadata", "the controllers' group, leader and peers",
            group=False)
    command("get-sync-state-set", "a group's master, epochs and replicas in and out of its "
            "SyncStateSet")
    p = command("elect-master", "make a designated replica the group's master")
    p.add_argument("--broker-id", type=int, required=True, help="the replica to elect")
    p = command("clean-broker-metadata", "forget replicas of a group (or the whole group)")
    p.add_argument("--broker-ids", type=int, nargs="+", metavar="ID",
                   help="the replicas to forget (default: the whole group)")
    p.add_argument("--clean-living-broker", action="store_true",
                   help="also forget replicas that are still alive")
    command("get-broker-epoch", "each replica's epoch entries and offsets")


def _run_sync(args: argparse.Namespace) -> int:
    async def main() -> int:
        pm = PluginManager.discover()
        async with open_node(client_config(args, "triomq-admin", log_level="INFO"),
                             plugins=pm) as node:
            return await run_admin(args, node.rpc, sys.stdout)

    return trio.run(main)


async def run_admin(args: argparse.Namespace, rpc: RpcClient, out: TextIO) -> int:
    """Run the parsed ``triomq admin`` command over ``rpc``; the exit code.

    ``Unreachable`` (``triomq`` prints it, exit 2) when no controller named
    answers, or none knows a leader in time; ``ConfigError`` (exit 2 too) for a
    malformed address or credential option.
    """
    deadline = trio.current_time() + args.timeout
    command: Callable[..., Any] = _COMMANDS[args.admin_command]
    try:
        addresses = dial_addresses(args.controller, "--controller")
        sign_requests(rpc, args)
        metadata, controllers = await _find_controllers(rpc, addresses, deadline)
        client = ControllerClient(rpc, controllers,
                                  timeout=max(deadline - trio.current_time(), 0.1))
        result = await command(client, args)
    except ControllerError as exc:
        name = _code_name(exc.code)
        if args.json:
            print(json.dumps({"error": name, "code": exc.code, "remark": exc.remark}), file=out)
        else:
            print(f"refused: {name} ({exc.code}): {exc.remark}", file=out)
        return 1
    except ControllerUnavailable:
        why = ("no answer in time" if metadata.leader_address
               else "knows no leader (none elected yet)")
        raise Unreachable("controller leader", dict.fromkeys(controllers, why)) from None
    except WireError as exc:
        print(json.dumps({"error": str(exc)}) if args.json else f"error: {exc}", file=out)
        return 1
    data, table = result
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True), file=out)
    else:
        print(table, file=out)
    return 0


async def _find_controllers(rpc: RpcClient, addresses: list[str], deadline: float
                            ) -> tuple[ControllerMetadata, list[str]]:
    """The metadata of the first of ``addresses`` that answers GET_METADATA_INFO, and
    the controllers to call: its leader first, then its peers, then the others named.
    ``Unreachable`` if none answers by ``deadline``."""
    failures: dict[str, BaseException | str] = {}
    for index, address in enumerate(addresses):
        # What is left of the time, shared among the controllers not tried yet.
        timeout = (deadline - trio.current_time()) / (len(addresses) - index)
        if timeout <= 0:
            failures[address] = "not tried: --timeout passed"
            continue
        try:
            response = await rpc.invoke(address, RequestCode.CONTROLLER_GET_METADATA_INFO,
                                        timeout=timeout)
        except RpcError as exc:
            failures[address] = exc
            continue
        if response.code != ResponseCode.SUCCESS:
            failures[address] = f"{_code_name(response.code)}: {response.remark or ''}"
            continue
        metadata = read_metadata(response.ext_fields)
        named = [metadata.leader_address] if metadata.leader_address else []
        named += [peer for _, peer in metadata.peers]
        controllers: list[str] = []
        for candidate in [*map(_dialable, named), *addresses]:
            if candidate and candidate not in controllers:
                controllers.append(candidate)
        return metadata, controllers
    raise Unreachable("controller", failures)


def _dialable(address: str) -> str | None:
    """A controller's address from its metadata as the RPC client dials it; None for
    one that is neither ``host:port`` nor ``scheme://location`` (not followed)."""
    try:
        return dial_address(address)
    except ConfigError:
        return None


def _code_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)


# -- rendering ------------------------------------------------------------------------


def _info_json(info: ReplicaInfo) -> dict[str, Any]:
    return {
        "brokerName": info.broker_name,
        "masterBrokerId": info.master_broker_id,
        "masterAddress": info.master_address,
        "masterEpoch": info.master_epoch,
        "syncStateSet": sorted(info.sync_state_set),
        "syncStateSetEpoch": info.sync_state_set_epoch,
        "replicas": [{"brokerId": i, "address": a, "inSyncStateSet": i in info.sync_state_set}
                     for i, a in info.replicas],
        "possibleMessageLoss": info.possible_message_loss,
    }


def _info_table(info: ReplicaInfo) -> str:
    master = (f"{info.master_broker_id} ({info.master_address})"
              if info.master_broker_id is not None else "none")
    head = (f"group {info.broker_name}: master {master}, master epoch {info.master_epoch}, "
            f"SyncStateSet epoch {info.sync_state_set_epoch}")
    if info.possible_message_loss:
        head += "\nwarning: unclean election, messages acknowledged before may be lost"
    rows = [(i, a, "master" if i == info.master_broker_id else "slave",
             "yes" if i in info.sync_state_set else "no") for i, a in info.replicas]
    return head + "\n" + text_table(("brokerId", "address", "role", "inSyncStateSet"), rows)


# -- commands ---------------------------------------------------------------------------


async def _metadata(client: ControllerClient, args: argparse.Namespace
                    ) -> tuple[Any, str]:
    metadata = await client.get_metadata()
    data = {
        "group": metadata.group,
        "leaderId": metadata.leader_id,
        "leaderAddress": metadata.leader_address,
        "peers": [{"id": i, "address": a, "leader": i == metadata.leader_id}
                  for i, a in metadata.peers],
    }
    leader = (f"{metadata.leader_id} ({metadata.leader_address})" if metadata.leader_id
              else "none")
    table = text_table(("controllerId", "address", "role"),
                       [(i, a, "leader" if i == metadata.leader_id else "follower")
                        for i, a in metadata.peers])
    return data, f"group {metadata.group}, leader {leader}\n{table}"


def _replicas_json(replicas: tuple[Replica, ...]) -> list[dict[str, Any]]:
    return [{"brokerId": r.broker_id, "brokerAddress": r.address, "alive": r.alive}
            for r in replicas]


async def _group(client: ControllerClient, args: argparse.Namespace) -> SyncStateData:
    groups = await client.get_sync_state_data([args.broker_name])
    if not groups:
        raise ControllerError(client.leader or "?", "GET_SYNC_STATE_DATA", _missing(args))
    return groups[0]


async def _sync_state_set(client: ControllerClient, args: argparse.Namespace
                          ) -> tuple[Any, str]:
    group = await _group(client, args)
    data = {
        "brokerName": group.broker_name,
        "masterBrokerId": group.master_broker_id,
        "masterAddress": group.master_address,
        "masterEpoch": group.master_epoch,
        "syncStateSetEpoch": group.sync_state_set_epoch,
        "inSyncReplicas": _replicas_json(group.in_sync_replicas),
        "notInSyncReplicas": _replicas_json(group.not_in_sync_replicas),
    }
    master = (f"{group.master_broker_id} ({group.master_address})"
              if group.master_broker_id is not None else "none")
    head = (f"group {group.broker_name}: master {master}, master epoch {group.master_epoch}, "
            f"SyncStateSet epoch {group.sync_state_set_epoch}")
    rows = sorted((r.broker_id, r.address, "master" if r.broker_id == group.master_broker_id
                   else "slave", in_sync, "yes" if r.alive else "no")
                  for replicas, in_sync in ((group.in_sync_replicas, "yes"),
                                            (group.not_in_sync_replicas, "no"))
                  for r in replicas)
    return data, head + "\n" + text_table(
        ("brokerId", "address", "role", "inSyncStateSet", "alive"), rows)


def _missing(args: argparse.Namespace) -> RemotingCommand:
    return RemotingCommand.response(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                                    remark=f"broker group {args.broker_name!r} is not registered")


async def _elect(client: ControllerClient, args: argparse.Namespace) -> tuple[Any, str]:
    info = await client.elect_master(args.cluster_name, args.broker_name,
                                     broker_id=args.broker_id, designate=True)
    return _info_json(info), _info_table(info)


async def _clean(client: ControllerClient, args: argparse.Namespace) -> tuple[Any, str]:
    await client.clean_broker_data(args.cluster_name, args.broker_name,
                                   broker_ids=args.broker_ids,
                                   clean_living_broker=args.clean_living_broker)
    what = (f"replicas {sorted(args.broker_ids)}" if args.broker_ids else "every replica")
    return ({"brokerName": args.broker_name, "cleaned": sorted(args.broker_ids or [])
             or "all"}, f"cleaned {what} of group {args.broker_name}")


async def _epochs(client: ControllerClient, args: argparse.Namespace) -> tuple[Any, str]:
    group = await _group(client, args)
    data: list[dict[str, Any]] = []
    rows: list[tuple[Any, ...]] = []
    for replica in sorted(group.in_sync_replicas + group.not_in_sync_replicas,
                          key=lambda r: r.broker_id):
        broker_id, address = replica.broker_id, replica.address
        try:
            response = await client.rpc.invoke(rpc_address(address),
                                               RequestCode.GET_BROKER_EPOCH_CACHE,
                                               timeout=client.attempt_timeout)
        except RpcError as exc:
            data.append({"brokerId": broker_id, "address": address, "error": str(exc)})
            rows.append((broker_id, address, "unreachable", None, None, None))
            continue
        if response.code != ResponseCode.SUCCESS:
            data.append({"brokerId": broker_id, "address": address, "error": response.remark})
            rows.append((broker_id, address, f"error {response.code}", None, None, None))
            continue
        cache = decode_epoch_cache(response.body)
        entries = []
        for entry in cache.epochs:
            # The open epoch ends at the log's end, as mqadmin shows it.
            end = cache.max_offset if entry.end_offset == OPEN_END else entry.end_offset
            entries.append({"epoch": entry.epoch, "startOffset": entry.start_offset,
                            "endOffset": end})
            rows.append((broker_id, address, entry.epoch, entry.start_offset, end,
                         cache.max_offset))
        if not entries:
            rows.append((broker_id, address, "none", None, None, cache.max_offset))
        data.append({"brokerId": broker_id, "address": address, "maxOffset": cache.max_offset,
                     "epochs": entries})
    table = text_table(("brokerId", "address", "epoch", "startOffset", "endOffset",
                        "maxOffset"), rows)
    return {"brokerName": args.broker_name, "replicas": data}, table


_COMMANDS: dict[str, Callable[..., Any]] = {
    "get-controller-metadata": _metadata,
    "get-sync-state-set": _sync_state_set,
    "elect-master": _elect,
    "clean-broker-metadata": _clean,
    "get-broker-epoch": _epochs,
}
