"""A real S3-protocol server for the Spark tests: moto's ThreadedMotoServer on 127.0.0.1 (an ephemeral port,
nothing else on the network), with local stores copied into a bucket through pyarrow's S3 client."""
import os

import pytest

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_EC2_METADATA_DISABLED": "true"}


def set_credentials():
    # Before a SparkSession starts, so its Python workers inherit them too.
    for k, v in CREDENTIALS.items():
        os.environ.setdefault(k, v)


class S3Server:
    def __init__(self):
        moto_server = pytest.importorskip("moto.server", reason="moto[server] not installed "
                                                                "(pip install -e '.[spark]')")
        from pyarrow import fs as pafs
        import logging
        logging.getLogger("werkzeug").setLevel(logging.ERROR)     # one line per request otherwise
        set_credentials()
        self.server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.query = f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
        self.fs = pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                                    access_key="testing", secret_key="testing", allow_bucket_creation=True)
        self.fs.create_dir("stores")

    def upload(self, local_root: str, name: str) -> str:
        """Copy a store into the bucket; its s3:// URI (with the endpoint in the query)."""
        from pyarrow import fs as pafs
        pafs.copy_files(local_root, f"stores/{name}", source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=self.fs)
        return f"s3://stores/{name}?{self.query}"

    def stop(self):
        self.server.stop()
