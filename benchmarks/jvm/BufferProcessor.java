package sparkopsbench;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ListState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;

/**
 * buffer(count) in the JVM: per key the rows since the last full buffer in a ListState
 * ("items", the input's schema) and their number in a ValueState ("size", struct n long);
 * when a key reaches `count` rows, one output row (key, items: the `count` rows in event
 * order) and the state starts over. The same state and output as
 * benchmarks/_spark_peers.py tws_row_buffer (transformWithState, Python Row interface).
 */
public class BufferProcessor extends StatefulProcessor<String, Row, Row> {
    private static final long serialVersionUID = 1L;
    static final StructType SIZE_SCHEMA = new StructType().add("n", DataTypes.LongType);

    private final int limit;
    private final StructType itemSchema;
    private transient ListState<Row> items;
    private transient ValueState<Row> size;

    public BufferProcessor(int limit, StructType itemSchema) {
        this.limit = limit;
        this.itemSchema = itemSchema;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
        items = getHandle().getListState("items", Encoders.row(itemSchema), TTLConfig.NONE());
        size = getHandle().getValueState("size", Encoders.row(SIZE_SCHEMA), TTLConfig.NONE());
    }

    @Override
    public Iterator<Row> handleInputRows(String key, Iterator<Row> rows, TimerValues timerValues) {
        long n = size.exists() ? size.get().getLong(0) : 0L;
        List<Row> pending = new ArrayList<>();
        List<Row> out = new ArrayList<>();
        for (Row row : JvmPeers.inEventOrder(rows, itemSchema)) {
            pending.add(row);
            n += 1;
            if (n == limit) {
                List<Row> full = new ArrayList<>(limit);
                if (n > pending.size()) {
                    items.get().foreach(full::add);
                }
                full.addAll(pending);
                out.add(RowFactory.create(key, full.toArray(new Row[0])));
                items.clear();
                pending.clear();
                n = 0;
            }
        }
        if (!pending.isEmpty()) {
            items.appendList(pending.toArray(new Row[0]));
        }
        size.update(RowFactory.create(n));
        return CollectionConverters.asScala(out.iterator());
    }
}
