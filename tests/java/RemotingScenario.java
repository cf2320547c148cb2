// The real RocketMQ 4.9.7 Java client against rmqcore's remoting front (tests/test_remoting_java.py compiles and
// runs it). One scenario per run: java RemotingScenario NAMESRV SCENARIO TOPIC N
//   produce   N sends: a third sync, a third async, a third oneway (then one sync, so all have arrived), a batch
//             of 4; prints "SENT <count>" and each sync result's "MSGID <offsetMsgId> <queueId> <queueOffset>"
//   litepull  a DefaultLitePullConsumer assigned every queue from offset 0 reads N messages: "GOT <body>"
//   push      a DefaultMQPushConsumer (new group, CONSUME_FROM_FIRST_OFFSET) consumes N: "GOT <body>"
//   tags      sends N with tag A and N with tag B; a push consumer subscribed to "B" gets exactly the Bs
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
}
