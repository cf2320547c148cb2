"""The real RocketMQ 4.9.7 Java client and mqadmin, signing with AclClientRPCHook, against `rmqcore serve --remoting
--namesrv --acl FILE` in a child process: tests/java/AclScenario.java, compiled against the java-broker harness's
classpath (its jar holds RocketMQ's acl module). Without a JDK or the harness every test here skips, saying why.
"""
import json
import os
import shutil
import subprocess

import pytest

from java_util import ensure_build
from remoting_util import Client, RemotingProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JAVA_DIR = os.path.join(ROOT, "tests", "java")
ACCOUNTS = {"accounts": [
    {"accessKey": "RocketMQ", "secretKey": "12345678", "defaultTopicPerm": "DENY", "defaultGroupPerm": "SUB",
     "topicPerms": ["acl-j=PUB|SUB", "acl-denied=SUB"], "groupPerms": ["denied-g=DENY"]},
    {"accessKey": "rocketmq2", "secretKey": "87654321", "admin": True},
]}
ADMIN = ("rocketmq2", "87654321")


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    build = ensure_build()
    with open(os.path.join(build, "cp.txt")) as f:
        cp = f.read().strip()
    classes = str(tmp_path_factory.mktemp("acl-classes"))
    r = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "-d", classes, "-cp", cp,
                        os.path.join(JAVA_DIR, "AclScenario.java")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    home = str(tmp_path_factory.mktemp("acl-java-home"))
    return build, ["java", "-Xmx256m", "-Dfile.encoding=UTF-8", "--add-opens", "java.base/java.nio=ALL-UNNAMED",
                   "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED", f"-Duser.home={home}",
                   f"-Drocketmq.client.logRoot={home}/logs", "-cp", f"{classes}:{cp}"]


@pytest.fixture(scope="module")
def server(java, tmp_path_factory):
    d = tmp_path_factory.mktemp("acl-jremoting")
    (d / "plain_acl.json").write_text(json.dumps(ACCOUNTS))
    with RemotingProcess(str(d / "store"), args=["--acl", str(d / "plain_acl.json")]) as s:
        for topic in ("acl-j", "acl-denied"):
            out = mqadmin(java, d, ADMIN, "updateTopic", "-b", s.address, "-t", topic, "-r", "4", "-w", "4")
            assert f"create topic to {s.address} success" in out, out
        yield s


def scenario(java, *args):
    r = subprocess.run([*java[1], "AclScenario", *args], capture_output=True, text=True, timeout=180)
    lines = [ln for ln in r.stdout.splitlines() if " INFO " not in ln and " WARN " not in ln]
    assert r.returncode == 0 and "OK" in lines, r.stdout[-3000:] + r.stderr[-2000:]
    return lines


def mqadmin(java, tmp_path, account, *args) -> str:
    """mqadmin as a user runs it: rocketmq.home.dir/conf/tools.yml holds its accessKey/secretKey (MQAdminStartup's
    AclUtils.getAclRPCHook), none when ``account`` is None."""
    home = tmp_path / f"home-{account[0] if account else 'none'}"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    shutil.copy(os.path.join(java[0], "src", "distribution", "conf", "logback_tools.xml"), home / "conf")
    if account:
        (home / "conf" / "tools.yml").write_text(f"accessKey: {account[0]}\nsecretKey: {account[1]}\n")
    r = subprocess.run([*java[1][:1], f"-Drocketmq.home.dir={home}", *java[1][1:],
                        "org.apache.rocketmq.tools.command.MQAdminStartup", *args], capture_output=True, text=True,
                       timeout=120)
    return "\n".join(ln for ln in (r.stdout + r.stderr).splitlines() if " INFO " not in ln)


def test_signature_vector_is_what_the_jdk_computes(java):
    # the vector test_remoting_acl.py holds the Python signer to, computed again by the Java client's hook
    assert "SIG upZxgWHG23vex+bTfk9hIvcTkNw=" in scenario(java, "vector")


def test_mqadmin_update_topic_needs_an_admin_account(java, server, tmp_path):
    args = ["updateTopic", "-b", server.address, "-t", "acl-by-mqadmin", "-r", "2", "-w", "2"]
    out = mqadmin(java, tmp_path, ("RocketMQ", "12345678"), *args)
    assert "CODE: 16" in out and "Need admin permission for request code=17, but accessKey=RocketMQ is not" in out
    out = mqadmin(java, tmp_path, None, *args)
    assert "CODE: 16" in out and "No accessKey is configured" in out
    c = Client(server.namesrv)
    assert c.call(105, {"topic": "acl-by-mqadmin"}).code == 17        # TOPIC_NOT_EXIST: the refusals made nothing
    out = mqadmin(java, tmp_path, ADMIN, *args)
    assert f"create topic to {server.address} success" in out, out
    assert c.call(105, {"topic": "acl-by-mqadmin"}).code == 0
    c.close()


def test_producer_and_push_consumer_with_a_right_account(java, server, tmp_path):
    assert "SENT 10" in scenario(java, server.namesrv, "send", "RocketMQ", "12345678", "acl-j", "10")
    assert "GOT 10" in scenario(java, server.namesrv, "push", "RocketMQ", "12345678", "acl-j", "cg-ok", "10")
    assert "PULLED FOUND" in scenario(java, server.namesrv, "pull", "RocketMQ", "12345678", "acl-j", "cg-ok")


@pytest.mark.parametrize("args,remark", [
    (("send", "RocketMQ", "wrong-secret", "acl-j", "1"), "Check signature failed for accessKey=RocketMQ"),
    (("send", "-", "-", "acl-j", "1"), "No accessKey is configured"),
    (("send", "nobody", "12345678", "acl-j", "1"), "No acl config for nobody"),
    (("send", "RocketMQ", "12345678", "acl-denied", "1"), "No default permission for topic:acl-denied"),
    (("pull", "RocketMQ", "12345678", "acl-j", "denied-g"), "No default permission for group:denied-g"),
    (("pull", "RocketMQ", "wrong-secret", "acl-j", "cg-ok"), "Check signature failed for accessKey=RocketMQ"),
])
def test_refused_requests_raise_the_clients_exception_with_the_remark(java, server, args, remark):
    lines = scenario(java, server.namesrv, *args)
    assert f"ERR 16 {remark}" in lines, lines[-20:]
