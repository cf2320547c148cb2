// A RocketMQ 4.9.7 producer for the HA tests (tests/test_ha_cluster_java.py compiles and runs it):
//   java HaProducer NAMESRV TOPIC N SIZE [PREFIX]
// N sync sends of SIZE-byte bodies (with PREFIX: bodies "PREFIX-<i>"), no retry on another broker; prints
// "STATUS <SendStatus>" for each, then "OK".
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.message.Message;

public class HaProducer {
    public static void main(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("hap" + System.nanoTime());
        p.setNamesrvAddr(a[0]);
        p.setSendMsgTimeout(30000);
        p.setRetryTimesWhenSendFailed(0);
        p.start();
        byte[] body = new byte[Integer.parseInt(a[3])];
        java.util.Arrays.fill(body, (byte) 'h');
        try {
            for (int i = 0; i < Integer.parseInt(a[2]); i++) {
                byte[] b = a.length > 4 ? (a[4] + "-" + i).getBytes("UTF-8") : body;
                SendResult r = p.send(new Message(a[1], b));
                System.out.println("STATUS " + r.getSendStatus());
            }
        } catch (Exception e) {             // the client's threads would keep the JVM up: exit, saying why
            System.out.println("FAILED " + e);
            e.printStackTrace(System.out);
            System.exit(1);
        }
        p.shutdown();
        System.out.println("OK");
        System.exit(0);
    }
}
