"""StoreConfig: RocketMQ's MessageStoreConfig field names in snake_case, with RocketMQ's defaults.

Tests and demos pass small file sizes; production stores keep the defaults so their files are RocketMQ's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")


@dataclass
class StoreConfig:
    # Files
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    mapped_file_size_consume_queue: int = 300000 * 20
    max_hash_slot_num: int = 5000000
    max_index_num: int = 5000000 * 4
    message_index_enable: bool = True
    # Messages
    max_message_size: int = 1024 * 1024 * 4
    # The broker's address (brokerIP1:listenPort in RocketMQ), written as storeHost into every record.
    store_host: str = "127.0.0.1:10911"
    # Flush
    flush_disk_type: str = "ASYNC_FLUSH"
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 1000 * 10
    flush_commit_log_timed: bool = True
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    commit_commit_log_thorough_interval: int = 200
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 1000 * 60
    sync_flush_timeout: int = 1000 * 5
    # Write buffers: off by default and, as RocketMQ's isTransientStorePoolEnable, used with ASYNC_FLUSH only.
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    # Pre-fault and allocate a whole new file at once (RocketMQ's warmMapedFileEnable, off by default as there;
    # under SYNC_FLUSH it also writes the file's zeros to disk, as RocketMQ's warm-up does).
    warm_mapped_file_enable: bool = False
    # The write runway (rmqcore's own; RocketMQ has none): files are sparse, and only this many bytes ahead of the
    # write position are allocated on disk and pre-faulted, kept ahead of the writer by the allocate thread, so a
    # full disk is still an error (never SIGBUS) and appends stay free of page faults, while a store costs what it
    # holds. 0 allocates each new file whole when it is made. Bytes.
    mapped_file_runway_commit_log: int = 32 * 1024 * 1024
    mapped_file_runway_consume_queue: int = 1024 * 1024
    index_file_runway: int = 4 * 1024 * 1024
    # Reads
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    max_transfer_count_on_message_in_memory: int = 32
    # Recovery and cleaning
    check_crc_on_recover: bool = True
    file_reserved_time: int = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    delete_commit_log_files_interval: int = 100
    delete_file_batch_max: int = 10           # 5.x deleteFileBatchMax (4.x: DELETE_FILES_BATCH_MAX)
    delete_consume_queue_files_interval: int = 100
    destroy_mapped_file_interval_forcibly: int = 1000 * 120
    clean_resource_interval: int = 10000
    # Delay levels of the schedule topic, as RocketMQ's messageDelayLevel.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    extra: dict = field(default_factory=dict)
    # Delayed delivery (rmqcore/schedule.py): ScheduleMessageService runs with the store, as DefaultMessageStore
    # starts it on a master; its progress goes to config/delayOffset.json every flushDelayOffsetInterval ms.
    schedule_message_service_enable: bool = True
    flush_delay_offset_interval: int = 1000 * 10
    # Exact-time delivery (rmqcore/timer.py): 5.x's timerWheelEnable, timerMaxDelaySec, timerFlushIntervalMs.
    timer_wheel_enable: bool = True
    timer_max_delay_sec: int = 3600 * 24 * 3
    timer_flush_interval_ms: int = 1000

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        if self.flush_disk_type not in FLUSH_TYPES:
            raise ValueError(f"flush_disk_type must be one of {FLUSH_TYPES}, got {self.flush_disk_type!r}")
        for name in ("mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_message_size",
                     "max_hash_slot_num", "max_index_num"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of the 20-byte unit, got "
                             f"{self.mapped_file_size_consume_queue}")

    @property
    def sync_flush(self) -> bool:
        return self.flush_disk_type == "SYNC_FLUSH"

    def replace(self, **changes) -> "StoreConfig":
        return dataclasses.replace(self, **changes)
