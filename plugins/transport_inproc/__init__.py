"""In-process transport (``inproc://name``) with seeded fault injection.

For tests and for hosts that run a whole cluster in one process. Streams
are real ``trio.abc.HalfCloseableStream`` objects carrying bytes between
tasks; an ``InprocNetwork`` (see ``network``) connects them and injects
partitions, delays, slow links, dropped and closed connections.

Use it directly::

    network = InprocNetwork(seed=7)
    server = InprocTransport(network, local="inproc://controller-1")
    listener = await server.listen("inproc://controller-1")
    client = InprocTransport(network, local="inproc://broker-a")
    stream = await client.connect("inproc://controller-1")
    network.partition("broker-a", "controller-1")

or through the plugin, with options ``network`` (a process-wide network's
name, so tests get isolated networks), ``local``, ``connect_timeout`` and
``backlog``.
"""

from __future__ import annotations

from collections.abc import Mapping

from triomq.hookspecs import TransportFactory, hookimpl
from triomq.plugins.transport_inproc.network import InprocNetwork, Link, forget_network, get_network
from triomq.plugins.transport_inproc.stream import InprocStream
from triomq.plugins.transport_inproc.transport import InprocListener, InprocTransport

__all__ = ["InprocListener", "InprocNetwork", "InprocStream", "InprocTransport", "Link",
           "forget_network", "get_network", "triomq_transport"]


@hookimpl
def triomq_transport() -> Mapping[str, TransportFactory]:
    return {"inproc": InprocTransport.from_options}
