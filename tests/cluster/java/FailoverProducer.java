// Kafka's own Java producer (kafka-clients) for tests/cluster/test_kafka_failover.py, run as a single-file
// source program: `java -cp <kafka jars> FailoverProducer.java BOOTSTRAP TOPIC PARTITIONS SECONDS PACE_MS`.
// Sends "j000000", "j000001", ... round-robin over the partitions (acks=all, idempotent) for at most
// SECONDS or until a line arrives on stdin, then flushes; prints "ACK value partition offset" or "FAIL value error" per record, then "DONE".
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class FailoverProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("acks", "all");
        props.put("enable.idempotence", "true");
        props.put("delivery.timeout.ms", "60000");
        props.put("request.timeout.ms", "10000");
        props.put("linger.ms", "5");
        props.put("retry.backoff.ms", "100");
        props.put("reconnect.backoff.max.ms", "500");
        String topic = args[1];
        int partitions = Integer.parseInt(args[2]);
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[3]));
        long pace = Long.parseLong(args[4]);
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < 100000 && System.nanoTime() < until; i++) {
                if (System.in.available() > 0) {
                    break;
                }
                String value = String.format("j%06d", i);
                producer.send(new ProducerRecord<>(topic, i % partitions, null, value), (md, exc) -> {
                    synchronized (System.out) {
                        if (exc == null) {
                            System.out.println("ACK " + value + " " + md.partition() + " " + md.offset());
                        } else {
                            System.out.println("FAIL " + value + " " + exc);
                        }
                        System.out.flush();
                    }
                });
                Thread.sleep(pace);
            }
            producer.flush();
        }
        System.out.println("DONE");
    }
}
