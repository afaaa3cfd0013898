package dev.streamshift;

import static org.apache.spark.sql.functions.array;
import static org.apache.spark.sql.functions.col;
import static org.apache.spark.sql.functions.element_at;
import static org.apache.spark.sql.functions.hash;
import static org.apache.spark.sql.functions.lit;
import static org.apache.spark.sql.functions.pmod;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.hash.Murmur3_x86_32;

import scala.jdk.javaapi.CollectionConverters;

/**
 * An additive view kept in Spark's state store, in the JVM: what {@code streamshift.jobs.serve}'s
 * Python processor ({@code _processor}) computes, spread over the state partitions, without a
 * socket round trip to a Python worker per state read and write.
 *
 * <p>Two chained {@code transformWithState} operators (Spark chains stateful operators in append
 * mode; each emits what changed in the micro-batch):
 *
 * <ol>
 *   <li>{@link Rows}, one state key per state partition (a row's partition is a hash of its key):
 *       {@code rows}, key → (version, live, group columns, summed inputs) as last applied. A new
 *       version moves its old contribution out of the old group and its new one into the new
 *       group (a CANCEL may carry no group: the row is found by its key alone). Emits each
 *       partition's net movement per group: live rows, then per sum its delta and the delta of
 *       its count of non-nulls.
 *   <li>{@link Totals}, keyed by group: {@code totals}, (live rows, then per sum: the sum and its
 *       count of non-nulls). Adds the partitions' movements and emits the view's row per changed
 *       group, then {@code live_rows} (0 = the group emptied).
 * </ol>
 *
 * <p>Input columns: {@code k, v, ref, deleted, g0.., m0..} ({@code serve.view_changes} builds
 * them); versions and summed inputs arrive as DECIMAL(38, s) (integers as DECIMAL(38, 0)) or
 * DOUBLE, so sums are exact as Spark's are.
 *
 * <p>Each measure is described as {@code sum:scale} ({@code -1} for none): a count of live rows
 * when sum is -1, else the sum of input {@code m<sum>}, rounded half-up to {@code scale}, then
 * cast to the output column's type (a decimal rounds half-up to its scale; an integral type
 * truncates toward zero) — Spark's {@code round(sum(x), scale)} cast to the view's type.
 */
public final class AdditiveViewState {
  static final String STATE_KEY = "_state_key";

  private AdditiveViewState() {}

  /**
   * The view's changed groups per micro-batch, from {@code input}'s accepted changes, with the
   * rows' state over {@code partitions} state partitions (the query's shuffle partitions, which
   * its checkpoint fixes).
   */
  public static Dataset<Row> apply(
      Dataset<Row> input,
      String keyDdl,
      String rowDdl,
      String groupDdl,
      String totalsDdl,
      String outputDdl,
      String measures,
      int partitions) {
    StructType groupSchema = StructType.fromDDL(groupDdl);
    StructType totalsSchema = StructType.fromDDL(totalsDdl);
    StructType moveSchema = new StructType(concat(groupSchema.fields(), totalsSchema.fields()));
    Rows rows =
        new Rows(StructType.fromDDL(keyDdl), StructType.fromDDL(rowDdl), groupSchema.size());
    Totals totals = new Totals(groupSchema.size(), totalsSchema, outputDdl, measures);
    int nGroups = groupSchema.size();
    Dataset<Row> keyed = input.withColumn(STATE_KEY, stateKey(col("k"), partitions));
    int keyIndex = keyed.schema().fieldIndex(STATE_KEY);
    return keyed
        .groupByKey((MapFunction<Row, Integer>) r -> r.getInt(keyIndex), Encoders.INT())
        .transformWithState(rows, TimeMode.None(), OutputMode.Append(), Encoders.row(moveSchema))
        .groupByKey(
            (MapFunction<Row, Row>) r -> RowFactory.create(values(r, 0, nGroups)),
            Encoders.row(groupSchema))
        .transformWithState(
            totals, TimeMode.None(), OutputMode.Append(), Encoders.row(totals.outputSchema));
  }

  /**
   * The state key of a row with key {@code k}: one integer per state partition, chosen so that
   * Spark's hash partitioning of the grouping key (Murmur3, seed 42, modulo the partitions) puts
   * it in that partition. A key's partition is {@code pmod(hash(k), partitions)}, a function of
   * the key alone, so a key's state stays where its later versions arrive.
   */
  static Column stateKey(Column k, int partitions) {
    Column[] keys = new Column[partitions];
    int found = 0;
    for (int i = 0; found < partitions; i++) {
      int p = Math.floorMod(Murmur3_x86_32.hashInt(i, 42), partitions);
      if (keys[p] == null) {
        keys[p] = lit(i);
        found++;
      }
    }
    return element_at(array(keys), pmod(hash(k), lit(partitions)).plus(1));
  }

