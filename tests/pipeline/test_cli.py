"""`rocksidecar spark-publish` and the job behind it: --help starts no JVM, Parquet/JSON/CSV inputs are
published with their counts printed, rejected rows give exit code 1 naming them, a --job-id re-run
sends nothing twice, and spark-submit runs the job file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from rocksidecar.app.cli import main
from rocksidecar.pipeline.options import KNOWN
from tests.pipeline.sidecar_process import Sidecar

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[2]


def test_help_and_bad_arguments_start_no_spark() -> None:
    code = (
        "import sys\nfrom app.cli import main\n"
        "bad = ['spark-publish', '--input', 'x', '--format', 'xml', '--topic', 'T']\n"
        "for argv in (['spark-publish', '--help'], bad):\n"
        "    try:\n        main(argv)\n    except SystemExit as e:\n        print('exit', e.code)\n"
        "print('pyspark loaded:', 'pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "--input PATH" in out.stdout and "--key-column C" in out.stdout
    assert "exit 0" in out.stdout and "exit 2" in out.stdout and "invalid choice: 'xml'" in out.stderr
    assert "pyspark loaded: False" in out.stdout


def test_parquet_with_key_column(
    spark: SparkSession, sidecar: Sidecar, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(tmp_path / "orders.parquet")
    spark.range(500).select(
        F.concat(F.lit("order-"), F.col("id")).alias("body"), F.concat(F.lit("k"), F.col("id")).alias("key")
    ).write.parquet(data)
    argv = ["spark-publish", "--input", data, "--format", "parquet", "--topic", topic, "--key-column", "key"]
    assert main([*argv, "--endpoint", sidecar.url]) == 0
    out = capsys.readouterr().out
    assert f"-> topic {topic} via {sidecar.url}" in out
    assert "rows 500: sent 500, spooled 0, scheduled 0, rejected 0" in out
    stored = sidecar.pull(topic)
    assert sorted((m.body.decode(), m.keys) for m in stored) == sorted(
        (f"order-{i}", (f"k{i}",)) for i in range(500)
    )


def test_csv_with_rejected_rows_exits_1_naming_them(
    spark: SparkSession, sidecar: Sidecar, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "in.csv"
    data.write_text("id,body\n" + "".join(f"{i},{'' if i in (3, 8) else f'text {i}'}\n" for i in range(10)))
    code = main(
        [
            "spark-publish",
            "--input",
            str(data),
            "--format",
            "csv",
            "--topic",
            topic,
            "--endpoint",
            sidecar.url,
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert "rows 10: sent 8, spooled 0, scheduled 0, rejected 2" in captured.out
    assert "rejected: partition 0 row 3: messages[3].body: give exactly one of body" in captured.out
    assert "rejected: partition 0 row 8:" in captured.out
    assert "RejectedRowsError: 2 of 10 rows were rejected" in captured.err
    assert sorted(m.body.decode() for m in sidecar.pull(topic)) == sorted(
        f"text {i}" for i in range(10) if i not in (3, 8)
    )


def test_json_rerun_with_the_same_job_id_sends_nothing_twice(
    spark: SparkSession, sidecar: Sidecar, topic: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "in.json"
    data.write_text(
        "".join(f'{{"n": {i}, "name": "item {i}"}}\n' for i in range(300))
    )  # no body column: rows as JSON; n is a bigint, sent as text keys
    argv = [
        "spark-publish",
        "--input",
        str(data),
        "--format",
        "json",
        "--topic",
        topic,
        "--endpoint",
        sidecar.url,
        "--key-column",
        "n",
    ]
    assert main([*argv, "--job-id", "nightly-2024-06-01"]) == 0
    first = capsys.readouterr().out
    assert "rows 300: sent 300, spooled 0, scheduled 0, rejected 0, deduplicated 0" in first
    assert main([*argv, "--job-id", "nightly-2024-06-01"]) == 0  # the second run gets the first answers
    again = capsys.readouterr().out
    assert "rows 300: sent 0, spooled 0, scheduled 0, rejected 0, deduplicated 300" in again
    stored = sidecar.pull(topic)
    assert sorted((m.body.decode(), m.keys) for m in stored) == sorted(
        (f'{{"n":{i},"name":"item {i}"}}', (str(i),)) for i in range(300)
    )


def test_bad_input_exits_2_with_one_line_before_any_jvm(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom app.cli import main\n"
        "base = ['spark-publish', '--format', 'json', '--topic', 'T']\n"
        f"print('exit', main([*base, '--input', {str(tmp_path / 'nope')!r}]))\n"
        f"print('exit', main([*base, '--input', {str(tmp_path)!r}, '--option', 'bathSize=9']))\n"
        "print('pyspark loaded:', 'pyspark' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.splitlines() == ["exit 2", "exit 2", "pyspark loaded: False"]
    assert out.stderr.splitlines() == [
        f"error: --input {tmp_path / 'nope'}: no such file or directory",
        "error: OptionError: unknown option 'bathSize'; did you mean 'batchSize'? known: "
        + ", ".join(sorted(KNOWN)),
    ]


def test_an_input_spark_cannot_read_exits_2(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = ["spark-publish", "--input", str(empty), "--format", "parquet", "--topic", "T"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot read --input {empty}: "), err


def test_register_from_a_plain_venv_script_runs_workers_on_that_python(
    sidecar: Sidecar, topic: str, tmp_path: Path
) -> None:
    """`.venv/bin/python job.py` without PYSPARK_PYTHON and without the venv on PATH: the workers must
    not run the system's python3, which has no httpx."""
    data = tmp_path / "in.json"
    data.write_text("".join(f'{{"body": "plain {i}"}}\n' for i in range(20)))
    script = tmp_path / "job.py"
    script.write_text(
        "from pyspark.sql import SparkSession\nfrom pipeline import register\n"
        "spark = SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false').getOrCreate()\n"
        "register(spark)\n"
        f"spark.read.json({str(data)!r}).write.format('rocksidecar').mode('append')"
        f".option('topic', {topic!r}).option('endpoint', {sidecar.url!r}).save()\n"
        "spark.stop()\n"
    )
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "VIRTUAL_ENV"))}
    env.update(PATH=path, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(m.body.decode() for m in sidecar.pull(topic)) == sorted(f"plain {i}" for i in range(20))


def test_bad_option_exits_2(spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "in.json"
    data.write_text('{"body": "x"}\n')
    argv = [
        "spark-publish",
        "--input",
        str(data),
        "--format",
        "json",
        "--topic",
        "T",
        "--option",
        "batchsize=0",
    ]
    assert main(argv) == 2
    assert "OptionError: option batchSize='0' must be between 1 and 10000" in capsys.readouterr().err


def test_spark_submit_runs_the_job_file(sidecar: Sidecar, topic: str, tmp_path: Path) -> None:
    data = tmp_path / "in.json"
    data.write_text("".join(f'{{"body": "line {i}"}}\n' for i in range(50)))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    spark_submit = Path(sys.executable).parent / "spark-submit"
    job = ROOT / "pipeline" / "publish_job.py"
    args = ["--input", str(data), "--format", "json", "--topic", topic, "--endpoint", sidecar.url]
    cmd = [str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(job), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rows 50: sent 50, spooled 0, scheduled 0, rejected 0" in out.stdout
    assert sorted(m.body.decode() for m in sidecar.pull(topic)) == sorted(f"line {i}" for i in range(50))


def test_an_unreachable_sidecar_exits_1_saying_so(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "in.json"
    data.write_text('{"body": "x"}\n')
    argv = ["spark-publish", "--input", str(data), "--format", "json", "--topic", "T"]
    options = ["--option", "maxRetries=1", "--option", "retryBackoffMax=0.01"]
    assert main([*argv, "--endpoint", "http://127.0.0.1:9", *options]) == 1
    err = capsys.readouterr().err
    assert "GaveUpError: the sidecar stayed unavailable after 1 retries: ConnectError" in err
