// Apache's Java producer through the transactions of the librdkafka
// sequence-reuse reproduction (tests/workloads/test_transactions.py).
//
// Arguments: bootstrap servers, then five per producer: its name, topic,
// transactional id, delivery.timeout.ms, and how many ms an abort waits after
// its send. Each line read from stdin is a transaction every producer runs at
// once, each sending one value to partition 0 of its topic; each answers a
// line per step, its name first:
//
//   (start)     ->  NAME ready
//   commit V    ->  NAME committed V OFFSET
//   abort V     ->  NAME aborting V OUTCOME   (as the abort begins)
//                   NAME aborted V OUTCOME    (when abortTransaction() returns)
//
// OUTCOME: the send's offset, its error's class, or "pending". Compiled by the
// test against each Java client's jars.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnAfterAbort {
    private final String name;
    private final String topic;
    private final long abortWaitMs;
    private final KafkaProducer<String, String> producer;

    private TxnAfterAbort(String bootstrap, String[] args, int at) {
        name = args[at];
        topic = args[at + 1];
        abortWaitMs = Long.parseLong(args[at + 4]);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("transactional.id", args[at + 2]);
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("acks", "all");
        // As the librdkafka reproduction's: a send times out after 2 s, then waits 5 s to be retried.
        props.put("request.timeout.ms", "2000");
        props.put("retry.backoff.ms", "5000");
        props.put("retry.backoff.max.ms", "5000");
        props.put("delivery.timeout.ms", args[at + 3]);
        producer = new KafkaProducer<>(props);
    }

    private Void init() {
        producer.initTransactions();
        say("ready");
        return null;
    }

    private Void transact(String how, String value) throws Exception {
        producer.beginTransaction();
        Future<RecordMetadata> sent = producer.send(new ProducerRecord<>(topic, 0, null, value));
        if (how.equals("commit")) {
            long offset = sent.get().offset();
            producer.commitTransaction();
            say("committed " + value + " " + offset);
        } else {
            Thread.sleep(abortWaitMs);
            say("aborting " + value + " " + (sent.isDone() ? outcome(sent) : "pending"));
            producer.abortTransaction();
            say("aborted " + value + " " + outcome(sent));
        }
        return null;
    }

    private void say(String text) {
        synchronized (System.out) {
            System.out.println(name + " " + text);
        }
    }

    private static String outcome(Future<RecordMetadata> sent) throws InterruptedException {
        try {
            return Long.toString(sent.get(10, TimeUnit.SECONDS).offset());
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (TimeoutException e) {
            return "pending";
        }
    }

    /** Runs one step on every producer at once and waits for them all. */
    private static void all(ExecutorService pool, List<Callable<Void>> steps) throws Exception {
        for (Future<Void> done : pool.invokeAll(steps)) {
            done.get();
        }
    }

    public static void main(String[] args) throws Exception {
        List<TxnAfterAbort> producers = new ArrayList<>();
        for (int at = 1; at + 5 <= args.length; at += 5) {
            producers.add(new TxnAfterAbort(args[0], args, at));
        }
        ExecutorService pool = Executors.newFixedThreadPool(producers.size());
        try {
            all(pool, producers.stream().map(p -> (Callable<Void>) p::init).toList());
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            for (String line; (line = in.readLine()) != null && !line.isBlank(); ) {
                String[] cmd = line.trim().split(" ");
                all(pool, producers.stream().map(p -> (Callable<Void>) () -> p.transact(cmd[0], cmd[1])).toList());
            }
        } finally {
            pool.shutdownNow();
            for (TxnAfterAbort p : producers) {
                p.producer.close();
            }
        }
    }
}
