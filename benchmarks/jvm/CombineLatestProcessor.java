package sparkopsbench;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * combine_latest in the JVM: per key and input a ValueState ("latest_<input>") with the input's
 * latest row (its fields but the key and the input's name); once every input has one, each row
 * emits (key, the latest row of every input). The same state and output as
 * benchmarks/_spark_peers.py tws_row_combine_latest (transformWithState, Python Row interface).
 */
public class CombineLatestProcessor extends StatefulProcessor<String, Row, Row> {
    private static final long serialVersionUID = 1L;

    private final String[] names;          // the inputs, sorted: the output's columns after the key
    private final StructType inputSchema;  // the tagged union's rows
    private final StructType rowSchema;    // what is kept of a row: its fields but the key and the tag
    private final int tag;                 // the field holding the input's name
    private final int[] kept;              // the fields of inputSchema that rowSchema keeps
    private transient List<ValueState<Row>> latest;

    public CombineLatestProcessor(String[] names, StructType inputSchema, String key, String tagColumn) {
        this.names = names.clone();
        this.inputSchema = inputSchema;
        this.tag = inputSchema.fieldIndex(tagColumn);
        int keyIndex = inputSchema.fieldIndex(key);
        List<Integer> fields = new ArrayList<>();
        StructType schema = new StructType();
        for (int i = 0; i < inputSchema.fields().length; i++) {
            if (i != tag && i != keyIndex) {
                fields.add(i);
                schema = schema.add(inputSchema.fields()[i]);
            }
        }
        this.rowSchema = schema;
        this.kept = fields.stream().mapToInt(Integer::intValue).toArray();
    }

    StructType rowSchema() {
        return rowSchema;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        latest = new ArrayList<>();
        for (String name : names) {
            latest.add(getHandle().getValueState("latest_" + name, Encoders.row(rowSchema), TTLConfig.NONE()));
        }
    }

    @Override
    public Iterator<Row> handleInputRows(String key, Iterator<Row> rows, TimerValues timerValues) {
        int n = names.length;
        Row[] current = new Row[n];
        boolean[] changed = new boolean[n];
        int present = 0;
        for (int i = 0; i < n; i++) {
            ValueState<Row> state = latest.get(i);
            current[i] = state.exists() ? state.get() : null;
            present += current[i] != null ? 1 : 0;
        }
        List<Row> out = new ArrayList<>();
        for (Row row : JvmPeers.inEventOrder(rows, inputSchema)) {
            int i = Arrays.asList(names).indexOf(row.getString(tag));
            if (i < 0) {
                throw new IllegalArgumentException("unknown input " + row.getString(tag));
            }
            Object[] values = new Object[kept.length];
            for (int j = 0; j < kept.length; j++) {
                values[j] = row.get(kept[j]);
            }
            present += current[i] == null ? 1 : 0;
            current[i] = RowFactory.create(values);
            changed[i] = true;
            if (present == n) {
                Object[] combined = new Object[n + 1];
                combined[0] = key;
                System.arraycopy(current, 0, combined, 1, n);
                out.add(RowFactory.create(combined));
            }
        }
        for (int i = 0; i < n; i++) {
            if (changed[i]) {
                latest.get(i).update(current[i]);
            }
        }
        return CollectionConverters.asScala(out.iterator());
    }
}
