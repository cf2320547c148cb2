// The real RocketMQ 4.9.7 Java client in a cluster of a Java broker and an rmqcore broker (tests/test_cluster_java.py
// compiles and runs it). One scenario per run: java ClusterScenario NAMESRV SCENARIO TOPIC N [GROUP]
//   produce   a fresh producer (its route straight from the name server) sends N messages synchronously; prints
//             "SENT <msgId> <brokerName>" for each (the broker its queue belongs to)
//   push      a DefaultMQPushConsumer of GROUP (CONSUME_FROM_FIRST_OFFSET) consumes until it holds N distinct
//             message ids, prints "GOT <msgId> <brokerName>" for each, and shuts down (its offsets committed to
//             each broker)
// Ends with "OK" and exit 0, or an exception and exit 1.
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class ClusterScenario {
    public static void main(String[] a) throws Exception {
        String ns = a[0], scenario = a[1], topic = a[2];
        int n = Integer.parseInt(a[3]);
        try {
            if (scenario.equals("produce")) {
                produce(ns, topic, n);
            } else if (scenario.equals("push")) {
                push(ns, topic, n, a[4]);
            } else {
                throw new IllegalArgumentException(scenario);
            }
            System.out.println("OK");
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    static void produce(String ns, String topic, int n) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("pg" + System.nanoTime());
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.start();
        for (int i = 0; i < n; i++) {
            Message m = new Message(topic, "t", "k" + i, ("body-" + i).getBytes("UTF-8"));
            SendResult r = p.send(m);
            if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("status " + r);
            System.out.println("SENT " + r.getMsgId() + " " + r.getMessageQueue().getBrokerName());
        }
        p.shutdown();
    }

    static void push(String ns, String topic, int n, String group) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        Map<String, String> got = new ConcurrentHashMap<>();
        CountDownLatch done = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                got.put(m.getMsgId(), ctx.getMessageQueue().getBrokerName());
            }
            if (got.size() >= n) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        done.await(90, TimeUnit.SECONDS);
        Thread.sleep(1000);               // the last batches' offsets are in the consumer's table before shutdown
        c.shutdown();                     // persists every queue's offset to its broker
        for (Map.Entry<String, String> e : got.entrySet()) System.out.println("GOT " + e.getKey() + " " + e.getValue());
        if (got.size() < n) throw new IllegalStateException("push got " + got.size() + " of " + n);
    }
}
