"""Where the Java RocketMQ 4.9.7 harness is (../shared/java-broker, its prebuilt.sh: Debian's jars only) and its
build, shared by the tests that run real Java clients and brokers (test_remoting_java, test_ha_java).

The harness: $RMQCORE_JAVA_BROKER, else ../shared/java-broker or ../../shared/java-broker beside the repository.
Its build: $RMQCORE_JBROKER_BUILD (default ~/.cache/rmqcore/jbroker), made once with ``NO_APT=1 prebuilt.sh``
(CI apt-gets the Debian jars in .ci/run). Without a JDK, the harness or its jars, ``ensure_build`` skips the
calling test saying which is missing."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def harness() -> str | None:
    env = os.environ.get("RMQCORE_JAVA_BROKER")
    for d in ([env] if env else []) + [os.path.join(ROOT, "..", "shared", "java-broker"),
                                       os.path.join(ROOT, "..", "..", "shared", "java-broker")]:
        if d and os.path.exists(os.path.join(d, "prebuilt.sh")):
            return os.path.abspath(d)
    return None


def build_dir() -> str:
    return os.environ.get("RMQCORE_JBROKER_BUILD", os.path.expanduser("~/.cache/rmqcore/jbroker"))


def _classpath_present(cp_file: str) -> bool:
    """Every jar cp.txt names is there (a build made where the harness lay elsewhere names jars that are not)."""
    with open(cp_file) as f:
        return all(os.path.exists(p) for p in f.read().strip().split(":") if p)


def prepare_build() -> tuple[str | None, str | None]:
    """(the harness's build directory, None), made (or remade, when its classpath is gone) if needed; or (None,
    why not). The Java tests skip with the reason (ensure_build), bench/remoting_bench.py reports it."""
    if not shutil.which("java") or not shutil.which("javac"):
        return None, "no JDK (java and javac): apt-get install default-jdk-headless"
    h = harness()
    if h is None:
        return None, "the java-broker harness is not here (set RMQCORE_JAVA_BROKER to ../shared/java-broker)"
    build = build_dir()
    cp_file = os.path.join(build, "cp.txt")
    if not os.path.exists(cp_file) or not _classpath_present(cp_file):
        r = subprocess.run(["bash", os.path.join(h, "prebuilt.sh")], env={**os.environ, "BUILD": build,
                           "NO_APT": "1"}, capture_output=True, text=True, timeout=600)
        if r.returncode != 0 or not os.path.exists(cp_file):
            return None, f"the java-broker harness did not set up (Debian's jars missing?): {r.stderr[-500:]}"
    return build, None


def ensure_build() -> str:
    """The harness's build directory (cp.txt, classes/, src/distribution), made if missing; skips without it."""
    build, why = prepare_build()
    if build is None:
        pytest.skip(why)
    return build


def java_client(workdir: str) -> list[str]:
    """The ``java`` command prefix that runs the real 4.9.7 client, mqadmin (MQAdminStartup) and the programs of
    tests/java (compiled into ``workdir``/classes) on the harness's classpath; skips as ``ensure_build`` does."""
    build = ensure_build()
    with open(os.path.join(build, "cp.txt")) as f:
        cp = f.read().strip()
    classes = os.path.join(workdir, "classes")
    home = os.path.join(workdir, "home")
    os.makedirs(classes, exist_ok=True)
    os.makedirs(home, exist_ok=True)
    java_dir = os.path.join(ROOT, "tests", "java")
    sources = [os.path.join(java_dir, n) for n in sorted(os.listdir(java_dir)) if n.endswith(".java")]
    r = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", classes, "-cp", cp, *sources],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    # mqadmin reads its logback_tools.xml from rocketmq.home.dir/conf (prebuilt.sh puts it there)
    return ["java", f"-Drocketmq.home.dir={build}/src/distribution", "-Xmx256m", "-Dfile.encoding=UTF-8",
            "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
            f"-Duser.home={home}", f"-Drocketmq.client.logRoot={home}/logs", "-cp", f"{classes}:{cp}"]


JVM_FLAGS = ["-XX:+UseG1GC", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
             "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
             "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.lang=ALL-UNNAMED",
             "--add-opens", "java.base/java.util=ALL-UNNAMED", "--add-exports",
             "java.base/sun.security.x509=ALL-UNNAMED", "-Drocketmq.bind.addr=127.0.0.1"]


def start_java_broker(run_dir: str, conf: dict, boot_s: float = 90):
    """A Java 4.9.7 BrokerStartup with ``conf`` as its broker.conf (storePathRootDir under ``run_dir`` unless given),
    started and waited for ("boot success"); returns the Popen (its output in run_dir/broker.out)."""
    import time
    build = ensure_build()
    home = os.path.join(run_dir, "home")
    os.makedirs(os.path.join(home, "conf"), exist_ok=True)
    shutil.copy(os.path.join(build, "src", "distribution", "conf", "logback_broker.xml"), os.path.join(home, "conf"))
    conf = {"storePathRootDir": f"{run_dir}/store", "storePathCommitLog": f"{run_dir}/store/commitlog", **conf}
    path = os.path.join(home, "conf", "broker.conf")
    with open(path, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in conf.items()))
    cp = os.path.join(build, "classes") + ":" + open(os.path.join(build, "cp.txt")).read().strip()
    out_path = os.path.join(run_dir, "broker.out")
    with open(out_path, "w") as out:
        proc = subprocess.Popen(["java", "-Xms256m", "-Xmx256m", "-Xmn128m", "-cp", cp, *JVM_FLAGS,
                                 f"-Duser.home={run_dir}", "org.apache.rocketmq.broker.BrokerStartup", "-c", path],
                                stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "ROCKETMQ_HOME": home, "LC_ALL": "C.UTF-8"})
    deadline = time.monotonic() + boot_s
    while "boot success" not in open(out_path).read():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the Java broker did not start: " + open(out_path).read()[-3000:])
        time.sleep(0.3)
    return proc
