"""Regenerate messaging_pb2.py from messaging.proto (needs grpcio-tools): ``python -m rmqcore.server.gen_proto``.

The descriptor registers as ``rmqcore/server/messaging.proto`` in package ``rmqcore.server.v2``, so it never clashes
with the official client's ``apache.rocketmq.v2`` files in protobuf's default pool. protoc's runtime-version guard
is dropped from the output: the module uses only the serialized-descriptor builder API that every protobuf >= 4.21
has, and the guard would otherwise demand a runtime at least as new as the protoc that generated it.
"""
import os
import re
import sys


def main() -> int:
    from grpc_tools import protoc
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{root}", f"-I{include}", f"--python_out={root}",
                      os.path.join(root, "rmqcore", "server", "messaging.proto")])
    if rc:
        return rc
    out = os.path.join(root, "rmqcore", "server", "messaging_pb2.py")
    with open(out) as f:
        text = f.read()
    text = re.sub(r"from google\.protobuf import runtime_version as _runtime_version\n", "", text)
    text = re.sub(r"_runtime_version\.ValidateProtobufRuntimeVersion\([^)]*\)\n", "", text)
    with open(out, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
