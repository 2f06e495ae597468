package sparkopsbench;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;

/**
 * The JVM transformWithState peers of benchmarks/spark_vs_tws.py, called from PySpark
 * through py4j (benchmarks/_spark_jvm.py): each takes the streaming input DataFrame and
 * returns the operator's output DataFrame.
 */
public final class JvmPeers {
    private JvmPeers() {
    }

    /** buffer(count) keyed by the string column `key`: see BufferProcessor. */
    public static Dataset<Row> buffer(Dataset<Row> inputs, String key, int count) {
        StructType itemSchema = inputs.schema();
        StructType outSchema = new StructType()
                .add(key, DataTypes.StringType)
                .add("items", DataTypes.createArrayType(itemSchema));
        return inputs.groupBy(key)
                .as(Encoders.STRING(), Encoders.row(itemSchema))
                .transformWithState(new BufferProcessor(count, itemSchema), TimeMode.None(), OutputMode.Update(),
                        Encoders.row(outSchema));
    }

    /**
     * combine_latest keyed by the string column `key` over the inputs named in `names` (comma
     * separated), `tagged` holding the rows of all of them with the input's name in `tagColumn`:
     * see CombineLatestProcessor.
     */
    public static Dataset<Row> combineLatest(Dataset<Row> tagged, String key, String tagColumn, String names) {
        String[] inputs = names.split(",");
        Arrays.sort(inputs);
        CombineLatestProcessor processor = new CombineLatestProcessor(inputs, tagged.schema(), key, tagColumn);
        StructType outSchema = new StructType().add(key, DataTypes.StringType);
        for (String name : inputs) {
            outSchema = outSchema.add(name, processor.rowSchema());
        }
        return tagged.groupBy(key)
                .as(Encoders.STRING(), Encoders.row(tagged.schema()))
                .transformWithState(processor, TimeMode.None(), OutputMode.Update(), Encoders.row(outSchema));
    }

    /** The rows of `rows` in event order: by "ts", ties by "seq" (as the Python peers sort). */
    @SuppressWarnings({"unchecked", "rawtypes"})
    static List<Row> inEventOrder(Iterator<Row> rows, StructType schema) {
        int ts = schema.fieldIndex("ts");
        int seq = schema.fieldIndex("seq");
        List<Row> sorted = new ArrayList<>();
        rows.foreach(sorted::add);
        Comparator<Row> order = (a, b) -> {
            int c = ((Comparable) a.get(ts)).compareTo(b.get(ts));
            return c != 0 ? c : Long.compare(a.getLong(seq), b.getLong(seq));
        };
        sorted.sort(order);
        return sorted;
    }
}
