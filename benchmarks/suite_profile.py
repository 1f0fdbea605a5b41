"""Where the CPU of a test run goes: the JVMs' JIT compilers and collectors against the rest of their work
(Spark, Delta), read from each JVM while test files run with the suite's settings, in one process (`make test`
runs two workers).

    .venv/bin/python benchmarks/suite_profile.py [tests/spark/test_recycle.py ...]

Every Spark JVM that runs while the tests do (the suite's own, the server it starts) is sampled every 2 s:
its CPU seconds (from /proc), and the seconds its JIT compilers and its collectors spent, from the counters
every HotSpot JVM keeps in a file (`hsperfdata`, what `jstat` reads; read here without starting a JVM to
read them). A JVM's last sample before it exits is its figure. Results go to
`benchmarks/results/suite-profile-*.json`.
"""

from __future__ import annotations

import argparse
import getpass
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import write_results

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILES = ("tests/spark/test_recycle.py",)
SPARK_MAIN_CLASSES = (b"org.apache.spark.deploy.SparkSubmit", b"SparkConnectServer")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class JvmSample:
    cpu_seconds: float
    jit_seconds: float
    gc_seconds: float


def spark_jvms() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(name in command for name in SPARK_MAIN_CLASSES):
            pids.append(int(entry.name))
    return pids


def long_counters(pid: int) -> dict[str, int]:
    """The 64-bit counters of a JVM's perf-data file: a 32-byte prologue, then entries of a 20-byte header
    (length, name offset, vector length, type, flags, units, variability, data offset), a name and a value."""
    data = (Path(tempfile.gettempdir()) / f"hsperfdata_{getpass.getuser()}" / str(pid)).read_bytes()
    order = "<" if data[4] == 1 else ">"
    position, entries = struct.unpack_from(f"{order}ii", data, 24)
    counters = {}
    for _ in range(entries):
        length, name_at, vector, kind, _flags, _units, _variability, value_at = struct.unpack_from(
            f"{order}iiibbbbi", data, position
        )
        name_start = position + name_at
        name = data[name_start : data.index(b"\0", name_start)].decode()
        if vector == 0 and kind == ord("J"):
            counters[name] = struct.unpack_from(f"{order}q", data, position + value_at)[0]
        position += length
    return counters


def sample(pid: int) -> JvmSample | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        counters = long_counters(pid)
    except (OSError, ValueError, struct.error):
        return None  # it exited between two looks
    # utime and stime are the 14th and 15th fields of /proc/<pid>/stat, the 12th and 13th after the name.
    cpu = (int(fields[11]) + int(fields[12])) / TICKS
    tick = counters["sun.os.hrt.frequency"]
    collectors = sum(
        value for name, value in counters.items() if name.startswith("sun.gc.collector.") and name.endswith(".time")
    )
    return JvmSample(round(cpu, 1), round(counters["java.ci.totalTime"] / tick, 1), round(collectors / tick, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    options = parser.parse_args()
    before = set(spark_jvms())
    started = time.perf_counter()
    # Into a file, not a pipe: a pipe nobody reads while the tests run would stall them once full.
    with tempfile.TemporaryFile("w+") as output:
        tests = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options.files],
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT,
            text=True,
        )
        last: dict[int, JvmSample] = {}
        while tests.poll() is None:
            for pid in set(spark_jvms()) - before:
                last[pid] = sample(pid) or last.get(pid)
            time.sleep(2)
        wall = round(time.perf_counter() - started, 1)
        if tests.returncode != 0:
            output.seek(0)
            raise SystemExit(f"{options.files} failed:\n{output.read()[-3000:]}")
    jvms = [jvm for jvm in last.values() if jvm is not None]
    total = JvmSample(
        *(round(sum(getattr(jvm, name) for jvm in jvms), 1) for name in ("cpu_seconds", "jit_seconds", "gc_seconds"))
    )
    # pytest's process and the processes it waited for; the Spark JVMs' CPU is counted above, from /proc.
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    path = write_results(
        "suite-profile",
        {
            "files": options.files,
            "wall_seconds": wall,
            "jvms": [asdict(jvm) for jvm in jvms],
            "jvm_total": asdict(total),
            "jit_share_of_jvm_cpu": round(total.jit_seconds / total.cpu_seconds, 2) if total.cpu_seconds else None,
            "gc_share_of_jvm_cpu": round(total.gc_seconds / total.cpu_seconds, 2) if total.cpu_seconds else None,
            "python_cpu_seconds": round(children.ru_utime + children.ru_stime, 1),
        },
    )
    print(
        f"{wall} s wall; Spark JVMs {total.cpu_seconds} s CPU, of which JIT {total.jit_seconds} s "
        f"and GC {total.gc_seconds} s; results in {path}"
    )


if __name__ == "__main__":
    main()
