"""Starts tests/console_host.py in a child process and talks to it: JSON commands on its stdin, HTTP to its
console (urllib, loopback only). Used by test_console.py and test_console_browser.py."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import rmqcore

HOST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "console_host.py")


class HostProcess:
    """``anonymous_changes``: without ``acl``, start the console with --console-allow-anonymous-changes (changes
    are refused otherwise). ``request`` sends the console's change token on every change unless told not to."""

    def __init__(self, store: str, acl: str | None = None, anonymous_changes: bool = False, allowed_hosts=()):
        self.store = store
        args = [sys.executable, HOST_SCRIPT, store]
        if acl:
            args += ["--acl", acl]
        if anonymous_changes:
            args.append("--console-allow-anonymous-changes")
        for name in allowed_hosts:
            args += ["--console-allowed-host", name]
        # the host imports the rmqcore this test imported (never an unpacked sdist's uncompiled sources)
        pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(rmqcore.__file__)))
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=pkg_parent,
                                     env={**os.environ, "PYTHONPATH": pkg_parent})
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(10)
            raise RuntimeError(f"console host exited with {self.proc.returncode} before listening")
        self.port = json.loads(line)["port"]
        self.url = f"http://127.0.0.1:{self.port}"
        self._token = None

    def cmd(self, op: str, **args):
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if not answer["ok"]:
            raise AssertionError(f"host refused {op}: {answer['error']}")
        return answer.get("result")

    def token(self, auth: tuple[str, str] | None = None) -> str:
        """The console's change token, as a script reads it (GET /api/v1/session)."""
        if self._token is None:
            status, _h, body = self.request("GET", "/api/v1/session", auth=auth, token=False)
            assert status == 200, (status, body)
            self._token = body["csrf_token"]
        return self._token

    def request(self, method: str, path: str, body=None, auth: tuple[str, str] | None = None,
                headers: dict | None = None, raw: bytes | None = None, token: bool = True):
        """(status, headers, parsed JSON or text) of one HTTP request to the console; a change carries the
        console's token unless ``token`` is false (or ``headers`` gives one)."""
        data = raw
        hdrs = dict(headers or {})
        if token and method not in ("GET", "HEAD"):
            hdrs.setdefault("X-RMQ-CSRF-Token", self.token(auth))
        if body is not None:
            data = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        if auth is not None:
            hdrs["Authorization"] = "Basic " + base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=hdrs)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, h, payload = resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as e:
            status, h, payload = e.code, e.headers, e.read()
        text = payload.decode("utf-8", "replace")
        if (h.get("Content-Type") or "").startswith("application/json"):
            return status, h, json.loads(text)
        return status, h, text

    def get(self, path: str, **kw):
        status, _h, payload = self.request("GET", path, **kw)
        assert status == 200, (path, status, payload)
        return payload

    def post(self, path: str, body: dict, **kw):
        return self.request("POST", path, body=body, **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            try:
                self.cmd("quit")
            except (BrokenPipeError, ValueError, AssertionError):
                pass
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdin.close()
        self.proc.stdout.close()
        return self.proc.returncode


def q(s: str) -> str:
    return urllib.parse.quote(s, safe="")
