# cython: language_level=3, boundscheck=False, wraparound=False
"""The remoting front's common pull answered in one compiled call (issue 37's consume aims): PULL_MESSAGE (11) or
LITE_PULL_MESSAGE (361) whose fields are plain decimals, from an existing group allowed to consume, of a readable
queue of an existing topic, subscribed to every tag (``*``, sent with the pull or registered by the consumer's
heartbeat), that finds messages, on a master that suggests no slave. The store's get (MessageStore._get, the pull
loop every get runs) is called as the Python path calls it, the offset the pull carries committed as
PullMessageProcessor commits it, and the answer written as RemotingConnection._answer_pull writes it: its header
from encode_header, the records as views of the mapped files.

Holds none of PullMessageProcessor's rules, only the test of whether a request may skip the Python around them:
``PullMessage.pull`` returns False, having changed nothing, for anything else (a field missing or not a plain
decimal, a group or topic that does not exist or may not be read, a tag or SQL92 subscription, a pull that finds
nothing and may wait, a commit past the queue's end), and RemotingConnection._pull takes the request whole, so its
answer is the one it always gave. Differentially tested against that path (tests/test_remoting_pull_fast.py: equal
answers, equal offsets committed).
"""
cimport cython

from rmqcore.remoting._remoting_codec cimport RemotingCommand, decimal_field, dict_get

from rmqcore._message import record_views as _record_views
from rmqcore.broker.topic_validator import PERM_READ as _PERM_READ
from rmqcore.remoting.remoting_command import ONEWAY_FLAG as _ONEWAY, RESPONSE_FLAG as _RESPONSE
from rmqcore.remoting._remoting_codec import encode_header as _encode_header
from rmqcore.status import GetStatus

cdef int PULL_MESSAGE = 11
cdef int LITE_PULL_MESSAGE = 361
cdef int SUCCESS = 0
cdef int ONEWAY_FLAG = _ONEWAY
cdef int RESPONSE_FLAG = _RESPONSE
cdef int PERM_READ = _PERM_READ
# PullSysFlag
cdef int FLAG_COMMIT_OFFSET = 0x1
cdef int FLAG_SUBSCRIPTION = 0x4
cdef object FOUND = GetStatus.FOUND
cdef str FOUND_NAME = GetStatus.FOUND.name
cdef object encode_header = _encode_header
cdef object record_views = _record_views
cdef long long INT_MIN = -(1 << 31)
cdef long long INT_MAX = (1 << 31) - 1
cdef long long LONG_MAX = 999999999999999999       # what decimal_field reads: 18 digits
# group names validate_group accepted, kept so a pull does not run its regex; bounded (a client may name many)
cdef Py_ssize_t VALID_GROUPS_MAX = 4096


