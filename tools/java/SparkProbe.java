// The Java side of the Spark read source's tests on real RocketMQ 4.9.4 (tests/realbroker/test_spark_source.py).
//   produce NAMESRV TOPIC N   N messages from a DefaultMQProducer, in batches of 50: body body(i) (binary,
//       1-600 bytes), tag "t<i % 5>", keys "k<i> x", properties i=<i> and p=<i % 3>; prints
//       "SENT <i> <msgId>" per message.
//   dump NAMESRV TOPIC   every message of every queue of TOPIC (its min to its max offset, a pull consumer);
//       prints "MSG <rocksidecarId property or -> <sha-256 of the body, hex> <broker>:<queueId>:<offset>"
//       per message, then "END <n>".
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public class SparkProbe {
  // Also written in tests/realbroker/test_spark_source.py: the Python side recomputes each body.
  static byte[] body(int i) {
    int n = 1 + (i * 7919) % 600;
    byte[] b = new byte[n];
    for (int j = 0; j < n; j++) b[j] = (byte) ((i * 131 + j * 17 + (j >> 3)) & 0xff);
    return b;
  }

  public static void main(String[] args) throws Exception {
    String namesrv = args[1], topic = args[2];
    if (args[0].equals("produce")) {
      DefaultMQProducer p = new DefaultMQProducer("spark6_probe_producer");
      p.setNamesrvAddr(namesrv);
      p.start();
      int n = Integer.parseInt(args[3]);
      StringBuilder out = new StringBuilder();
      for (int at = 0; at < n; at += 50) {
        List<Message> batch = new ArrayList<>();
        for (int i = at; i < Math.min(n, at + 50); i++) {
          Message m = new Message(topic, "t" + (i % 5), "k" + i + " x", body(i));
          m.putUserProperty("i", Integer.toString(i));
          m.putUserProperty("p", Integer.toString(i % 3));
          batch.add(m);
        }
        p.send(batch);
        for (int k = 0; k < batch.size(); k++) {
          out.append("SENT ").append(at + k).append(' ').append(MessageClientIDSetter.getUniqID(batch.get(k))).append('\n');
        }
      }
      System.out.print(out);
      System.out.flush();
      p.shutdown();
      return;
    }
    DefaultMQPullConsumer c = new DefaultMQPullConsumer("spark6_probe_dump_" + System.nanoTime());
    c.setNamesrvAddr(namesrv);
    c.start();
    MessageDigest sha = MessageDigest.getInstance("SHA-256");
    long count = 0;
    StringBuilder out = new StringBuilder();
    for (MessageQueue mq : c.fetchSubscribeMessageQueues(topic)) {
      long offset = c.minOffset(mq), max = c.maxOffset(mq);
      while (offset < max) {
        PullResult r = c.pull(mq, "*", offset, 32);
        if (r.getPullStatus() != PullStatus.FOUND) break;
        for (MessageExt m : r.getMsgFoundList()) {
          String id = m.getUserProperty("rocksidecarId");
          String digest = HexFormat.of().formatHex(sha.digest(m.getBody()));
          out.append("MSG ").append(id == null ? "-" : id).append(' ').append(digest);
          out.append(' ').append(mq.getBrokerName()).append(':').append(mq.getQueueId()).append(':');
          out.append(m.getQueueOffset()).append('\n');
          count++;
        }
        offset = r.getNextBeginOffset();
      }
    }
    System.out.print(out);
    System.out.println("END " + count);
    System.out.flush();
    c.shutdown();
  }
}
