import glob
import os
import sys

import pytest

# An unpacked sdist holds rmqcore's sources uncompiled: `python -m pytest` run there puts them first on sys.path
# (the working directory), where they would shadow the installed build. Without compiled modules beside the
# tests, the sources are dropped from the path, so the tests import the installed package.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.isdir(os.path.join(_ROOT, "rmqcore")) and not glob.glob(os.path.join(_ROOT, "rmqcore", "_codec.*.so")):
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != os.path.realpath(_ROOT)]
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("dev", max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
# a long differential hunt before a release: HYPOTHESIS_PROFILE=soak python -m pytest tests
settings.register_profile("soak", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def small_config():
    from rmqcore import StoreConfig
    return StoreConfig(mapped_file_size_commit_log=64 * 1024, mapped_file_size_consume_queue=20 * 50,
                       max_message_size=16 * 1024, max_hash_slot_num=101, max_index_num=400,
                       warm_mapped_file_enable=False)
