// RocketMQ 4.9.7 clients for the remoting kill soak (tests/test_remoting_crash.py compiles and runs them):
//   java SoakClient NAMESRV produce TOPIC PREFIX THREADS
//     THREADS threads of sync sends (no retry), message i of thread t: key "PREFIX-t-i", body "PREFIX-t-i." padded
//     to 200 bytes; prints "ACK <msgId> <key> <body>" for each send answered SEND_OK, until killed or a send
//     fails (then that thread stops: the server went away).
//   java SoakClient NAMESRV consume TOPIC GROUP [HEARTBEAT_MS]
//     a clustering push consumer (CONSUME_FROM_FIRST_OFFSET, offsets committed to the broker every second and in
//     each pull; a heartbeat every HEARTBEAT_MS, default the client's 30 s) that prints
//     "GOT <queueId> <queueOffset> <body>" for every delivery, until killed.
import java.nio.charset.StandardCharsets;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class SoakClient {
    static String pad(String s) {
        StringBuilder b = new StringBuilder(s).append('.');
        while (b.length() < 200) b.append('x');
        return b.toString();
    }

    public static void main(String[] a) throws Exception {
        String ns = a[0], mode = a[1], topic = a[2];
        if (mode.equals("produce")) {
            DefaultMQProducer p = new DefaultMQProducer("soak-pg-java");
            p.setNamesrvAddr(ns);
            p.setSendMsgTimeout(5000);
            p.setRetryTimesWhenSendFailed(0);
            p.start();
            int threads = Integer.parseInt(a[4]);
            Thread[] ts = new Thread[threads];
            for (int t = 0; t < threads; t++) {
                final int tt = t;
                ts[t] = new Thread(() -> {
                    for (int i = 0; ; i++) {
                        String key = a[3] + "-" + tt + "-" + i;
                        String body = pad(key);
                        Message m = new Message(topic, "soak", key, body.getBytes(StandardCharsets.UTF_8));
                        try {
                            SendResult r = p.send(m);
                            if (r.getSendStatus() == SendStatus.SEND_OK)
                                System.out.println("ACK " + r.getMsgId() + " " + key + " " + body);
                        } catch (Exception e) {
                            System.out.println("FAILED " + e.getClass().getSimpleName());
                            return;
                        }
                    }
                });
                ts[t].start();
            }
            for (Thread t : ts) t.join();
            System.exit(0);
        }
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[3]);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(1000);
        if (a.length > 4) c.setHeartbeatBrokerInterval(Integer.parseInt(a[4]));
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs)
                System.out.println("GOT " + m.getQueueId() + " " + m.getQueueOffset() + " "
                                   + new String(m.getBody(), StandardCharsets.UTF_8));
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        Thread.sleep(Long.MAX_VALUE);
    }
}
