// The real RocketMQ 4.9.7 Java client signing with AclClientRPCHook against rmqcore's remoting front with --acl
// (tests/test_remoting_acl_java.py compiles and runs it). One scenario per run:
//   java AclScenario vector                       the hook's Signature of a fixed request: "SIG <base64>"
//   java AclScenario NAMESRV send AK SK TOPIC N   N sync sends: "SENT <n>", or "ERR <code> <broker's remark>"
//   java AclScenario NAMESRV push AK SK TOPIC GROUP N     a push consumer (from the first offset) takes N: "GOT <n>"
//   java AclScenario NAMESRV pull AK SK TOPIC GROUP       one pull of queue 0 from offset 0: "PULLED <status>", or
//                                                          "ERR <code> <broker's remark>"
// AK "-": no hook (the request is unsigned). Ends with "OK" and exit 0, or an exception and exit 1.
import java.util.*;
import java.util.concurrent.*;
import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.*;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.client.exception.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

public class AclScenario {
    public static void main(String[] a) throws Exception {
        try {
            if (a[0].equals("vector")) {
                vector();
            } else {
                String ns = a[0], scenario = a[1];
                RPCHook hook = a[2].equals("-") ? null : new AclClientRPCHook(new SessionCredentials(a[2], a[3]));
                switch (scenario) {
                    case "send": send(ns, hook, a[4], Integer.parseInt(a[5])); break;
                    case "push": push(ns, hook, a[4], a[5], Integer.parseInt(a[6])); break;
                    case "pull": pull(ns, hook, a[4], a[5]); break;
                    default: throw new IllegalArgumentException(scenario);
                }
            }
            System.out.println("OK");
            System.exit(0);
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            System.exit(1);
        }
    }

    // The fields tests/test_remoting_acl.py signs in Python: keys out of order, a non-ASCII value, a body.
    static void vector() throws Exception {
        RemotingCommand cmd = RemotingCommand.createRequestCommand(310, null);
        HashMap<String, String> ext = new HashMap<>();
        ext.put("b", "TopicTest");
        ext.put("a", "pg-\u00e9t\u00e9");
        ext.put("e", "3");
        ext.put("i", "KEYS\u0001k1\u0002TAGS\u0001tagA\u0002");
        ext.put("_UNIQUE_KEY_QUERY", "false");
        cmd.setExtFields(ext);
        cmd.setBody("hello, acl".getBytes("UTF-8"));
        new AclClientRPCHook(new SessionCredentials("RocketMQ", "12345678")).doBeforeRequest("127.0.0.1:10911", cmd);
        System.out.println("SIG " + cmd.getExtFields().get(SessionCredentials.SIGNATURE));
    }

    static void err(MQClientException e) {
        Throwable c = e.getCause();
        String remark = c instanceof MQBrokerException ? ((MQBrokerException) c).getErrorMessage() : e.getErrorMessage();
        System.out.println("ERR " + e.getResponseCode() + " " + remark);
    }

    static void send(String ns, RPCHook hook, String topic, int n) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("pg" + System.nanoTime(), hook);
        p.setNamesrvAddr(ns);
        p.setSendMsgTimeout(10000);
        p.start();
        int sent = 0;
        try {
            for (int i = 0; i < n; i++) {
                SendResult r = p.send(new Message(topic, "T", ("acl-" + i).getBytes("UTF-8")));
                if (r.getSendStatus() != SendStatus.SEND_OK) throw new IllegalStateException("status " + r);
                sent++;
            }
            System.out.println("SENT " + sent);
        } catch (MQClientException e) {
            err(e);
        } catch (MQBrokerException e) {
            System.out.println("ERR " + e.getResponseCode() + " " + e.getErrorMessage());
        } finally {
            p.shutdown();
        }
    }

    static void push(String ns, RPCHook hook, String topic, String group, int n) throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group, hook, new AllocateMessageQueueAveragely());
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        Set<String> got = ConcurrentHashMap.newKeySet();
        CountDownLatch done = new CountDownLatch(1);
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) got.add(new String(m.getBody()));
            if (got.size() >= n) done.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        done.await(60, TimeUnit.SECONDS);
        c.shutdown();
        System.out.println("GOT " + got.size());
    }

    @SuppressWarnings("deprecation")
    static void pull(String ns, RPCHook hook, String topic, String group) throws Exception {
        DefaultMQPullConsumer c = new DefaultMQPullConsumer(group, hook);
        c.setNamesrvAddr(ns);
        c.start();
        try {
            MessageQueue mq = null;
            for (MessageQueue q : c.fetchSubscribeMessageQueues(topic)) if (q.getQueueId() == 0) mq = q;
            PullResult r = c.pull(mq, "*", 0, 32);
            System.out.println("PULLED " + r.getPullStatus());
        } catch (MQBrokerException e) {
            System.out.println("ERR " + e.getResponseCode() + " " + e.getErrorMessage());
        } catch (MQClientException e) {
            err(e);
        } finally {
            c.shutdown();
        }
    }
}
