// Kafka's Java AdminClient managing client quotas, as kafka-configs --entity-type users does
// (alterClientQuotas / describeClientQuotas). Run by tests/security/test_quota_table.py with
// `java -cp <kafka-clients> ClientQuotas.java BOOTSTRAP PROPS_FILE|- COMMAND ...`:
//   alter USER|<default> key=value|key= ...   (an empty value removes the key)
//   alter-client CLIENT_ID key=value           (an entity topiclake does not keep)
//   describe                                   (every user entity: one line per entity, sorted keys)
// Errors are printed as "error <ExceptionClass>" with exit code 1.
import java.io.FileInputStream;
import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.quota.*;

public class ClientQuotas {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        if (!args[1].equals("-")) {
            try (FileInputStream in = new FileInputStream(args[1])) {
                props.load(in);
            }
        }
        try (Admin admin = Admin.create(props)) {
            run(admin, args);
        } catch (ExecutionException e) {
            System.out.println("error " + e.getCause().getClass().getSimpleName() + " " + e.getCause().getMessage());
            System.exit(1);
        }
    }

    static void run(Admin admin, String[] args) throws Exception {
        String command = args[2];
        if (command.equals("describe")) {
            ClientQuotaFilter all = ClientQuotaFilter.contains(
                List.of(ClientQuotaFilterComponent.ofEntityType(ClientQuotaEntity.USER)));
            Map<ClientQuotaEntity, Map<String, Double>> found = admin.describeClientQuotas(all).entities().get();
            List<String> lines = new ArrayList<>();
            for (Map.Entry<ClientQuotaEntity, Map<String, Double>> e : found.entrySet()) {
                String user = e.getKey().entries().get(ClientQuotaEntity.USER);
                StringBuilder line = new StringBuilder("user=" + (user == null ? "<default>" : user));
                for (Map.Entry<String, Double> v : new TreeMap<>(e.getValue()).entrySet()) {
                    line.append(" ").append(v.getKey()).append("=").append(v.getValue());
                }
                lines.add(line.toString());
            }
            Collections.sort(lines);
            lines.forEach(System.out::println);
            return;
        }
        String type = command.equals("alter-client") ? ClientQuotaEntity.CLIENT_ID : ClientQuotaEntity.USER;
        String name = args[3].equals("<default>") ? null : args[3];
        Map<String, String> entity = new HashMap<>();
        entity.put(type, name);
        List<ClientQuotaAlteration.Op> ops = new ArrayList<>();
        for (int i = 4; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            ops.add(new ClientQuotaAlteration.Op(kv[0], kv[1].isEmpty() ? null : Double.valueOf(kv[1])));
        }
        ClientQuotaAlteration change = new ClientQuotaAlteration(new ClientQuotaEntity(entity), ops);
        admin.alterClientQuotas(List.of(change)).all().get();
        System.out.println("altered");
    }
}
