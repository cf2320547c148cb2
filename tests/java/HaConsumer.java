// A RocketMQ 4.9.7 push consumer for the HA tests (tests/test_ha_cluster_java.py compiles and runs it):
//   java HaConsumer NAMESRV TOPIC GROUP WANT [SEEN_FILE]
// consumes (CONSUME_FROM_FIRST_OFFSET, one message at a time) until it has WANT distinct bodies, prints each it
// consumed (a few past WANT may come before the shutdown) as "GOT <body>" (bodies listed in SEEN_FILE, one a line, as "AGAIN <body>", not counted), shuts down (which commits its offsets to the broker) and prints "OK"; exit 1 after 90 s without.
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class HaConsumer {
    public static void main(String[] a) throws Exception {
        String ns = a[0], topic = a[1], group = a[2];
        int want = Integer.parseInt(a[3]);
        Set<String> seen = new HashSet<>();
        if (a.length > 4) seen.addAll(java.nio.file.Files.readAllLines(java.nio.file.Paths.get(a[4])));
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPullBatchSize(1);
        c.setConsumeMessageBatchMaxSize(1);
        c.setConsumeThreadMin(1);
        c.setConsumeThreadMax(1);
        c.subscribe(topic, "*");
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                String b = new String(m.getBody(), java.nio.charset.StandardCharsets.UTF_8);
                if (seen.contains(b)) System.out.println("AGAIN " + b);
                else if (got.add(b)) System.out.println("GOT " + b);
            }
            if (got.size() >= want) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        boolean ok = done.await(90, TimeUnit.SECONDS);
        c.shutdown();
        if (!ok) {
            System.out.println("consumed " + got.size() + " of " + want);
            System.exit(1);
        }
        System.out.println("OK");
        System.exit(0);
    }
}
