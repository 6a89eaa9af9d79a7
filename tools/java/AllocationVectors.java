// Prints the queue allocations of rocketmq-client's own AllocateMessageQueueStrategy classes as JSON,
// so that rocksidecar's Python strategies can be checked against Java's results on the same inputs.
//
// Build and run against the RocketMQ distribution (see tools/java_allocations.sh):
//   javac -cp "$DIST/lib/*" -d /tmp/alloc tools/java/AllocationVectors.java
//   java -cp "/tmp/alloc:$DIST/lib/*" AllocationVectors < cases.tsv
//
// Input: one case per line, tab-separated:
//   name  strategy  cid,cid,...  topic/broker/qid;...  option
// strategy is AVG, AVG_BY_CIRCLE, CONSISTENT_HASH (option: virtual node count), CONFIG (option: the
// configured queues, topic/broker/qid;...), MACHINE_ROOM (option: idc,idc,...), NEARBY_AVG or
// NEARBY_CIRCLE (machine room = text before the first '-' of a broker name or client id, as in
// rocketmq-client's own AllocateMachineRoomNearByTest), ENV (option: the 1-based environment index of
// the seed 002 article's custom strategy, mqAll.get(envIndex - 1)).
// As RebalanceImpl does before it calls a strategy, the queues and client ids are sorted first.
// Output: one JSON object per line: {"name": ..., "allocations": {cid: [[topic, broker, qid], ...]}}.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMachineRoomNearby;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByConfig;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByMachineRoom;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import org.apache.rocketmq.common.message.MessageQueue;

public class AllocationVectors {
    static final AllocateMachineRoomNearby.MachineRoomResolver PREFIX_ROOMS =
        new AllocateMachineRoomNearby.MachineRoomResolver() {
            @Override public String brokerDeployIn(MessageQueue mq) {
                return mq.getBrokerName().split("-")[0];
            }

            @Override public String consumerDeployIn(String clientId) {
                return clientId.split("-")[0];
            }
        };

    static List<MessageQueue> queues(String spec) {
        List<MessageQueue> out = new ArrayList<>();
        if (spec.isEmpty()) {
            return out;
        }
        for (String item : spec.split(";")) {
            String[] p = item.split("/");
            out.add(new MessageQueue(p[0], p[1], Integer.parseInt(p[2])));
        }
        return out;
    }

    static AllocateMessageQueueStrategy strategy(String name, String option) {
        switch (name) {
            case "AVG":
                return new AllocateMessageQueueAveragely();
            case "AVG_BY_CIRCLE":
                return new AllocateMessageQueueAveragelyByCircle();
            case "CONSISTENT_HASH":
                return new AllocateMessageQueueConsistentHash(Integer.parseInt(option));
            case "CONFIG": {
                AllocateMessageQueueByConfig s = new AllocateMessageQueueByConfig();
                s.setMessageQueueList(queues(option));
                return s;
            }
            case "MACHINE_ROOM": {
                AllocateMessageQueueByMachineRoom s = new AllocateMessageQueueByMachineRoom();
                s.setConsumeridcs(new HashSet<>(Arrays.asList(option.split(","))));
                return s;
            }
            case "NEARBY_AVG":
                return new AllocateMachineRoomNearby(new AllocateMessageQueueAveragely(), PREFIX_ROOMS);
            case "NEARBY_CIRCLE":
                return new AllocateMachineRoomNearby(new AllocateMessageQueueAveragelyByCircle(), PREFIX_ROOMS);
            case "ENV": {
                final int envIndex = Integer.parseInt(option);
                // The seed 002 article's environment isolation: environment N consumes queue N-1 only.
                return new AllocateMessageQueueStrategy() {
                    @Override public List<MessageQueue> allocate(String group, String cid,
                        List<MessageQueue> mqAll, List<String> cidAll) {
                        List<MessageQueue> list = new ArrayList<>();
                        list.add(mqAll.get(envIndex - 1));
                        return list;
                    }

                    @Override public String getName() {
                        return "env-based";
                    }
                };
            }
            default:
                throw new IllegalArgumentException("unknown strategy " + name);
        }
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            List<String> cidAll = new ArrayList<>(Arrays.asList(f[2].split(",")));
            List<MessageQueue> mqAll = queues(f[3]);
            Collections.sort(mqAll);
            Collections.sort(cidAll);
            AllocateMessageQueueStrategy s = strategy(f[1], f.length > 4 ? f[4] : "");
            StringBuilder out = new StringBuilder("{\"name\":").append(quote(f[0])).append(",\"allocations\":{");
            for (int i = 0; i < cidAll.size(); i++) {
                String cid = cidAll.get(i);
                List<MessageQueue> got = s.allocate("group", cid, mqAll, cidAll);
                out.append(i == 0 ? "" : ",").append(quote(cid)).append(":[");
                for (int j = 0; j < got.size(); j++) {
                    MessageQueue mq = got.get(j);
                    out.append(j == 0 ? "" : ",").append("[").append(quote(mq.getTopic())).append(",")
                        .append(quote(mq.getBrokerName())).append(",").append(mq.getQueueId()).append("]");
                }
                out.append("]");
            }
            System.out.println(out.append("}}"));
        }
    }
}
