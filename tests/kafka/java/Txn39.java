// The Kafka Java client's transactions against the listener (test_java_transactions.py; kafka-clients 3.9,
// the classic protocol, or 4.x, transaction version 2 when the broker finalizes it): a committed transaction
// over both partitions with the group's offsets (sendOffsetsToTransaction), an aborted one, a zombie fenced
// by a second instance with the same transactional id, then a read_committed consumer of the topic.
// Arguments: bootstrap servers, topic (2 partitions), consumer group[, transactional id]. Prints one line
// per fact.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Txn39 {
    static String transactionalId = "java39-txn";

    static KafkaProducer<String, String> producer(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
        return new KafkaProducer<>(p);
    }

    static void send(KafkaProducer<String, String> p, String topic, String prefix, int n) throws Exception {
        for (int i = 0; i < n; i++) {
            p.send(new ProducerRecord<>(topic, i % 2, prefix + i, prefix + i)).get();
        }
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        if (args.length > 3) {
            transactionalId = args[3];
        }
        KafkaProducer<String, String> zombie = producer(bootstrap);
        zombie.initTransactions();
        zombie.beginTransaction();
        send(zombie, topic, "c", 10);
        zombie.sendOffsetsToTransaction(
            Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(5)), new ConsumerGroupMetadata(group));
        zombie.commitTransaction();
        System.out.println("committed");
        zombie.beginTransaction();
        send(zombie, topic, "a", 4);
        zombie.abortTransaction();
        System.out.println("aborted");
        zombie.beginTransaction();
        send(zombie, topic, "z", 2);
        KafkaProducer<String, String> fresh = producer(bootstrap);
        fresh.initTransactions(); // fences the first instance and aborts its open transaction
        try {
            zombie.commitTransaction();
            System.out.println("zombie committed");
        } catch (KafkaException e) {
            Throwable cause = e instanceof ProducerFencedException || e.getCause() == null ? e : e.getCause();
            System.out.println("zombie refused " + cause.getClass().getSimpleName());
        }
        zombie.close(Duration.ofSeconds(5));
        fresh.close(Duration.ofSeconds(5));

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group + "-reader");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class);
        List<String> seen = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (seen.size() < 10 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    seen.add(r.value());
                }
            }
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofSeconds(1))) {
                seen.add(r.value()); // nothing more may come: the aborted and fenced records are not there
            }
        }
        seen.sort(null);
        System.out.println("read " + String.join(",", seen));
    }
}
