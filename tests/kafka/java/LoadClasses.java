// Loads (without initializing) every class named in a file, one name a line, through the application class
// loader: run by tests/jvm_cds.py with -XX:ArchiveClassesAtExit, it puts into ONE JVM's dynamic
// class-data-sharing archive the classes that several Kafka tools' JVMs loaded.
import java.nio.file.Files;
import java.nio.file.Path;

public class LoadClasses {
    public static void main(String[] args) throws Exception {
        ClassLoader app = ClassLoader.getSystemClassLoader();
        int loaded = 0;
        int failed = 0;
        for (String name : Files.readAllLines(Path.of(args[0]))) {
            try {
                Class.forName(name, false, app);
                loaded++;
            } catch (Throwable e) { // a class of an optional dependency that is not on the class path
                failed++;
            }
        }
        System.out.println("loaded " + loaded + " classes, " + failed + " not found");
    }
}
