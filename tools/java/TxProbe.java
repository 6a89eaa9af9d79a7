// The Java side of rocksidecar's transaction comparison on real RocketMQ 4.9.4
// (tests/realbroker/test_transactions_java.py): a TransactionMQProducer doing what the test does through the sidecar.
//   NAMESRV TOPIC GROUP N   send N transactional messages; message i's local transaction answers COMMIT_MESSAGE
//       (i % 3 == 0), ROLLBACK_MESSAGE (1) or UNKNOW (2); a check-back of an UNKNOW one answers UNKNOW the first
//       time and COMMIT_MESSAGE after. Prints "SENT <uniqKey> <i>" per message, "CHECK <uniqKey> <answer>" per
//       check-back and "READY" once all N were sent; runs (answering check-backs) until stdin closes.
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TxProbe {
  static void say(String line) {
    synchronized (System.out) {
      System.out.println(line);
      System.out.flush();
    }
  }

  public static void main(String[] args) throws Exception {
    String topic = args[1];
    int n = Integer.parseInt(args[3]);
    ConcurrentHashMap<String, AtomicInteger> checks = new ConcurrentHashMap<>();
    TransactionMQProducer p = new TransactionMQProducer(args[2]);
    p.setNamesrvAddr(args[0]);
    p.setTransactionListener(
        new TransactionListener() {
          public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            int i = (Integer) arg;
            if (i % 3 == 0) return LocalTransactionState.COMMIT_MESSAGE;
            if (i % 3 == 1) return LocalTransactionState.ROLLBACK_MESSAGE;
            return LocalTransactionState.UNKNOW;
          }

          public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            String key = msg.getProperty("UNIQ_KEY");
            int asked = checks.computeIfAbsent(key, k -> new AtomicInteger()).incrementAndGet();
            LocalTransactionState answer =
                asked == 1 ? LocalTransactionState.UNKNOW : LocalTransactionState.COMMIT_MESSAGE;
            say("CHECK " + key + " " + answer);
            return answer;
          }
        });
    p.start();
    for (int i = 0; i < n; i++) {
      Message m = new Message(topic, "java", ("java-tx-" + i).getBytes("UTF-8"));
      TransactionSendResult r = p.sendMessageInTransaction(m, i);
      say("SENT " + r.getMsgId() + " " + i);
    }
    say("READY");
    while (System.in.read() != -1) {}
    p.shutdown();
  }
}
