// The Java side of rocksidecar's consume tests on real RocketMQ 4.9.4 (tests/realbroker/test_subscriptions.py).
//   produce NAMESRV TOPIC N   send N messages (binary bodies), print "SENT <msgId> <bodyHex>" per message
//   consume NAMESRV TOPIC GROUP   a DefaultMQPushConsumer (clustering, AVG); print "ALLOC q1,q2,..." every
//       250 ms (q = broker:queueId, its queues of TOPIC now) and "MSG <msgId> <broker:queueId>" per message;
//       runs until stdin closes.
//   traced NAMESRV TOPIC GROUP TRACE_TOPIC   as consume, with the client's message trace on
//       (enableMsgTrace: SubBefore/SubAfter records to TRACE_TOPIC, sent by its dispatcher shortly after).
//   rate NAMESRV TOPIC GROUP N   a DefaultMQPushConsumer (defaults, no-op listener) from the first offset;
//       prints "RATE <msg/s>" once N messages were consumed (clock from start()), then exits.
import java.util.HexFormat;
import java.util.List;
import java.util.TreeSet;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class ConsumeProbe {
  // A push consumer of GROUP on TOPIC from the first offset; the caller registers its listener.
  static DefaultMQPushConsumer consumer(String namesrv, String group, String topic) throws Exception {
    return consumer(namesrv, group, topic, null);
  }

  // traceTopic null: no message trace; else Java's enableMsgTrace writing to that topic.
  static DefaultMQPushConsumer consumer(String namesrv, String group, String topic, String traceTopic)
      throws Exception {
    DefaultMQPushConsumer c =
        traceTopic == null
            ? new DefaultMQPushConsumer(group)
            : new DefaultMQPushConsumer(group, true, traceTopic);
    c.setNamesrvAddr(namesrv);
    c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
    c.subscribe(topic, "*");
    return c;
  }

  public static void main(String[] args) throws Exception {
    if (args[0].equals("produce")) {
      DefaultMQProducer p = new DefaultMQProducer("rs_probe_producer");
      p.setNamesrvAddr(args[1]);
      p.start();
      int n = Integer.parseInt(args[3]);
      for (int i = 0; i < n; i++) {
        byte[] body = new byte[64 + i];
        for (int j = 0; j < body.length; j++) body[j] = (byte) ((i * 31 + j * 7) & 0xff);
        Message m = new Message(args[2], "java", body);
        SendResult r = p.send(m);
        System.out.println("SENT " + r.getMsgId() + " " + HexFormat.of().formatHex(body));
      }
      System.out.flush();
      p.shutdown();
      return;
    }
    String topic = args[2];
    if (args[0].equals("rate")) {
      long n = Long.parseLong(args[4]);
      java.util.concurrent.atomic.AtomicLong count = new java.util.concurrent.atomic.AtomicLong();
      java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(1);
      DefaultMQPushConsumer r = consumer(args[1], args[3], topic);
      r.registerMessageListener(
          (MessageListenerConcurrently)
              (msgs, ctx) -> {
                if (count.addAndGet(msgs.size()) >= n) done.countDown();
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
              });
      long t0 = System.nanoTime();
      r.start();
      done.await();
      double s = (System.nanoTime() - t0) / 1e9;
      System.out.println("RATE " + (count.get() / s));
      System.out.flush();
      r.shutdown();
      return;
    }
    DefaultMQPushConsumer c = consumer(args[1], args[3], topic, args[0].equals("traced") ? args[4] : null);
    c.registerMessageListener(
        (MessageListenerConcurrently)
            (List<MessageExt> msgs, org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext ctx) -> {
              for (MessageExt m : msgs) {
                synchronized (System.out) {
                  System.out.println("MSG " + m.getMsgId() + " " + m.getBrokerName() + ":" + m.getQueueId());
                  System.out.flush();
                }
              }
              return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
    c.start();
    Thread watcher =
        new Thread(
            () -> {
              while (true) {
                TreeSet<String> qs = new TreeSet<>();
                for (MessageQueue mq :
                    c.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
                  if (mq.getTopic().equals(topic)) qs.add(mq.getBrokerName() + ":" + mq.getQueueId());
                }
                synchronized (System.out) {  // every tick: the test checks both sides at one moment
                  System.out.println("ALLOC " + String.join(",", qs));
                  System.out.flush();
                }
                try {
                  Thread.sleep(250);
                } catch (InterruptedException e) {
                  return;
                }
              }
            });
    watcher.setDaemon(true);
    watcher.start();
    while (System.in.read() != -1) {}
    c.shutdown();
  }
}
