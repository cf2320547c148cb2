// More of the real RocketMQ 4.9.7 Java client against rmqcore's remoting front (tests/test_remoting_java_clients.py
// compiles and runs it): transactions answered through the broker's check, broadcasting, retry to the DLQ, orderly
// suspension, SQL92 selectors, lite pull seek by time, query by key and by id.
// One scenario per run: java ClientScenario NAMESRV SCENARIO TOPIC N [ARGS...]
//   transaction  a TransactionMQProducer sends N "commit-i", N "rollback-i", N "unknown-i", its local transaction
//                answering UNKNOW each time; its checkLocalTransaction answers COMMIT, ROLLBACK, UNKNOW by prefix. A
//                consumer gets exactly the commits; "CHECKS <body> <times>" per message once ARGS[0] (the broker's
//                transactionCheckMax) checks of every unknown one have come and the run waited ARGS[1] ms more
//   broadcast    two BROADCASTING push consumers (instances b1, b2) of group ARGS[0] each get all N sent in this
//                run ("b<run>-i", run = ARGS[1]), and nothing sent before it: "GOT <instance> <body>"
//   dlq          a push consumer (maxReconsumeTimes 2, delay level 1) fails N messages every time: each comes
//                3 times, then queryMessage on %DLQ%group by its key finds it: "DLQ <key> <reconsumeTimes>"
//   orderlydlq   the same with an orderly consumer answering SUSPEND_CURRENT_QUEUE_A_MOMENT every time
//   orderlysuspend  N keyed to queues by i % 4; two orderly consumers of one group answer
//                SUSPEND_CURRENT_QUEUE_A_MOMENT the first time they see each message: every message comes again,
//                each queue's successes in order, and no queue is consumed by two instances at once
//   sql          N sends with property a=i; a push consumer with MessageSelector.bySql("a >= 3 AND a < 7") gets
//                exactly those (consumed 4 of N in the default case): "GOT <a>"
//   badsql       a push consumer subscribing with an unparsable SQL92 selector must fail to start
//   nosql        a push consumer subscribing with a valid SQL92 selector must fail to start (a broker whose
//                enablePropertyFilter is off): prints "REFUSED <the client's message, on one line>"
//   seek         N/2 "early-i", then (after the store time moved on) N/2 "late-i"; a lite pull consumer seeks each
//                queue to offsetForTimestamp(time between them): "OFFSET <queue> <broker's answer> <early ones sent
//                to that queue>", then reads from there: "GOT <body>" at or past the seek offset, "STALE <body>"
//                below it (4.9.7's seek races with the pull its assign started from offset 0: that pull's records
//                can still be delivered after the seek, a client race the Java broker sees too)
//   query        N sends with keys "qk-i": queryMessage by key finds each, viewMessage(offsetMsgId) and
//                viewMessage(topic, msgId) return its body
// Ends with "OK" and exit 0, or an exception and exit 1.
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.QueryResult;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;

public class ClientScenario {
    static String ns, topic;

    public static void main(String[] a) throws Exception {
        ns = a[0];
        String scenario = a[1];
        topic = a[2];
        int n = Integer.parseInt(a[3]);
        String[] args = Arrays.copyOfRange(a, 4, a.length);
        try {
            switch (scenario) {
                case "transaction": transaction(n, Integer.parseInt(args[0]), Long.parseLong(args[1])); break;
                case "broadcast": broadcast(n, args[0], args[1]); break;
                case "dlq": dlq(n, false); break;
                case "orderlydlq": dlq(n, true); break;
                case "orderlysuspend": orderlySuspend(n); break;
                case "sql": sql(n); break;
                case "badsql": badSql("a >"); break;
                case "nosql": badSql("a between 3 and 6"); break;
                case "seek": seek(n); break;
                case "query": query(n); break;
                default: throw new IllegalArgumentException(scenario);
            }
            System.out.println("OK");
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) throw new IllegalStateException(what);
    }

