// The real RocketMQ 4.9.7 Java client against rmqcore's remoting front (tests/test_remoting_java.py compiles and
// runs it). One scenario per run: java RemotingScenario NAMESRV SCENARIO TOPIC N
//   produce   N sends: a third sync, a third async, a third oneway (then one sync, so all have arrived), a batch
//             of 4; prints "SENT <count>" and each sync result's "MSGID <offsetMsgId> <queueId> <queueOffset>"
//   litepull  a DefaultLitePullConsumer assigned every queue from offset 0 reads N messages: "GOT <body>"
//   push      a DefaultMQPushConsumer (new group, CONSUME_FROM_FIRST_OFFSET) consumes N: "GOT <body>"
//   tags      sends N with tag A and N with tag B; a push consumer subscribed to "B" gets exactly the Bs
//   live      a push consumer starts on an empty topic, then N are sent: each arrives (long polls woken)
//   retry     a push consumer fails each message once (delay level 1): every message comes again, reconsumed once
//   orderly   N sends keyed to queues by i % 4 (a selector), an orderly push consumer gets each queue in order
//   delay     N sends at delay level 1 (1 s): each arrives, not before its level's time
// Ends with "OK" and exit 0, or an exception and exit 1.
import java.util.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class RemotingScenario {
    static String ns, topic;

    public static void main(String[] a) throws Exception {
        ns = a[0];
        String scenario = a[1];
        topic = a[2];
        int n = Integer.parseInt(a[3]);
        try {
            switch (scenario) {
                case "produce": produce(n); break;
                case "litepull": litePull(n); break;
                case "push": push(n, "*", "p" + System.nanoTime()); break;
                case "tags": tags(n); break;
                case "live": live(n); break;
                case "retry": retry(n); break;
                case "orderly": orderly(n); break;
                case "delay": delay(n); break;
                default: throw new IllegalArgumentException(scenario);
            }
            System.out.println("OK");
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    static DefaultMQProducer producer() throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("pg" + System.nanoTime());
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.start();
        return p;
    }

    static void produce(int n) throws Exception {
        DefaultMQProducer p = producer();
        int sent = 0;
        CountDownLatch async = new CountDownLatch(n / 3);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "T" + (i % 3), "k" + i, ("body-" + i).getBytes("UTF-8"));
            if (i < n / 3) {
                p.send(m, new SendCallback() {
                    public void onSuccess(SendResult r) { async.countDown(); }
                    public void onException(Throwable e) { failed.set(e); async.countDown(); }
                });
            } else if (i < 2 * n / 3) {
                p.sendOneway(m);
            } else {
                SendResult r = p.send(m);
                if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("status " + r);
                System.out.println("MSGID " + r.getOffsetMsgId() + " " + r.getMessageQueue().getQueueId() + " "
                                   + r.getQueueOffset());
            }
            sent++;
        }
        if (!async.await(30, TimeUnit.SECONDS)) throw new IllegalStateException("async sends unanswered");
        if (failed.get() != null) throw new IllegalStateException("an async send failed", failed.get());
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 4; i++) batch.add(new Message(topic, "TB", ("batch-" + i).getBytes("UTF-8")));
        SendResult br = p.send(batch);
        if (br.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("batch " + br);
        sent += 4;
        System.out.println("SENT " + sent);
        p.shutdown();
    }

    static void litePull(int n) throws Exception {
        DefaultLitePullConsumer c = new DefaultLitePullConsumer("lp" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setAutoCommit(false);
        c.start();
        Collection<MessageQueue> mqs = c.fetchMessageQueues(topic);
        c.assign(mqs);
        for (MessageQueue mq : mqs) c.seek(mq, 0);
        Set<String> got = new HashSet<>();
        long deadline = System.currentTimeMillis() + 60000;
        while (got.size() < n && System.currentTimeMillis() < deadline) {
            for (MessageExt m : c.poll(1000)) {
                String b = new String(m.getBody(), "UTF-8");
                if (got.add(b)) System.out.println("GOT " + b);
            }
        }
        c.shutdown();
        if (got.size() < n) throw new IllegalStateException("lite pull got " + got.size() + " of " + n);
    }

    static Set<String> consume(int n, String expr, String group) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, expr);
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                try {
                    String b = new String(m.getBody(), "UTF-8") + (expr.equals("*") ? "" : " " + m.getTags());
                    if (got.add(b)) System.out.println("GOT " + b);
                } catch (Exception e) { throw new RuntimeException(e); }
            }
            if (got.size() >= n) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        done.await(60, TimeUnit.SECONDS);
        c.shutdown();
        return got;
    }

    static void push(int n, String expr, String group) throws Exception {
        Set<String> got = consume(n, expr, group);
        if (got.size() < n) throw new IllegalStateException("push got " + got.size() + " of " + n);
    }

    static void tags(int n) throws Exception {
        DefaultMQProducer p = producer();
        for (int i = 0; i < n; i++) {
            p.send(new Message(topic, "A", ("a-" + i).getBytes("UTF-8")));
            p.send(new Message(topic, "B", ("b-" + i).getBytes("UTF-8")));
        }
        p.shutdown();
        Set<String> got = consume(n, "B", "t" + System.nanoTime());
        for (String s : got) if (!s.endsWith(" B")) throw new IllegalStateException("tag filter let through " + s);
        if (got.size() != n) throw new IllegalStateException("tags got " + got.size() + " of " + n);
    }

    static void live(int n) throws Exception {
        DefaultMQProducer p = producer();
        p.send(new Message(topic, "x", "first".getBytes("UTF-8")));     // the topic and its route exist
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("live" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(n);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String b = new String(m.getBody());
                if (b.startsWith("live-") && got.add(b)) done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Thread.sleep(3000);          // its rebalance has taken the queues and parked its pulls
        for (int i = 0; i < n; i++) p.send(new Message(topic, "x", ("live-" + i).getBytes("UTF-8")));
        boolean ok = done.await(60, TimeUnit.SECONDS);
        c.shutdown();
        p.shutdown();
        if (!ok) throw new IllegalStateException("live got " + got.size() + " of " + n);
        System.out.println("GOT " + got.size());
    }

    static void retry(int n) throws Exception {
        DefaultMQProducer p = producer();
        for (int i = 0; i < n; i++) p.send(new Message(topic, "r", ("retry-" + i).getBytes("UTF-8")));
        p.shutdown();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("retry" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(n);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            ctx.setDelayLevelWhenNextConsume(1);
            for (MessageExt m : msgs) {
                String b = new String(m.getBody());
                int times = seen.merge(b, 1, Integer::sum);
                if (times == 1) return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                if (times == 2 && m.getReconsumeTimes() == 1) done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.setConsumeMessageBatchMaxSize(1);
        c.start();
        boolean ok = done.await(90, TimeUnit.SECONDS);
        c.shutdown();
        if (!ok) throw new IllegalStateException("retry: " + seen);
        System.out.println("GOT " + seen.size());
    }

    static void orderly(int n) throws Exception {
        DefaultMQProducer p = producer();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "o", ("" + i).getBytes("UTF-8"));
            SendResult r = p.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), i % 4);
            if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("" + r);
        }
        p.shutdown();
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("ord" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        Map<Integer, List<Integer>> perQueue = new ConcurrentHashMap<>();
        AtomicInteger count = new AtomicInteger();
        CountDownLatch done = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                perQueue.computeIfAbsent(m.getQueueId(), q -> Collections.synchronizedList(new ArrayList<>()))
                        .add(Integer.parseInt(new String(m.getBody())));
                if (count.incrementAndGet() >= n) done.countDown();
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        c.start();
        boolean ok = done.await(60, TimeUnit.SECONDS);
        c.shutdown();
        if (!ok) throw new IllegalStateException("orderly got " + count.get() + " of " + n);
        for (List<Integer> l : perQueue.values())
            for (int i = 1; i < l.size(); i++)
                if (l.get(i) < l.get(i - 1)) throw new IllegalStateException("out of order: " + l);
        System.out.println("QUEUES " + perQueue.keySet());
    }

    static void delay(int n) throws Exception {
        DefaultMQProducer p = producer();
        Map<String, Long> sentAt = new ConcurrentHashMap<>();
        p.send(new Message(topic, "x", "first".getBytes("UTF-8")));
        DefaultMQPushConsumer c = new DefaultMQPushConsumer("delay" + System.nanoTime());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        CountDownLatch done = new CountDownLatch(n);
        AtomicReference<String> early = new AtomicReference<>();
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String b = new String(m.getBody());
                Long t = sentAt.get(b);
                if (t == null) continue;
                if (System.currentTimeMillis() - t < 900) early.set(b);
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Thread.sleep(3000);
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "d", ("delay-" + i).getBytes("UTF-8"));
            m.setDelayTimeLevel(1);
            sentAt.put("delay-" + i, System.currentTimeMillis());
            p.send(m);
        }
        boolean ok = done.await(60, TimeUnit.SECONDS);
        c.shutdown();
        p.shutdown();
        if (!ok) throw new IllegalStateException("delay: " + done.getCount() + " of " + n + " missing");
        if (early.get() != null) throw new IllegalStateException("delivered before its delay: " + early.get());
    }
}
