"""Kafka's runtime jars and the Java that runs them.

:func:`ensure_jars` resolves Apache Kafka's runtime classpath once with Maven (``maven/pom.xml``)
into ``<cache>/kafka-<version>/lib`` (a ``.complete`` marker says the copy finished) and reuses it
afterwards; concurrent stacks wait on a lock for the first fetch.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from devtools.stack.supervisor import Reporter, StackError, StackLayout, file_lock

POM = Path(__file__).with_name("maven") / "pom.xml"
_COMPLETE_MARKER = ".complete"


def java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise StackError("java was not found: Kafka 4.x needs Java 17 or newer on the PATH")
    return java


def ensure_jars(layout: StackLayout, report: Reporter) -> Path:
    """The directory of Kafka's runtime jars, fetched from Maven Central on first use."""
    lib = layout.kafka_lib_dir
    marker = lib.parent / _COMPLETE_MARKER
    if marker.is_file() and lib.is_dir():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StackError("mvn was not found: Maven fetches Kafka's jars (apt-get install maven)")
    lib.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(lib.parent / ".lock", report, "fetching Kafka's jars"):
        if marker.is_file() and lib.is_dir():  # another process finished it meanwhile
            return lib
        for leftover in lib.parent.glob("lib.partial-*"):  # from an interrupted fetch
            shutil.rmtree(leftover, ignore_errors=True)
        staging = lib.parent / f"lib.partial-{os.getpid()}"
        log = lib.parent / "maven.log"
        report(f"kafka: fetching Apache Kafka {layout.kafka_version} jars with Maven into {lib}")
        started = time.monotonic()
        command = [
            mvn,
            "-B",
            "-q",
            "-Dstyle.color=never",
            "-f",
            str(POM),
            f"-Dmaven.repo.local={layout.cache_dir / 'maven-repository'}",
            f"-Dkafka.version={layout.kafka_version}",
            f"-DoutputDirectory={staging}",
            "dependency:copy-dependencies",
        ]
        with log.open("w") as out:
            result = subprocess.run(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, check=False
            )
        jars = sorted(staging.glob("*.jar")) if staging.is_dir() else []
        if result.returncode != 0 or not any(j.name.startswith("kafka_2.13-") for j in jars):
            shutil.rmtree(staging, ignore_errors=True)
            raise StackError(
                f"Maven could not fetch Kafka {layout.kafka_version} (exit {result.returncode}); "
                f"command: {' '.join(command)}",
                (log,),
            )
        shutil.rmtree(lib, ignore_errors=True)
        staging.rename(lib)
        marker.write_text(f"{len(jars)} jars\n")
        report(f"kafka: {len(jars)} jars fetched in {time.monotonic() - started:.1f} s")
    return lib