@cython.final
cdef class PullMessage:
    """One RemotingServer's common pull (see the module's docstring). ``server``: the RemotingServer (its
    consumers' subscriptions, its pending dispatch pass); ``broker``: the Broker whose tables, store and offsets the
    Python path reads; ``validate_group``: topic_validator.validate_group; ``on_messages_out``: ServerEvents'."""
    cdef object server
    cdef object broker_config
    cdef dict consumers
    cdef dict topics
    cdef dict groups
    cdef object store
    cdef object get
    cdef object commit
    cdef object validate_group
    cdef object on_messages_out
    cdef dict valid_groups

    def __init__(self, server, broker, validate_group, on_messages_out):
        self.server = server
        self.broker_config = broker.config
        self.consumers = server.consumers
        self.topics = broker.topic_config_manager.topic_config_table
        self.groups = broker.subscription_group_manager.subscription_group_table
        self.store = broker.store
        self.get = broker.store._get
        self.commit = broker.consumer_offset_manager.commit_offset
        self.validate_group = validate_group
        self.on_messages_out = on_messages_out
        self.valid_groups = {}

    cdef bint _subscribes_all(self, conn, str group, str topic, int sys_flag, dict ext) except -1:
        """Whether the pull's subscription is every tag, as RemotingConnection._pull reads it."""
        cdef object etype, expression
        if sys_flag & FLAG_SUBSCRIPTION:
            etype, expression = dict_get(ext, "expressionType"), dict_get(ext, "subscription")
            etype = etype or "TAG"
            expression = expression or "*"
        else:
            # the push consumer sends no subscription: the one its heartbeat registered (this connection's first)
            etype, expression = "TAG", "*"
            members = dict_get(self.consumers, group)
            if members is not None:
                subs = (<dict>members).get(conn)
                if not (subs and topic in subs):
                    subs = None
                    for s in (<dict>members).values():
                        if s and topic in s:
                            subs = s
                            break
                if subs is not None:
                    etype, expression = subs[topic][0], subs[topic][1]
        return etype == "TAG" and type(expression) is str and (<str>expression).strip() in ("", "*")

    def pull(self, conn, cmd):
        """Answer ``cmd`` (on ``conn``, a RemotingConnection) if it is the common pull: True; else False, nothing
        changed."""
        if type(cmd) is not RemotingCommand:
            return False            # a command the codec did not read (the reference's, a test's): the Python path
        cdef RemotingCommand c = <RemotingCommand>cmd
        if c.code != PULL_MESSAGE and c.code != LITE_PULL_MESSAGE:
            return False
        cdef dict ext = c.ext_fields
        group, topic = dict_get(ext, "consumerGroup"), dict_get(ext, "topic")
        if type(group) is not str or type(topic) is not str:
            return False
        cdef long long queue_id, offset, max_nums, sys_flag, commit_offset, suspend, sub_version
        if not (decimal_field(dict_get(ext, "queueId"), INT_MIN, INT_MAX, &queue_id)
                and decimal_field(dict_get(ext, "queueOffset"), 0, LONG_MAX, &offset)
                and decimal_field(dict_get(ext, "maxMsgNums"), INT_MIN, INT_MAX, &max_nums)
                and decimal_field(dict_get(ext, "sysFlag"), INT_MIN, INT_MAX, &sys_flag)
                and decimal_field(dict_get(ext, "commitOffset"), -LONG_MAX, LONG_MAX, &commit_offset)
                and decimal_field(dict_get(ext, "suspendTimeoutMillis"), -LONG_MAX, LONG_MAX, &suspend)
                and decimal_field(dict_get(ext, "subVersion"), -LONG_MAX, LONG_MAX, &sub_version)):
            return False
        if not self._subscribes_all(conn, <str>group, <str>topic, <int>sys_flag, ext):
            return False
        # Broker.pull's checks: the broker's and the group's permission, the topic's existence, queue and perm
        if not (self.broker_config.broker_permission & PERM_READ):
            return False
        if group not in self.valid_groups:
            try:
                self.validate_group(group)
            except Exception:
                return False
            if len(self.valid_groups) >= VALID_GROUPS_MAX:
                self.valid_groups.clear()
            self.valid_groups[group] = True
        gc = dict_get(self.groups, <str>group)
        if gc is None or not gc.consume_enable:
            return False            # a group to create (auto_create_subscription_group) or refuse: the Python path
        tc = dict_get(self.topics, <str>topic)
        if tc is None or not (0 <= queue_id < tc.read_queue_nums) or not (tc.perm & PERM_READ):
            return False
        store = self.store
        if store._closed or not store._running:
            return False
        server = self.server
        if server._dispatch_pending:
            server.dispatch_now()   # the sends answered before this pull are seen by it
        cdef long long count = max_nums if max_nums > 1 else 1
        if count > 32 * 1024:
            count = 32 * 1024
        r = self.get(topic, <int>queue_id, offset, <int>count, None)
        if r.status is not FOUND:
            return False            # nothing to send now (retry, offset moved, a wait): the Python path answers
        messages = r.messages
        if not messages:
            return False
        cdef long long max_offset = r.max_offset
        cdef bint commit = sys_flag & FLAG_COMMIT_OFFSET and commit_offset >= 0
        if commit and commit_offset > max_offset:
            return False            # past the queue's end: the Python path dispatches what is written and retries
        if commit:
            # PullMessageProcessor: the offset the pull carries, once its checks passed (Broker.commit_offset's, met)
            self.commit(group, topic, <int>queue_id, commit_offset)
        size = r.buffer_total_size
        records = record_views(messages)
        if not (c.flag & ONEWAY_FLAG) and not conn._closed:
            header = encode_header(c.serialize_type, SUCCESS, c.opaque, RESPONSE_FLAG, FOUND_NAME, {
                "suggestWhichBrokerId": "0", "nextBeginOffset": str(r.next_begin_offset),
                "minOffset": str(r.min_offset), "maxOffset": str(max_offset)}, size)
            batch = conn._batch
            if batch is None:
                conn._write_buffers([header] + records)
            else:                   # RemotingConnection.reply's common case: the answers of one read, gathered
                (<list>batch).append(header)
                (<list>batch).extend(records)
                conn._batch_bytes += size
        self.on_messages_out(topic, group, len(records), size)
        return True
