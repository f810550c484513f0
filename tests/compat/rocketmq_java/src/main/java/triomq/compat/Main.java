package triomq.compat;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultLitePullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * RocketMQ's own client and mqadmin, one sub-command per scenario, each printing JSON lines.
 *
 * <pre>
 * send           --namesrv A --topic T --group G --count N --modes sync,async,oneway,batch,ordered
 *                [--body-bytes B] [--stay true: the producer stays started until stdin closes]
 * push           --namesrv A --topic T --group G --mode concurrent|orderly [--expression E]
 *                [--fail-once true: RECONSUME_LATER for a message seen the first time]
 * lite-subscribe --namesrv A --topic T --group G --count N [--expression E]
 * lite-assign    --namesrv A --topic T --group G --count N
 * failover       --namesrv A --topic T --group G
 * transaction    --namesrv A --topic T --group G --count N
 * mqadmin        (a command a line on stdin, its arguments separated by tabs)
 * mqadmin-stream (one such command, for those that run until stopped, as clusterRT does:
 *                each line it prints as it prints it)
 * </pre>
 * The consumers, failover, a staying send and mqadmin-stream run until their stdin
 * closes; then they shut down (storing their offsets) and exit 0.
 */
public final class Main {
    /** Standard output as the JVM started: mqadmin's own printing is captured apart. */
    static final PrintStream OUT = System.out;
    private static final long WAIT_MS = 120_000;

    private Main() {
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            args.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        switch (argv.length == 0 ? "" : argv[0]) {
            case "send": send(args); break;
            case "push": push(args); break;
            case "lite-subscribe": liteSubscribe(args); break;
            case "lite-assign": liteAssign(args); break;
            case "failover": failover(args); break;
            case "transaction": transaction(args); break;
            case "mqadmin": mqadmin(); break;
            case "mqadmin-stream": mqadminStream(); break;
            default:
                System.err.println("usage: send|push|lite-subscribe|lite-assign|failover|"
                        + "transaction|mqadmin|mqadmin-stream");
                System.exit(2);
        }
        exiting = true;
        System.exit(0);  // the client's threads are not all daemons
    }

