"""The package root: the embedding API, each name loaded on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import framework
import framework.config
import framework.runtime


def test_the_embedding_api_is_the_modules_own() -> None:
    assert framework.open_node is framework.runtime.open_node
    assert framework.NodeConfig is framework.config.NodeConfig
    assert set(framework.__all__) <= set(dir(framework))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        framework.nope  # noqa: B018


def test_importing_a_codec_does_not_load_the_runtime() -> None:
    # A Spark worker decoding records needs neither trio nor the node runtime.
    code = ("import sys, framework.protocol.columns, plugins.spark_export.arrow_decode; "
            "print(sorted(m for m in ('trio', 'framework.runtime') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
