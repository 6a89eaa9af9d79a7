// Rock-DMQ load with the RocketMQ 4.9.4 Java client (tools/dmq_java.py compiles and runs it).
//
//   DmqLoad produce NAMESRV INNER_TOPIC REAL_TOPIC COUNT FIRST_DUE_MS SPREAD_MS
//     sends COUNT delayed messages to the inner topic in the inner format (DMQ_REAL_TOPIC, DMQ_DELIVER_MS),
//     due evenly over [FIRST_DUE_MS, FIRST_DUE_MS + SPREAD_MS), each with its UNIQ_KEY as the sharding
//     key, from SENDERS threads; prints "sent UNIQ_KEY DUE_MS" per message.
//   DmqLoad levels NAMESRV TOPIC COUNT LEVEL
//     sends COUNT messages with RocketMQ's own delay level LEVEL (1 = 1 s) to TOPIC; prints
//     "sent UNIQ_KEY DUE_MS" (born time + the level's delay).
//   DmqLoad consume NAMESRV TOPIC GROUP EXPECTED TIMEOUT_S [LINGER_S]
//     consumes TOPIC from the first offset until EXPECTED distinct delayed ids arrived (or the timeout),
//     then LINGER_S seconds more (0 unless given: time for late duplicates to show); prints
//     "got UNIQ_KEY DUE_MS RECEIVED_MS STORE_MS" per delivery (duplicates included), then "done".
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.MessageQueueSelector;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.selector.SelectMessageQueueByHash;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class DmqLoad {
    static final long[] LEVEL_MS = {1000, 5000, 10000, 30000, 60000};

    public static void main(String[] args) throws Exception {
        try {
            run(args);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1); // the client's threads would keep a failed run alive
        }
    }

    static void run(String[] args) throws Exception {
        switch (args[0]) {
            case "produce": produce(args); break;
            case "levels": levels(args); break;
            case "consume": consume(args); break;
            default: throw new IllegalArgumentException(args[0]);
        }
    }

    static DefaultMQProducer producer(String namesrv) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("dmq_load_producer_" + System.nanoTime());
        p.setNamesrvAddr(namesrv);
        p.setSendMsgTimeout(10000);
        p.start();
        return p;
    }

    static final int SENDERS = 8; // sync sends in parallel: ~10 ms a send on a busy shared machine

    static void produce(String[] a) throws Exception {
        String namesrv = a[1], inner = a[2], real = a[3];
        int count = Integer.parseInt(a[4]);
        long first = Long.parseLong(a[5]), spread = Long.parseLong(a[6]);
        DefaultMQProducer p = producer(namesrv);
        // The UNIQ_KEY as the sharding key, with the client's own hash selector (the sidecar's
        // ByShardingKey is the same): a cancel sent the same way lands on the same inner queue.
        MessageQueueSelector byKey = new SelectMessageQueueByHash();
        // The route first, once: senders that all ask the name server at their first send queue on the
        // client's name-server lock, and one that waits 3 s for it fails with "No route info".
        for (int tries = 1; ; tries++) {
            try { p.fetchPublishMessageQueues(inner); break; }
            catch (MQClientException e) { if (tries == 20) throw e; Thread.sleep(500); }
        }
        ExecutorService pool = Executors.newFixedThreadPool(SENDERS);
        List<Future<?>> parts = new ArrayList<>();
        for (int t = 0; t < SENDERS; t++) {
            final int from = t;
            parts.add(pool.submit(() -> {
                StringBuilder out = new StringBuilder();
                for (int i = from; i < count; i += SENDERS) {
                    long due = first + spread * i / count;
                    Message m = new Message(inner, "dmq", ("body-" + i).getBytes(StandardCharsets.UTF_8));
                    m.putUserProperty("DMQ_REAL_TOPIC", real);
                    m.putUserProperty("DMQ_DELIVER_MS", Long.toString(due));
                    MessageClientIDSetter.setUniqID(m);
                    String id = MessageClientIDSetter.getUniqID(m);
                    p.send(m, byKey, id);
                    out.append("sent ").append(id).append(' ').append(due).append('\n');
                    if (out.length() > 1 << 14) { print(out); }
                }
                print(out);
                return null;
            }));
        }
        for (Future<?> f : parts) f.get(); // a failed send fails the run
        pool.shutdown();
        p.shutdown();
    }

    static void print(StringBuilder out) {
        synchronized (System.out) { System.out.print(out); System.out.flush(); }
        out.setLength(0);
    }

    static void levels(String[] a) throws Exception {
        String namesrv = a[1], topic = a[2];
        int count = Integer.parseInt(a[3]), level = Integer.parseInt(a[4]);
        DefaultMQProducer p = producer(namesrv);
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < count; i++) {
            Message m = new Message(topic, "level", ("level-" + i).getBytes(StandardCharsets.UTF_8));
            m.setDelayTimeLevel(level);
            long born = System.currentTimeMillis();
            SendResult r = p.send(m);
            out.append("sent ").append(r.getMsgId()).append(' ').append(born + LEVEL_MS[level - 1]).append('\n');
        }
        System.out.print(out);
        System.out.flush();
        p.shutdown();
    }

    static void consume(String[] a) throws Exception {
        String namesrv = a[1], topic = a[2], group = a[3];
        int expected = Integer.parseInt(a[4]);
        long timeoutS = Long.parseLong(a[5]);
        long lingerS = a.length > 6 ? Long.parseLong(a[6]) : 0;
        Set<String> seen = ConcurrentHashMap.newKeySet();
        CountDownLatch all = new CountDownLatch(1);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(namesrv);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            long now = System.currentTimeMillis();
            StringBuilder out = new StringBuilder();
            for (MessageExt m : msgs) {
                String due = m.getProperty("DELAY_DUE_AT");
                out.append("got ").append(m.getMsgId()).append(' ').append(due == null ? "-" : due).append(' ')
                   .append(now).append(' ').append(m.getStoreTimestamp()).append('\n');
                if (due != null) seen.add(m.getMsgId()); // not the test's warm-up message: it is no delayed one
            }
            synchronized (System.out) { System.out.print(out); System.out.flush(); }
            if (seen.size() >= expected) all.countDown();
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        System.out.println("started");
        System.out.flush();
        if (all.await(timeoutS, TimeUnit.SECONDS) && lingerS > 0) {
            Thread.sleep(lingerS * 1000);
        }
        System.out.println("done " + seen.size());
        System.out.flush();
        c.shutdown();
    }
}