  /** The first operator: the rows of one state partition, and each group's net movement. */
  static final class Rows extends StatefulProcessor<Integer, Row, Row> {
    private static final long serialVersionUID = 1L;
    private final StructType keySchema;
    private final StructType rowSchema;
    private final int nGroups;
    private final int nSums;
    private transient MapState<Row, Row> rows;

    Rows(StructType keySchema, StructType rowSchema, int nGroups) {
      this.keySchema = keySchema;
      this.rowSchema = rowSchema;
      this.nGroups = nGroups;
      this.nSums = rowSchema.size() - 2 - nGroups;
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      rows =
          getHandle()
              .getMapState(
                  "rows", Encoders.row(keySchema), Encoders.row(rowSchema), TTLConfig.NONE());
    }

    // The batch's winner per key: highest version, ties by source reference (latest_per_key);
    // a null version (or reference) sorts last.
    private static final Comparator<Row> WINNER_FIRST =
        (a, b) -> {
          int c = compareNullsLast(a.get(1), b.get(1), true);
          return c != 0 ? c : compareNullsLast(a.get(2), b.get(2), false);
        };

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
        Integer key, scala.collection.Iterator<Row> input, TimerValues timerValues) {
      Map<Object, Row> winners = new LinkedHashMap<>();
      while (input.hasNext()) {
        Row r = input.next();
        winners.merge(r.get(0), r, (a, b) -> WINNER_FIRST.compare(a, b) <= 0 ? a : b);
      }
      Map<Row, Move> moves = new LinkedHashMap<>();
      for (Row r : winners.values()) {
        Row k = RowFactory.create(r.get(0));
        BigDecimal version = (BigDecimal) r.get(1);
        Row old = rows.getValue(k);
        if (old != null) {
          BigDecimal stored = (BigDecimal) old.get(0);
          if (version == null || stored == null || version.compareTo(stored) <= 0) {
            continue; // only a higher version replaces the stored one
          }
          if (old.getBoolean(1)) {
            Row group = RowFactory.create(values(old, 2, nGroups));
            move(moves, group, values(old, 2 + nGroups, nSums), -1);
          }
        }
        Object[] group = values(r, 4, nGroups);
        Object[] inputs = values(r, 4 + nGroups, nSums);
        boolean live = !Boolean.TRUE.equals(r.get(3));
        if (live) move(moves, RowFactory.create(group), inputs, +1);
        Object[] stored = new Object[2 + nGroups + nSums];
        stored[0] = version;
        stored[1] = live;
        System.arraycopy(group, 0, stored, 2, nGroups);
        System.arraycopy(inputs, 0, stored, 2 + nGroups, nSums);
        rows.updateValue(k, RowFactory.create(stored));
      }
      List<Row> out = new ArrayList<>();
      for (Map.Entry<Row, Move> e : moves.entrySet()) {
        Move m = e.getValue();
        if (m.isNone()) continue; // what left the group came back: nothing changed
        Object[] row = new Object[nGroups + 1 + 2 * nSums];
        for (int i = 0; i < nGroups; i++) row[i] = e.getKey().get(i);
        row[nGroups] = m.live;
        for (int i = 0; i < nSums; i++) {
          row[nGroups + 1 + 2 * i] = m.sums[i];
          row[nGroups + 2 + 2 * i] = m.counts[i];
        }
        out.add(RowFactory.create(row));
      }
      return CollectionConverters.asScala(out.iterator());
    }

