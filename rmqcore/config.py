"""StoreConfig: RocketMQ's MessageStoreConfig field names in snake_case, with RocketMQ's defaults.

Tests and demos pass small file sizes; production stores keep the defaults so their files are RocketMQ's.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

FLUSH_TYPES = ("ASYNC_FLUSH", "SYNC_FLUSH")
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")


@dataclass
class StoreConfig:
    """The store's settings: RocketMQ's MessageStoreConfig fields in snake_case, with RocketMQ's defaults.

    Sizes are bytes, intervals milliseconds, unless a field says otherwise. Construction validates (ValueError
    naming the field); ``replace(**changes)`` returns a validated copy.
    """

    # Files
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    """RocketMQ's mappedFileSizeCommitLog: bytes per commitlog file (1 GiB). A store keeps the size it was
    written with: MessageStore.open reads it from the files."""
    mapped_file_size_consume_queue: int = 300000 * 20
    """mappedFileSizeConsumeQueue: bytes per consume-queue file, a multiple of the 20-byte unit
    (300,000 units)."""
    max_hash_slot_num: int = 5000000
    """maxHashSlotNum: hash slots per index file (4 bytes each)."""
    max_index_num: int = 5000000 * 4
    """maxIndexNum: index items per index file (20 bytes each); a file is full at this many keys."""
    message_index_enable: bool = True
    """messageIndexEnable: index every message's KEYS and UNIQ_KEY for query_message."""
    # Messages
    max_message_size: int = 1024 * 1024 * 4
    """maxMessageSize: the largest record accepted, in bytes (RocketMQ checks the encoded length);
    a larger message is refused with MessageIllegalError (status MESSAGE_ILLEGAL), nothing written."""
    # The broker's address (brokerIP1:listenPort in RocketMQ), written as storeHost into every record.
    store_host: str = "127.0.0.1:10911"
    """The broker's address (brokerIP1:listenPort), written as storeHost into every record and used in
    offset msg ids."""
    # Flush
    flush_disk_type: str = "ASYNC_FLUSH"
    """flushDiskType: "ASYNC_FLUSH" (put returns once the record is in the page cache) or "SYNC_FLUSH"
    (put returns PUT_OK once the record is on disk)."""
    flush_interval_commit_log: int = 500
    """flushIntervalCommitLog: ms between FlushRealTimeService rounds (ASYNC_FLUSH)."""
    flush_commit_log_least_pages: int = 4
    """flushCommitLogLeastPages: dirty 4 KiB pages needed before a round flushes."""
    flush_commit_log_thorough_interval: int = 1000 * 10
    """flushCommitLogThoroughInterval: ms after which a round flushes whatever is dirty."""
    flush_commit_log_timed: bool = True
    """flushCommitLogTimed: in RocketMQ, true makes the flush service sleep a fixed interval instead of
    waiting to be woken. rmqcore's flush service always runs on its interval; the field is kept for config files."""
    commit_interval_commit_log: int = 200
    """commitIntervalCommitLog: ms between CommitRealTimeService rounds, which copy write buffers into the
    file (transient_store_pool_enable only)."""
    commit_commit_log_least_pages: int = 4
    """commitCommitLogLeastPages: 4 KiB pages needed before a commit round copies."""
    commit_commit_log_thorough_interval: int = 200
    """commitCommitLogThoroughInterval: ms after which a commit round copies whatever there is."""
    flush_interval_consume_queue: int = 1000
    """flushIntervalConsumeQueue: ms between consume-queue (and index, checkpoint) flush rounds."""
    flush_consume_queue_least_pages: int = 2
    """flushConsumeQueueLeastPages: dirty pages needed before a consume-queue round flushes."""
    flush_consume_queue_thorough_interval: int = 1000 * 60
    """flushConsumeQueueThoroughInterval: ms after which a round flushes everything and the
    checkpoint."""
    sync_flush_timeout: int = 1000 * 5
    """syncFlushTimeout: ms a SYNC_FLUSH put waits for its flush before answering FLUSH_DISK_TIMEOUT (the
    record stays stored)."""
    # Write buffers: off by default and, as RocketMQ's isTransientStorePoolEnable, used with ASYNC_FLUSH only.
    transient_store_pool_enable: bool = False
    """transientStorePoolEnable: ASYNC_FLUSH appends go to preallocated memory buffers that
    CommitRealTimeService copies into the file every commit_interval_commit_log ms. As in RocketMQ, a put is
    acknowledged before that copy, so a SIGKILL can lose acknowledged messages not yet committed."""
    transient_store_pool_size: int = 5
    """transientStorePoolSize: write buffers in the pool, each one commitlog file in size."""
    # Pre-fault and allocate a whole new file at once (RocketMQ's warmMapedFileEnable, off by default as there;
    # under SYNC_FLUSH it also writes the file's zeros to disk, as RocketMQ's warm-up does).
    warm_mapped_file_enable: bool = False
    """warmMapedFileEnable: allocate and pre-fault each new file whole when it is made."""
    # The write runway (rmqcore's own; RocketMQ has none): files are sparse, and only this many bytes ahead of the
    # write position are allocated on disk and pre-faulted, kept ahead of the writer by the allocate thread, so a
    # full disk is still an error (never SIGBUS) and appends stay free of page faults, while a store costs what it
    # holds. 0 allocates each new file whole when it is made. Bytes.
    mapped_file_runway_commit_log: int = 32 * 1024 * 1024
    """rmqcore only: bytes of a commitlog file allocated and pre-faulted ahead of the write position."""
    mapped_file_runway_consume_queue: int = 1024 * 1024
    """rmqcore only: bytes of a consume-queue file allocated ahead of its write position."""
    index_file_runway: int = 4 * 1024 * 1024
    """rmqcore only: bytes of an index file allocated ahead of its use."""
    # Reads
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    """maxTransferBytesOnMessageInMemory: bytes of records one get_messages returns at most."""
    max_transfer_count_on_message_in_memory: int = 32
    """maxTransferCountOnMessageInMemory: messages one get_messages returns at most."""
    access_message_in_memory_max_ratio: int = 40
    """accessMessageInMemoryMaxRatio: a pull whose last record lies more than this percent of the machine's
    physical memory behind the commitlog's end reads from disk, not the page cache: its GetResult says
    suggest_pulling_from_slave (DefaultMessageStore.getMessage), which a master's remoting pull answer turns into
    suggestWhichBrokerId when slaveReadEnable is on."""
    offset_check_in_slave: bool = False
    """offsetCheckInSlave: a SLAVE's pull answer may move the consumer's offset (PULL_OFFSET_MOVED); off, as
    RocketMQ's default, it answers PULL_RETRY_IMMEDIATELY instead (the slave may only be behind its master)."""
    # Whole-record integrity
    enabled_append_prop_crc: bool = True
    """enabledAppendPropCRC (5.x, off there; on here): every record ends with a ``__CRC32#`` property holding the
    CRC32 of the record before it, so recovery and verify() catch damage anywhere in a record (the v1 body CRC
    covers the body only). 20 bytes per record; Java 4.9 readers see one more property."""
    # Recovery and cleaning
    check_crc_on_recover: bool = True
    """checkCRCOnRecover: check body CRCs (and 5.x __CRC32#) while recovery scans the commitlog."""
    file_reserved_time: int = 72
    """fileReservedTime: hours a commitlog file is kept after its last write before cleaning deletes it."""
    delete_when: str = "04"
    """deleteWhen: hour(s) of the day, "04" or "04;05", at which expired files are deleted."""
    disk_max_used_space_ratio: int = 75
    """diskMaxUsedSpaceRatio: percent of the disk in use past which expired files are deleted at once."""
    delete_commit_log_files_interval: int = 100
    """deleteCommitLogFilesInterval: ms between deleting two commitlog files in one run."""
    delete_file_batch_max: int = 10           # 5.x deleteFileBatchMax (4.x: DELETE_FILES_BATCH_MAX)
    """deleteFileBatchMax: commitlog files deleted per cleaning run at most."""
    delete_consume_queue_files_interval: int = 100
    """deleteConsumeQueueFilesInterval: ms between deleting two consume-queue files."""
    destroy_mapped_file_interval_forcibly: int = 1000 * 120
    """destroyMapedFileIntervalForcibly: ms after which a file still held by a reader is
    destroyed anyway."""
    clean_resource_interval: int = 10000
    """cleanResourceInterval: ms between CleanFilesService runs."""
    # Delay levels of the schedule topic, as RocketMQ's messageDelayLevel.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    """messageDelayLevel: the delays of levels 1, 2, ... of the schedule topic (units s, m, h, d)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Settings rmqcore does not interpret, kept with the config (e.g. other MessageStoreConfig fields)."""
    # Delayed delivery (rmqcore/schedule.py): ScheduleMessageService runs with the store, as DefaultMessageStore
    # starts it on a master; its progress goes to config/delayOffset.json every flushDelayOffsetInterval ms.
    schedule_message_service_enable: bool = True
    """Run ScheduleMessageService (delivery of delay-level messages) with the store, as a RocketMQ master does."""
    flush_delay_offset_interval: int = 1000 * 10
    """flushDelayOffsetInterval: ms between writes of config/delayOffset.json."""
    # Exact-time delivery (rmqcore/timer.py): 5.x's timerWheelEnable, timerMaxDelaySec, timerFlushIntervalMs.
    timer_wheel_enable: bool = True
    """timerWheelEnable (5.x): deliver messages at an exact time through the timer wheel."""
    timer_max_delay_sec: int = 3600 * 24 * 3
    """timerMaxDelaySec (5.x): the longest delay a timer message may ask for, in seconds (3 days)."""
    timer_flush_interval_ms: int = 1000
    """timerFlushIntervalMs (5.x): ms between flushes of the timer files."""

    # Master/slave replication (rmqcore/ha_service.py: RocketMQ 4.9.7's HAService, HAConnection, HAClient).
    broker_role: str = "ASYNC_MASTER"
    """brokerRole: "ASYNC_MASTER" (puts answer without waiting for a slave), "SYNC_MASTER" (a put answers once a
    slave's report covers it: FLUSH_SLAVE_TIMEOUT after sync_flush_timeout, SLAVE_NOT_AVAILABLE with no slave or
    one more than ha_slave_fallbehind_max behind) or "SLAVE" (puts refused with SERVICE_NOT_AVAILABLE; the
    commitlog grows only by what the master sends, MessageStore.append_to_commit_log)."""
    ha_listen_port: int = 10912
    """haListenPort: the master's HA port (RocketMQ's BrokerStartup sets it to listenPort + 1)."""
    ha_master_address: str = ""
    """haMasterAddress: HOST:PORT of the master's HA port a slave replicates from (RocketMQ learns it from its name
    server registration, or this setting)."""
    ha_send_heartbeat_interval: int = 1000 * 5
    """haSendHeartbeatInterval: ms between a slave's offset reports, and between a master's empty frames, when
    idle."""
    ha_housekeeping_interval: int = 1000 * 20
    """haHousekeepingInterval: ms of silence after which either side closes the HA connection."""
    ha_transfer_batch_size: int = 1024 * 32
    """haTransferBatchSize: the most commitlog bytes a master sends in one frame."""
    ha_slave_fallbehind_max: int = 1024 * 1024 * 256
    """haSlaveFallbehindMax: a SYNC_MASTER put answers SLAVE_NOT_AVAILABLE at once when the slave's acknowledged
    offset is this many bytes or more behind the master's (5.x: haMaxGapNotInSync)."""

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Check the fields (ValueError naming the field and the rule)."""
        if self.flush_disk_type not in FLUSH_TYPES:
            raise ValueError(f"flush_disk_type must be one of {FLUSH_TYPES}, got {self.flush_disk_type!r}")
        if self.broker_role not in BROKER_ROLES:
            raise ValueError(f"broker_role must be one of {BROKER_ROLES}, got {self.broker_role!r}")
        if not 0 <= self.ha_listen_port <= 65535:
            raise ValueError(f"ha_listen_port must be a TCP port (0..65535, 0: any free one), got "
                             f"{self.ha_listen_port}")
        for name in ("ha_send_heartbeat_interval", "ha_housekeeping_interval", "ha_transfer_batch_size",
                     "ha_slave_fallbehind_max"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.access_message_in_memory_max_ratio <= 100:
            raise ValueError("access_message_in_memory_max_ratio must be a percentage (0..100), got "
                             f"{self.access_message_in_memory_max_ratio}")
        for name in ("mapped_file_size_commit_log", "mapped_file_size_consume_queue", "max_message_size",
                     "max_hash_slot_num", "max_index_num"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.mapped_file_size_consume_queue % 20:
            raise ValueError("mapped_file_size_consume_queue must be a multiple of the 20-byte unit, got "
                             f"{self.mapped_file_size_consume_queue}")

    @property
    def sync_flush(self) -> bool:
        """True for SYNC_FLUSH."""
        return self.flush_disk_type == "SYNC_FLUSH"

    @property
    def is_slave(self) -> bool:
        """True for brokerRole SLAVE."""
        return self.broker_role == "SLAVE"

    def replace(self, **changes: Any) -> "StoreConfig":
        """A copy with ``changes`` applied, validated."""
        return dataclasses.replace(self, **changes)