    static String body(Message m) {
        return new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8);
    }

    static DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("pg" + System.nanoTime());
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.start();
        return p;
    }

    static DefaultMQPushConsumer pushConsumer(String group) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return c;
    }

    // -- transactions -----------------------------------------------------------------------------------------

    static void transaction(int n, int checkMax, long linger) throws Exception {
        Map<String, AtomicInteger> checks = new ConcurrentHashMap<>();
        Map<String, String> idOf = new ConcurrentHashMap<>();
        AtomicReference<String> wrong = new AtomicReference<>();
        TransactionMQProducer p = new TransactionMQProducer("tx" + System.nanoTime());
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.setTransactionListener(new TransactionListener() {
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                return LocalTransactionState.UNKNOW;
            }

            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String b = body(msg);
                checks.computeIfAbsent(b, k -> new AtomicInteger()).incrementAndGet();
                // the check carries the half as the producer sent it: its real topic, its transaction id
                if (!topic.equals(msg.getTopic()) || !msg.getTransactionId().equals(idOf.get(b)))
                    wrong.set(b + " checked as topic " + msg.getTopic() + " id " + msg.getTransactionId());
                if (b.startsWith("commit-")) return LocalTransactionState.COMMIT_MESSAGE;
                if (b.startsWith("rollback-")) return LocalTransactionState.ROLLBACK_MESSAGE;
                return LocalTransactionState.UNKNOW;
            }
        });
        p.start();
        for (String kind : new String[] {"commit", "rollback", "unknown"}) {
            for (int i = 0; i < n; i++) {
                Message m = new Message(topic, "tx", (kind + "-" + i).getBytes("UTF-8"));
                TransactionSendResult r = p.sendMessageInTransaction(m, null);
                check(r.getSendStatus() == SendStatus.SEND_OK, "half " + r);
                check(r.getLocalTransactionState() == LocalTransactionState.UNKNOW, "local state " + r);
                idOf.put(kind + "-" + i, r.getMsgId());    // its UNIQ_KEY: what a check names as transaction id
            }
        }
        Set<String> got = ConcurrentHashMap.newKeySet();
        DefaultMQPushConsumer c = pushConsumer("txc" + System.nanoTime());
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(body(m));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.currentTimeMillis() + 120000;
        while (System.currentTimeMillis() < deadline) {
            boolean done = got.size() >= n;
            for (int i = 0; i < n; i++) {
                AtomicInteger u = checks.get("unknown-" + i);
                done &= u != null && u.get() >= checkMax;
            }
            if (done) break;
            Thread.sleep(200);
        }
        Thread.sleep(linger);      // more passes: an unknown half past its last check is discarded, not asked again
        c.shutdown();
        p.shutdown();
        check(wrong.get() == null, wrong.get() == null ? "" : wrong.get());
        for (String b : new TreeSet<>(checks.keySet())) System.out.println("CHECKS " + b + " " + checks.get(b).get());
        for (String b : new TreeSet<>(got)) System.out.println("GOT " + b);
    }

    // -- broadcasting -----------------------------------------------------------------------------------------

    static void broadcast(int n, String group, String run) throws Exception {
        Map<String, Set<String>> got = new ConcurrentHashMap<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        CountDownLatch done = new CountDownLatch(2);
        String prefix = "b" + run + "-";
        DefaultMQProducer p = producer();
        // the topic exists before the consumers look for its route (else they find it at their next route poll,
        // 30 s later)
        p.createTopic("TBW102", topic, 4);
        for (String inst : new String[] {"b1", "b2"}) {
            DefaultMQPushConsumer c = pushConsumer(group);
            c.setInstanceName(inst);
            c.setMessageModel(MessageModel.BROADCASTING);
            c.subscribe(topic, "*");
            Set<String> mine = ConcurrentHashMap.newKeySet();
            got.put(inst, mine);
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    String b = body(m);
                    System.out.println("GOT " + inst + " " + b);
                    if (mine.add(b) && b.startsWith(prefix) && mine.stream().filter(x -> x.startsWith(prefix))
                            .count() == n) done.countDown();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
        }
        Thread.sleep(2000);     // both have taken every queue
        for (int i = 0; i < n; i++) p.send(new Message(topic, "x", (prefix + i).getBytes("UTF-8")));
        p.shutdown();
        boolean ok = done.await(60, TimeUnit.SECONDS);
        Thread.sleep(1000);     // anything old that would come again has come
        for (DefaultMQPushConsumer c : cs) c.shutdown();      // persists the offsets in the local files
        check(ok, "broadcast: " + got);
    }

    // -- retry to the DLQ -------------------------------------------------------------------------------------

    static void dlq(int n, boolean orderly) throws Exception {
        DefaultMQProducer p = producer();
        long begin = System.currentTimeMillis() - 60000;
        for (int i = 0; i < n; i++) p.send(new Message(topic, "d", "dk-" + i, ("dlq-" + i).getBytes("UTF-8")));
        String group = "dlq" + System.nanoTime();
        DefaultMQPushConsumer c = pushConsumer(group);
        c.subscribe(topic, "*");
        c.setMaxReconsumeTimes(2);
        c.setConsumeMessageBatchMaxSize(1);
        Map<String, List<Integer>> seen = new ConcurrentHashMap<>();
        if (orderly) {
            // suspended in the client (its reconsume times counted there); past them it sends the message to
            // %RETRY%group itself, with maxReconsumeTimes in the send's header: the broker diverts it to the DLQ
            c.setSuspendCurrentQueueTimeMillis(100);
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs)
                    seen.computeIfAbsent(body(m), k -> Collections.synchronizedList(new ArrayList<>()))
                        .add(m.getReconsumeTimes());
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
            });
        } else {
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                ctx.setDelayLevelWhenNextConsume(1);
                for (MessageExt m : msgs)
                    seen.computeIfAbsent(body(m), k -> Collections.synchronizedList(new ArrayList<>()))
                        .add(m.getReconsumeTimes());
                return ConsumeConcurrentlyStatus.RECONSUME_LATER;
            });
        }
        c.start();
        String dlq = MixAllTopics.dlq(group);
        Map<String, MessageExt> dead = new HashMap<>();
        long deadline = System.currentTimeMillis() + 90000;
        while (dead.size() < n && System.currentTimeMillis() < deadline) {
            Thread.sleep(1000);
            for (int i = 0; i < n; i++) {
                if (dead.containsKey("dk-" + i)) continue;
                try {
                    QueryResult q = p.queryMessage(dlq, "dk-" + i, 32, begin, System.currentTimeMillis() + 60000);
                    for (MessageExt m : q.getMessageList()) dead.put("dk-" + i, m);
                } catch (MQClientException e) {
                    // not there yet (the topic or the key)
                }
            }
        }
        Thread.sleep(2000);     // nothing comes a fourth time
        c.shutdown();
        p.shutdown();
        check(dead.size() == n, "in the DLQ: " + dead.keySet() + ", deliveries " + seen);
        for (int i = 0; i < n; i++) {
            List<Integer> times = seen.get("dlq-" + i);
            check(times != null && times.equals(Arrays.asList(0, 1, 2)), "dlq-" + i + " delivered " + times);
            MessageExt m = dead.get("dk-" + i);
            check(body(m).equals("dlq-" + i) && dlq.equals(m.getTopic()), "DLQ holds " + m);
            System.out.println("DLQ dk-" + i + " " + m.getReconsumeTimes() + " "
                               + m.getProperty(MessageConst.PROPERTY_RETRY_TOPIC));
        }
    }

    static class MixAllTopics {
        static String dlq(String group) { return "%DLQ%" + group; }
    }

    // -- orderly, suspended --------------------------------------------------------------------------------------

    static void orderlySuspend(int n) throws Exception {
        DefaultMQProducer p = producer();
        for (int i = 0; i < n; i++) {
            SendResult r = p.send(new Message(topic, "o", ("" + i).getBytes("UTF-8")),
                                  (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), i % 4);
            check(r.getSendStatus() == SendStatus.SEND_OK, "" + r);
        }
        p.shutdown();
        String group = "ords" + System.nanoTime();
        Map<Integer, List<Integer>> perQueue = new ConcurrentHashMap<>();
        Map<Integer, AtomicInteger> busy = new ConcurrentHashMap<>();
        Set<Integer> suspended = ConcurrentHashMap.newKeySet();
        Set<Integer> done = ConcurrentHashMap.newKeySet();
        AtomicReference<String> wrong = new AtomicReference<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (String inst : new String[] {"o1", "o2"}) {
            DefaultMQPushConsumer c = pushConsumer(group);
            c.setInstanceName(inst);
            c.subscribe(topic, "*");
            c.setSuspendCurrentQueueTimeMillis(100);
            c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                int q = ctx.getMessageQueue().getQueueId();
                if (busy.computeIfAbsent(q, k -> new AtomicInteger()).incrementAndGet() != 1)
                    wrong.set("queue " + q + " consumed by two instances at once");
                try {
                    for (MessageExt m : msgs) {
                        int v = Integer.parseInt(body(m));
                        if (suspended.add(v)) return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                    for (MessageExt m : msgs) {
                        int v = Integer.parseInt(body(m));
                        perQueue.computeIfAbsent(q, k -> Collections.synchronizedList(new ArrayList<>())).add(v);
                        done.add(v);
                    }
                    return ConsumeOrderlyStatus.SUCCESS;
                } finally {
                    busy.get(q).decrementAndGet();
                }
            });
            c.start();
            cs.add(c);
        }
        long deadline = System.currentTimeMillis() + 90000;
        while (done.size() < n && System.currentTimeMillis() < deadline) Thread.sleep(200);
        for (DefaultMQPushConsumer c : cs) c.shutdown();
        check(wrong.get() == null, String.valueOf(wrong.get()));
        check(done.size() == n, "orderly suspend consumed " + done.size() + " of " + n);
        for (Map.Entry<Integer, List<Integer>> e : perQueue.entrySet()) {
            List<Integer> l = e.getValue();
            // a queue that moved between the instances may come again from its committed offset: never backwards
            // past what was consumed before it, and each message at least once, in order of first success
            List<Integer> firsts = new ArrayList<>(new LinkedHashSet<>(l));
            for (int i = 1; i < firsts.size(); i++)
                check(firsts.get(i) > firsts.get(i - 1), "queue " + e.getKey() + " out of order: " + l);
        }
        System.out.println("QUEUES " + new TreeSet<>(perQueue.keySet()));
    }

    // -- SQL92 ------------------------------------------------------------------------------------------------

    static void sql(int n) throws Exception {
        DefaultMQProducer p = producer();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "s", ("sql-" + i).getBytes("UTF-8"));
            m.putUserProperty("a", "" + i);
            p.send(m);
        }
        p.shutdown();
        DefaultMQPushConsumer c = pushConsumer("sql" + System.nanoTime());
        c.subscribe(topic, MessageSelector.bySql("a >= 3 AND a < 7"));
        Set<String> got = ConcurrentHashMap.newKeySet();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(m.getUserProperty("a"));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        long deadline = System.currentTimeMillis() + 60000;
        while (got.size() < 4 && System.currentTimeMillis() < deadline) Thread.sleep(200);
        Thread.sleep(2000);     // what else would come has come
        c.shutdown();
        for (String a : new TreeSet<>(got)) System.out.println("GOT " + a);
    }

    static void badSql(String expression) throws Exception {
        DefaultMQProducer p = producer();
        p.send(new Message(topic, "s", "x".getBytes("UTF-8")));     // the client checks the selector with a broker
        p.shutdown();                                               // of the topic's route: it must have one
        DefaultMQPushConsumer c = pushConsumer("badsql" + System.nanoTime());
        c.subscribe(topic, MessageSelector.bySql(expression));
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        try {
            c.start();
        } catch (MQClientException e) {
            System.out.println("REFUSED " + e.getMessage().replace('\n', ' '));
            return;
        } finally {
            c.shutdown();
        }
        throw new IllegalStateException("a consumer with the SQL92 selector " + expression + " started");
    }

    // -- lite pull seek by time -------------------------------------------------------------------------------

    static void seek(int n) throws Exception {
        DefaultMQProducer p = producer();
        Map<Integer, Integer> early = new HashMap<>();
        for (int i = 0; i < n / 2; i++)
            early.merge(p.send(new Message(topic, "e", ("early-" + i).getBytes("UTF-8"))).getMessageQueue().getQueueId(), 1, Integer::sum);
        // the offset of a time is the message stored nearest to it (ConsumeQueue.getOffsetInQueueByTime): a time
        // just before the late ones, long after the early ones
        Thread.sleep(3000);
        long between = System.currentTimeMillis();
        Thread.sleep(200);
        for (int i = 0; i < n - n / 2; i++) p.send(new Message(topic, "l", ("late-" + i).getBytes("UTF-8")));
        p.shutdown();
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("seek" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setAutoCommit(false);
        c.start();
        Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
        c.assign(mqs);
        Map<Integer, Long> sought = new HashMap<>();
        for (MessageQueue mq : mqs) {
            Long off = c.offsetForTimestamp(mq, between);
            System.out.println("OFFSET " + mq.getQueueId() + " " + off + " " + early.getOrDefault(mq.getQueueId(), 0));
            sought.put(mq.getQueueId(), off);
            c.seek(mq, off);
        }
        Set<String> got = new HashSet<>(), stale = new HashSet<>();
        long deadline = System.currentTimeMillis() + 30000;
        while (got.size() < n - n / 2 && System.currentTimeMillis() < deadline)
            for (MessageExt m : c.poll(1000)) (m.getQueueOffset() >= sought.get(m.getQueueId()) ? got : stale).add(body(m));
        for (MessageExt m : c.poll(1000)) (m.getQueueOffset() >= sought.get(m.getQueueId()) ? got : stale).add(body(m));
        c.shutdown();
        for (String b : new TreeSet<>(got)) System.out.println("GOT " + b);
        for (String b : new TreeSet<>(stale)) System.out.println("STALE " + b);
    }

    // -- query by key and id ----------------------------------------------------------------------------------

    static void query(int n) throws Exception {
        DefaultMQProducer p = producer();
        long begin = System.currentTimeMillis() - 60000;
        List<SendResult> sent = new ArrayList<>();
        for (int i = 0; i < n; i++) sent.add(p.send(new Message(topic, "q", "qk-" + i, ("query-" + i).getBytes("UTF-8"))));
        long end = System.currentTimeMillis() + 60000;
        for (int i = 0; i < n; i++) {
            QueryResult q = p.queryMessage(topic, "qk-" + i, 32, begin, end);
            check(q.getMessageList().size() == 1, "by key qk-" + i + ": " + q.getMessageList());
            MessageExt byKey = q.getMessageList().get(0);
            check(body(byKey).equals("query-" + i) && byKey.getKeys().equals("qk-" + i), "by key: " + byKey);
            SendResult r = sent.get(i);
            MessageExt byOffsetId = p.viewMessage(r.getOffsetMsgId());
            check(body(byOffsetId).equals("query-" + i), "by offset id " + r.getOffsetMsgId() + ": " + byOffsetId);
            check(byOffsetId.getQueueOffset() == r.getQueueOffset(), "queue offset " + byOffsetId);
            MessageExt byMsgId = p.viewMessage(topic, r.getMsgId());
            check(body(byMsgId).equals("query-" + i) && byMsgId.getMsgId().equals(r.getMsgId()),
                  "by message id " + r.getMsgId() + ": " + byMsgId);
            System.out.println("FOUND qk-" + i);
        }
        QueryResult none = null;
        try {
            none = p.queryMessage(topic, "no-such-key", 32, begin, end);
        } catch (MQClientException e) {
            System.out.println("NOKEY " + e.getResponseCode());
        }
        check(none == null || none.getMessageList().isEmpty(), "a key never sent found " + none);
        p.shutdown();
    }
}