    private void move(Map<Row, Move> moves, Row group, Object[] inputs, int sign) {
      Move m = moves.computeIfAbsent(group, g -> new Move(nSums));
      m.live += sign;
      for (int i = 0; i < nSums; i++) {
        Object x = inputs[i];
        if (x != null) {
          m.sums[i] = add(m.sums[i], sign > 0 ? x : negate(x));
          m.counts[i] += sign;
        }
      }
    }
  }

  /** The second operator: one group's totals, moved by the partitions' net movements. */
  static final class Totals extends StatefulProcessor<Row, Row, Row> {
    private static final long serialVersionUID = 1L;
    private final int nGroups;
    private final int nSums;
    private final StructType totalsSchema;
    final StructType outputSchema;
    private final int[] measureSum;
    private final int[] measureScale;
    private transient ValueState<Row> totals;

    Totals(int nGroups, StructType totalsSchema, String outputDdl, String measures) {
      this.nGroups = nGroups;
      this.totalsSchema = totalsSchema;
      this.nSums = (totalsSchema.size() - 1) / 2;
      this.outputSchema = StructType.fromDDL(outputDdl);
      String[] parts = measures.split(";");
      measureSum = new int[parts.length];
      measureScale = new int[parts.length];
      for (int i = 0; i < parts.length; i++) {
        String[] p = parts[i].split(":");
        measureSum[i] = Integer.parseInt(p[0]);
        measureScale[i] = Integer.parseInt(p[1]);
      }
    }

    @Override
    public void init(OutputMode outputMode, TimeMode timeMode) {
      totals = getHandle().getValueState("totals", Encoders.row(totalsSchema), TTLConfig.NONE());
    }

    @Override
    public scala.collection.Iterator<Row> handleInputRows(
        Row group, scala.collection.Iterator<Row> input, TimerValues timerValues) {
      Move m = new Move(nSums);
      while (input.hasNext()) {
        Row r = input.next();
        m.live += r.getLong(nGroups);
        for (int i = 0; i < nSums; i++) {
          m.sums[i] = add(m.sums[i], r.get(nGroups + 1 + 2 * i));
          m.counts[i] += r.getLong(nGroups + 2 + 2 * i);
        }
      }
      if (m.isNone()) return CollectionConverters.asScala(new ArrayList<Row>().iterator());
      Object[] t;
      if (totals.exists()) {
        t = values(totals.get(), 0, 1 + 2 * nSums);
      } else {
        t = new Object[1 + 2 * nSums];
        t[0] = 0L;
        for (int i = 0; i < nSums; i++) t[2 + 2 * i] = 0L;
      }
      long live = (Long) t[0] + m.live;
      t[0] = live;
      for (int i = 0; i < nSums; i++) {
        long count = (Long) t[2 + 2 * i] + m.counts[i];
        if (m.sums[i] != null) t[1 + 2 * i] = add(t[1 + 2 * i], m.sums[i]);
        t[2 + 2 * i] = count;
        if (count == 0) t[1 + 2 * i] = null; // Spark's sum of no values is null
      }
      int width = nGroups + measureSum.length + 1;
      Object[] row = new Object[width];
      for (int i = 0; i < nGroups; i++) row[i] = group.get(i);
      row[width - 1] = Math.max(live, 0L);
      if (live <= 0) {
        totals.clear();
      } else {
        totals.update(RowFactory.create(t));
        for (int j = 0; j < measureSum.length; j++) {
          DataType type = outputSchema.fields()[nGroups + j].dataType();
          int sum = measureSum[j];
          row[nGroups + j] =
              sum < 0
                  ? finish(BigDecimal.valueOf(live), -1, type)
                  : finish(t[1 + 2 * sum], measureScale[j], type);
        }
      }
      List<Row> out = List.of(RowFactory.create(row));
      return CollectionConverters.asScala(out.iterator());
    }
  }

  /** A group's net movement: live rows, and per sum its delta and the delta of its count. */
  static final class Move {
    long live;
    final Object[] sums;
    final long[] counts;

    Move(int n) {
      sums = new Object[n];
      counts = new long[n];
    }

    /** Nothing moved: what left the group came back. */
    boolean isNone() {
      if (live != 0) return false;
      for (int i = 0; i < sums.length; i++) {
        if (counts[i] != 0 || (sums[i] != null && !isZero(sums[i]))) return false;
      }
      return true;
    }
  }

  /** A sum as Spark gives it: {@code round(sum, scale)} half-up, then the cast to the type. */
  static Object finish(Object total, int scale, DataType type) {
    if (total == null) return null;
    BigDecimal value = total instanceof BigDecimal d ? d : BigDecimal.valueOf((Double) total);
    if (scale >= 0) value = value.setScale(scale, RoundingMode.HALF_UP);
    if (type instanceof DecimalType t) return value.setScale(t.scale(), RoundingMode.HALF_UP);
    if (type instanceof DoubleType) return value.doubleValue();
    if (type instanceof FloatType) return value.floatValue();
    long whole = value.longValue(); // truncates toward zero, as Spark's cast does
    if (type instanceof IntegerType) return (int) whole;
    if (type instanceof ShortType) return (short) whole;
    if (type instanceof ByteType) return (byte) whole;
    return whole;
  }

  private static Object add(Object a, Object b) {
    if (a == null) return b;
    if (b == null) return a;
    if (a instanceof BigDecimal x) return x.add((BigDecimal) b);
    return (Double) a + (Double) b;
  }

  private static Object negate(Object x) {
    if (x instanceof BigDecimal d) return d.negate();
    return -(Double) x;
  }

  private static boolean isZero(Object x) {
    if (x instanceof BigDecimal d) return d.signum() == 0;
    return (Double) x == 0.0;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static int compareNullsLast(Object a, Object b, boolean descending) {
    if (a == null || b == null) return a == null ? (b == null ? 0 : 1) : -1;
    int c = ((Comparable) a).compareTo(b);
    return descending ? -c : c;
  }

  private static Object[] values(Row r, int from, int n) {
    Object[] v = new Object[n];
    for (int i = 0; i < n; i++) v[i] = r.get(from + i);
    return v;
  }

  private static StructField[] concat(StructField[] a, StructField[] b) {
    StructField[] all = new StructField[a.length + b.length];
    System.arraycopy(a, 0, all, 0, a.length);
    System.arraycopy(b, 0, all, a.length, b.length);
    return all;
  }
}