    private static DefaultMQProducer producer(Map<String, String> args) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(args.get("group"));
        producer.setNamesrvAddr(args.get("namesrv"));
        producer.setPollNameServerInterval(Integer.parseInt(args.getOrDefault("poll-ms", "1000")));
        producer.setSendMsgTimeout(Integer.parseInt(args.getOrDefault("send-timeout-ms", "5000")));
        producer.start();
        return producer;
    }

    /** Bodies are padded to this many bytes (send's --body-bytes): over 4 KiB, the client
     *  compresses them. */
    private static int bodyBytes = 0;

    private static Message message(String topic, String mode, int i) {
        StringBuilder body = new StringBuilder(mode + " " + i);
        if (body.length() < bodyBytes) {
            body.append(' ');
        }
        while (body.length() < bodyBytes) {
            body.append((char) ('a' + body.length() % 26));
        }
        Message message = new Message(topic, "Tag" + "ABC".charAt(i % 3), "key-" + mode + "-" + i,
                body.toString().getBytes(StandardCharsets.UTF_8));
        message.putUserProperty("scenario", mode);
        message.putUserProperty("seq", Integer.toString(i));
        return message;
    }

    private static Map<String, Object> result(String mode, int i, SendResult result) {
        MessageQueue queue = result.getMessageQueue();
        return Json.of("mode", mode, "i", i, "sendStatus", result.getSendStatus().name(),
                "msgId", result.getMsgId(), "offsetMsgId", result.getOffsetMsgId(),
                "brokerName", queue.getBrokerName(), "queueId", queue.getQueueId(),
                "queueOffset", result.getQueueOffset(), "storeHost", storeHost(result.getOffsetMsgId()));
    }

    /** Where the broker that stored a message listens, as its offset message id says. */
    private static String storeHost(String offsetMsgId) {
        try {
            InetSocketAddress address = (InetSocketAddress) MessageDecoder.decodeMessageId(
                    offsetMsgId.split(",")[0]).getAddress();
            return address.getAddress().getHostAddress() + ":" + address.getPort();
        } catch (Exception e) {
            return "undecodable: " + e;
        }
    }

    /**
     * TransactionMQProducer: message i commits (i % 3 == 0), rolls back (1) or is left
     * unknown (2) by its local transaction; the broker's check of an unknown one commits it.
     * Prints each send's result, then each check, and exits once every unknown one was
     * checked.
     */
    private static void transaction(Map<String, String> args) throws Exception {
        String topic = args.get("topic");
        int count = Integer.parseInt(args.get("count"));
        CountDownLatch checked = new CountDownLatch(count / 3);
        TransactionMQProducer producer = new TransactionMQProducer(args.get("group"));
        producer.setNamesrvAddr(args.get("namesrv"));
        producer.setPollNameServerInterval(1000);
        producer.setHeartbeatBrokerInterval(1000);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message message, Object arg) {
                switch ((Integer) arg % 3) {
                    case 0: return LocalTransactionState.COMMIT_MESSAGE;
                    case 1: return LocalTransactionState.ROLLBACK_MESSAGE;
                    default: return LocalTransactionState.UNKNOW;
                }
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt message) {
                Json.print(Json.of("checked", message.getProperty("seq"), "msgId",
                        message.getMsgId(), "topic", message.getTopic(),
                        "checkTimes", message.getProperty("TRANSACTION_CHECK_TIMES")));
                checked.countDown();
                return LocalTransactionState.COMMIT_MESSAGE;
            }
        });
        producer.start();
        for (int i = 0; i < count; i++) {
            TransactionSendResult sent = producer.sendMessageInTransaction(
                    message(topic, "transaction", i), i);
            Map<String, Object> printed = result("transaction", i, sent);
            printed.put("state", sent.getLocalTransactionState().name());
            printed.put("transactionId", sent.getTransactionId());
            Json.print(printed);
        }
        if (!checked.await(WAIT_MS, TimeUnit.MILLISECONDS)) {
            throw new IllegalStateException("unknown transactions never checked");
        }
        producer.shutdown();
    }

    private static void send(Map<String, String> args) throws Exception {
        String topic = args.get("topic");
        int count = Integer.parseInt(args.get("count"));
        bodyBytes = Integer.parseInt(args.getOrDefault("body-bytes", "0"));
        DefaultMQProducer producer = producer(args);
        for (String mode : args.get("modes").split(",")) {
            switch (mode) {
                case "sync":
                    for (int i = 0; i < count; i++) {
                        Json.print(result(mode, i, producer.send(message(topic, mode, i))));
                    }
                    break;
                case "async":
                    CountDownLatch answered = new CountDownLatch(count);
                    for (int i = 0; i < count; i++) {
                        final int n = i;
                        producer.send(message(topic, mode, i), new SendCallback() {
                            @Override
                            public void onSuccess(SendResult sendResult) {
                                Json.print(result(mode, n, sendResult));
                                answered.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                Json.print(Json.of("mode", mode, "i", n, "error", e.toString()));
                                answered.countDown();
                            }
                        });
                    }
                    if (!answered.await(WAIT_MS, TimeUnit.MILLISECONDS)) {
                        throw new IllegalStateException("async sends unanswered");
                    }
                    break;
                case "oneway":
                    for (int i = 0; i < count; i++) {
                        producer.sendOneway(message(topic, mode, i));
                        Json.print(Json.of("mode", mode, "i", i));
                    }
                    break;
                case "batch":
                    List<Message> batch = new ArrayList<>();
                    for (int i = 0; i < count; i++) {
                        batch.add(message(topic, mode, i));
                    }
                    SendResult sent = producer.send(batch);
                    Map<String, Object> printed = result(mode, 0, sent);
                    printed.put("msgIds", Arrays.asList(sent.getMsgId().split(",")));
                    printed.put("offsetMsgIds", Arrays.asList(sent.getOffsetMsgId().split(",")));
                    Json.print(printed);
                    break;
                case "ordered":
                    for (int i = 0; i < count; i++) {
                        int orderKey = i % 2;
                        Message message = message(topic, mode, i);
                        message.putUserProperty("orderKey", Integer.toString(orderKey));
                        SendResult r = producer.send(message,
                                (queues, msg, arg) -> queues.get((Integer) arg % queues.size()),
                                orderKey);
                        Map<String, Object> line = result(mode, i, r);
                        line.put("orderKey", orderKey);
                        Json.print(line);
                    }
                    break;
                case "timer":
                    // RocketMQ 5's Message.setDeliverTimeMs, looked up: this source builds
                    // against the 4.x client too, which has no timer messages.
                    long delayMs = Long.parseLong(args.getOrDefault("delay-ms", "1500"));
                    for (int i = 0; i < count; i++) {
                        Message message = message(topic, mode, i);
                        long at = System.currentTimeMillis() + delayMs;
                        Message.class.getMethod("setDeliverTimeMs", long.class)
                                .invoke(message, at);
                        Map<String, Object> line = result(mode, i, producer.send(message));
                        line.put("deliverTimeMs", at);
                        Json.print(line);
                    }
                    break;
                default:
                    throw new IllegalArgumentException("no send mode " + mode);
            }
        }
        boolean stay = "true".equals(args.get("stay"));
        if (stay) {
            Json.print(Json.of("sent", true));
            untilStdinCloses();
        }
        producer.shutdown();
        if (stay) {
            Json.print(Json.of("stopped", true));
        }
    }

    static Map<String, Object> consumed(MessageExt m) {
        Map<String, Object> properties = new TreeMap<>();
        for (String key : new String[] {"scenario", "seq", "orderKey"}) {
            if (m.getUserProperty(key) != null) {
                properties.put(key, m.getUserProperty(key));
            }
        }
        return Json.of("msgId", m.getMsgId(), "offsetMsgId", m instanceof MessageClientExt
                        ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId(),
                "topic", m.getTopic(), "queueId", m.getQueueId(), "queueOffset", m.getQueueOffset(),
                "body", new String(m.getBody(), StandardCharsets.UTF_8), "tags", m.getTags(),
                "keys", m.getKeys(), "properties", properties,
                "bornTimestamp", m.getBornTimestamp(), "storeTimestamp", m.getStoreTimestamp(),
                "bornHost", String.valueOf(m.getBornHost()), "storeHost", String.valueOf(m.getStoreHost()),
                "reconsumeTimes", m.getReconsumeTimes(), "thread", Thread.currentThread().getName(),
                "retryTopic", m.getProperty("RETRY_TOPIC"),
                "originMessageId", m.getProperty("ORIGIN_MESSAGE_ID"));
    }

    /** Blocks until stdin closes: the test's way of saying stop. */
    private static void untilStdinCloses() throws Exception {
        while (System.in.read() != -1) {
            // what the test writes is only there to be closed
        }
    }

    private static void push(Map<String, String> args) throws Exception {
        String topic = args.get("topic");
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args.get("group"));
        consumer.setNamesrvAddr(args.get("namesrv"));
        consumer.setPollNameServerInterval(Integer.parseInt(args.getOrDefault("poll-ms", "1000")));
        consumer.setPersistConsumerOffsetInterval(500);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, args.getOrDefault("expression", "*"));
        if ("orderly".equals(args.get("mode"))) {
            consumer.registerMessageListener((MessageListenerOrderly) (messages, context) -> {
                for (MessageExt m : messages) {
                    Json.print(consumed(m));
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            boolean failOnce = "true".equals(args.get("fail-once"));
            consumer.registerMessageListener((MessageListenerConcurrently) (messages, context) -> {
                boolean retry = false;
                for (MessageExt m : messages) {
                    Json.print(consumed(m));
                    retry |= failOnce && m.getReconsumeTimes() == 0;
                }
                return retry ? ConsumeConcurrentlyStatus.RECONSUME_LATER
                        : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
        }
        consumer.start();
        Thread watcher = new Thread(() -> watchQueues(consumer, topic), "queue-watcher");
        watcher.setDaemon(true);
        watcher.start();
        untilStdinCloses();
        consumer.shutdown();
        Json.print(Json.of("stopped", true));
    }

    /** Prints the topic's queues this consumer holds (and whether locked) each time they change. */
    private static void watchQueues(DefaultMQPushConsumer consumer, String topic) {
        String last = null;
        while (true) {
            List<Map<String, Object>> queues = new ArrayList<>();
            Map<MessageQueue, ProcessQueue> table =
                    consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable();
            new TreeMap<>(table).forEach((queue, process) -> {
                if (queue.getTopic().equals(topic) && !process.isDropped()) {
                    queues.add(Json.of("brokerName", queue.getBrokerName(), "queueId",
                            queue.getQueueId(), "locked", process.isLocked()));
                }
            });
            String now = Json.write(queues);
            if (!now.equals(last)) {
                Json.print(Json.of("queues", queues));
                last = now;
            }
            try {
                Thread.sleep(50);
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    private static DefaultLitePullConsumer litePull(Map<String, String> args) {
        DefaultLitePullConsumer consumer = new DefaultLitePullConsumer(args.get("group"));
        consumer.setNamesrvAddr(args.get("namesrv"));
        consumer.setAutoCommit(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        return consumer;
    }

    private static List<MessageExt> pollUntil(DefaultLitePullConsumer consumer, int count) {
        // Until count distinct messages: a pull under way when a queue is sought may
        // answer before the seek, and its messages come again after it (at least once).
        List<MessageExt> got = new ArrayList<>();
        java.util.Set<String> ids = new java.util.HashSet<>();
        long deadline = System.currentTimeMillis() + WAIT_MS;
        while (ids.size() < count && System.currentTimeMillis() < deadline) {
            for (MessageExt m : consumer.poll(1000)) {
                Json.print(consumed(m));
                got.add(m);
                ids.add(m.getMsgId());
            }
        }
        return got;
    }

    private static Map<String, Object> committed(DefaultLitePullConsumer consumer,
                                                 Collection<MessageQueue> queues) throws Exception {
        Map<String, Object> offsets = new TreeMap<>();
        for (MessageQueue queue : queues) {
            offsets.put(Integer.toString(queue.getQueueId()), consumer.committed(queue));
        }
        return offsets;
    }

    private static void liteSubscribe(Map<String, String> args) throws Exception {
        DefaultLitePullConsumer consumer = litePull(args);
        consumer.subscribe(args.get("topic"), args.getOrDefault("expression", "*"));
        consumer.start();
        pollUntil(consumer, Integer.parseInt(args.get("count")));
        consumer.commitSync();
        Json.print(Json.of("committed", committed(consumer, consumer.fetchMessageQueues(args.get("topic")))));
        consumer.shutdown();
    }

    private static void liteAssign(Map<String, String> args) throws Exception {
        DefaultLitePullConsumer consumer = litePull(args);
        consumer.start();
        Collection<MessageQueue> queues = consumer.fetchMessageQueues(args.get("topic"));
        consumer.assign(queues);
        for (MessageQueue queue : queues) {
            consumer.seekToBegin(queue);
        }
        List<MessageExt> got = pollUntil(consumer, Integer.parseInt(args.get("count")));
        // Per queue, the offset its last message's store time names.
        Map<Integer, MessageExt> last = new TreeMap<>();
        for (MessageExt m : got) {
            last.merge(m.getQueueId(), m, (a, b) -> a.getQueueOffset() > b.getQueueOffset() ? a : b);
        }
        for (MessageQueue queue : queues) {
            MessageExt m = last.get(queue.getQueueId());
            if (m != null) {
                Json.print(Json.of("queueId", queue.getQueueId(), "timestamp", m.getStoreTimestamp(),
                        "offsetForTimestamp", consumer.offsetForTimestamp(queue, m.getStoreTimestamp())));
            }
        }
        consumer.commitSync();
        Json.print(Json.of("committed", committed(consumer, queues)));
        consumer.shutdown();
    }

    private static void failover(Map<String, String> args) throws Exception {
        DefaultMQProducer producer = producer(args);
        Thread stdin = new Thread(() -> {
            try {
                untilStdinCloses();
            } catch (Exception e) {
                // a broken stdin stops the run as a closed one does
            }
        }, "stdin");
        stdin.setDaemon(true);
        stdin.start();
        AtomicLong failed = new AtomicLong();
        int i = 0;
        while (stdin.isAlive()) {
            try {
                Json.print(result("failover", i, producer.send(message(args.get("topic"), "failover", i))));
            } catch (Exception e) {
                failed.incrementAndGet();
                Json.print(Json.of("mode", "failover", "i", i, "error", e.toString()));
                Thread.sleep(10);
            }
            i++;
        }
        producer.shutdown();
        Json.print(Json.of("stopped", true, "sends", i, "failed", failed.get()));
    }

    private static volatile boolean exiting;

    /** How mqadmin's System.exit ends one command. */
    private static final class Exited extends SecurityException {
        final int status;

        Exited(int status) {
            super("mqadmin exited with " + status);
            this.status = status;
        }
    }

    /** mqadmin's commands as its shell script runs them, each one's printing captured apart. */
    @SuppressWarnings("removal")
    private static void mqadmin() throws Exception {
        // mqadmin exits the JVM on a bad argument: that ends one command, not the run.
        System.setSecurityManager(new SecurityManager() {
            @Override
            public void checkExit(int status) {
                if (!exiting) {
                    throw new Exited(status);
                }
            }

            @Override
            public void checkPermission(java.security.Permission permission) {
                // everything else is allowed
            }
        });
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = lines.readLine()) != null) {
            String[] command = line.split("\t");
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            PrintStream err0 = System.err;
            System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
            System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
            Integer exit = null;
            try {
                MQAdminStartup.main0(command, null);
            } catch (Exited e) {
                exit = e.status;
            } finally {
                System.setOut(OUT);
                System.setErr(err0);
            }
            Json.print(Json.of("command", Arrays.asList(command), "exit", exit,
                    "out", out.toString(StandardCharsets.UTF_8), "err", err.toString(StandardCharsets.UTF_8)));
        }
    }

    /** mqadmin's command on stdin's first line, run in a thread of its own, each line it
     *  prints written as it comes as {"printed": line}; until stdin closes. */
    private static void mqadminStream() throws Exception {
        BufferedReader lines = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String[] command = lines.readLine().split("\t");
        System.setOut(new PrintStream(new java.io.OutputStream() {
            private final ByteArrayOutputStream line = new ByteArrayOutputStream();

            @Override
            public synchronized void write(int b) {
                if (b != '\n') {
                    line.write(b);
                    return;
                }
                Json.print(Json.of("printed", line.toString(StandardCharsets.UTF_8)));
                line.reset();
            }
        }, true, StandardCharsets.UTF_8));
        Thread run = new Thread(() -> {
            try {
                MQAdminStartup.main0(command, null);
            } finally {
                Json.print(Json.of("ended", true));
            }
        }, "mqadmin");
        run.setDaemon(true);
        run.start();
        while (lines.readLine() != null) {
            // what the test writes is only there to be closed
        }
        Json.print(Json.of("stopped", true));
    }
}
