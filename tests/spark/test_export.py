"""``triomq export parquet`` with pyarrow: layout, types, resume, errors."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins import spark_export
from tests.spark.storegen import decode_store, normalize, sample_records
from triomq.plugins.spark_export import triomq_add_cli_commands
from triomq.plugins.spark_export.cli import main
from triomq.plugins.spark_export.errors import SparkExportError
from triomq.plugins.spark_export.parquet import STATE_FILE, ExportState, topic_dir
from triomq.plugins.spark_export.progress import ProgressLines, terminal_bar


def exported(out_dir):
    table = ds.dataset(out_dir, format="parquet", partitioning="hive",
                       exclude_invalid_files=True).to_table()
    return table


def test_export_writes_topic_partitions_with_spark_types(store, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "parquet", store.root, str(out)]) == 0
    assert "exported 3000 messages" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        STATE_FILE, "topic=audit", "topic=orders", "topic=payments"]
    table = exported(str(out))
    schema = table.schema
    assert schema.field("bornTimestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("queueOffset").type == pa.int64()
    assert schema.field("size").type == pa.int32()
    rows = normalize([{**r, "topic": str(r["topic"])} for r in table.to_pylist()])
    assert rows == decode_store(store.root)


def test_export_resumes_where_it_stopped(store, tmp_path):
    out = str(tmp_path / "out")
    middle = store.placed[1500][0] + 10
    assert main(["export", "parquet", store.root, out, "--to", str(middle)]) == 0
    with open(f"{out}/{STATE_FILE}") as f:
        state = json.load(f)
    assert state["next_offset"] == store.placed[1500][0]
    store.append(sample_records(100, start=3000))
    assert main(["export", "parquet", store.root, out]) == 0
    offsets = sorted(exported(out).column("physicalOffset").to_pylist())
    assert offsets == [p for p, _, _ in store.placed]


def test_export_topics_and_percent_encoded_names(tmp_path):
    from tests.spark.storegen import StoreWriter

    writer = StoreWriter(str(tmp_path / "s"), 1 << 16)
    writer.append(sample_records(30, topics=("a/b%c", "plain")))
    out = str(tmp_path / "out")
    assert main(["export", "parquet", writer.root, out, "--topics", "a/b%c"]) == 0
    assert topic_dir(out, "a/b%c").endswith("topic=a%2Fb%25c")
    assert exported(out).num_rows == 15
    assert main(["export", "parquet", writer.root, out, "--topics", "plain"]) == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--from", "x"], "startingOffset"),
    (["--to", "999999999"], "endingOffset"),
    (["--committed-only"], "committedOnly"),
])
def test_export_errors_name_the_option(store, tmp_path, capsys, args, message):
    assert main(["export", "parquet", store.root, str(tmp_path / "o"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_hook_adds_the_export_command():
    parser = argparse.ArgumentParser()
    triomq_add_cli_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["export", "parquet", "s", "o", "--topics", "a", "b"])
    assert args.topics == ["a", "b"] and args.func.__name__ == "run_export"


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_state_file_decoder_accepts_or_names_the_file(tmp_path_factory, raw):
    out = tmp_path_factory.mktemp("state")
    (out / STATE_FILE).write_bytes(raw)
    try:
        state = ExportState.load(str(out))
    except SparkExportError as exc:
        assert STATE_FILE in str(exc)
    else:
        assert isinstance(state.next_offset, int)


def test_the_triomq_command_line_runs_the_export(store, tmp_path, capsys):
    from triomq.cli import build_parser
    from triomq.plugin_manager import PluginManager

    pm = PluginManager()
    pm.register(spark_export, name="spark_export")
    args = build_parser(pm).parse_args(["export", "parquet", store.root, str(tmp_path / "o"),
                                        "--topics", "audit"])
    assert args.func(args) == 0
    assert "exported 1000 messages" in capsys.readouterr().out


def test_progress_reaches_the_total(store, tmp_path):
    from triomq.plugins.spark_export.options import ReadOptions
    from triomq.plugins.spark_export.parquet import export_parquet

    calls = []
    opts = ReadOptions(path=store.root, max_bytes_per_partition=50_000)
    result = export_parquet(opts, str(tmp_path / "o"),
                            lambda done, total, messages: calls.append((done, messages)))
    assert calls == sorted(calls) and len(calls) > 5
    assert calls[-1] == (result.end - result.start, result.rows) == (store.end, 3000)


def test_plain_progress_lines_come_at_most_every_interval():
    lines = ProgressLines(interval=10)
    mib = 1 << 20
    assert lines.update(100.0, 0, 100 * mib, 0) is None  # the start
    assert lines.update(105.0, 10 * mib, 100 * mib, 500) is None
    assert lines.update(110.0, 20 * mib, 100 * mib, 1000) == (
        "exporting: 1,000 messages, 20.0 MiB of 100.0 MiB (20%), 2.0 MiB/s, 0:00:40 left")
    assert lines.update(119.0, 30 * mib, 100 * mib, 1500) is None
    assert lines.update(130.0, 60 * mib, 100 * mib, 3000) == (
        "exporting: 3,000 messages, 60.0 MiB of 100.0 MiB (60%), 2.0 MiB/s, 0:00:20 left")


def test_a_piped_export_prints_plain_progress_lines(store, tmp_path):
    # stderr is a pipe here: no bar; an export this short ends before a line is due.
    done = subprocess.run([sys.executable, "-m", "triomq.plugins.spark_export.cli", "export",
                           "parquet", store.root, str(tmp_path / "o")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "exported 3000 messages" in done.stdout
    assert "\x1b[" not in done.stderr and "exporting:" not in done.stderr


def test_the_terminal_bar_shows_messages_bytes_rate_and_time_left():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    with terminal_bar(console) as update:
        update(20 << 20, 100 << 20, 1000)
    # Rate and time left are unknown ("?", "-:--:--") until rich has measured a rate.
    assert "1,000 messages 20.0/100.0 MiB ? -:--:--" in out.getvalue()
