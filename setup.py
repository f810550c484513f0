"""The optional C extensions; everything else about the package is in pyproject.toml.

Each one is optional: without a compiler (or zlib's headers) the install
still succeeds and the pure-Python versions run.
"""

from setuptools import Extension, setup

PROTOCOL = "framework/protocol"

setup(ext_modules=[
    # The commit log's hot loops: record walks, CRC-32, batch packing, queue indexes.
    Extension(
        "triomq.protocol._speedups",
        sources=[f"{PROTOCOL}/_speedups.c", f"{PROTOCOL}/_speedups_pack.c",
                 f"{PROTOCOL}/_speedups_index.c", f"{PROTOCOL}/_speedups_keys.c"],
        depends=[f"{PROTOCOL}/_speedups.h"],
        libraries=["z"],
        optional=True,
    ),
    # The HA drivers' per-frame work.
    Extension("triomq.protocol._ha_speedups", sources=[f"{PROTOCOL}/_ha_speedups.c"],
              optional=True),
    # RPC frame headers.
    Extension("triomq.protocol._remoting_speedups",
              sources=[f"{PROTOCOL}/_remoting_speedups.c"], optional=True),
    # Arrow-layout column buffers of records for the Spark reader (triomq.protocol.columns).
    Extension(
        "triomq.protocol._columns",
        sources=[f"{PROTOCOL}/_columns.c", f"{PROTOCOL}/_columns_starts.c"],
        depends=[f"{PROTOCOL}/_columns.h", f"{PROTOCOL}/_speedups.h"],
        libraries=["z"],
        optional=True,
    ),
])
