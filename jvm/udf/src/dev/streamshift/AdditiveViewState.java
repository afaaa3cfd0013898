package dev.streamshift;

import java.math.BigDecimal;
import java.math.RoundingMode;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.StatefulProcessorHandle;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DecimalType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.FloatType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StructType;

import scala.jdk.javaapi.CollectionConverters;

/**
 * An additive view kept in Spark's state store, in the JVM: what {@code streamshift.engine.jobs.serve}'s
 * Python processor ({@code _processor}) computes, without a socket round trip to a Python worker
 * per state read and write.
 *
 * <p>State, one state key for the whole view (a CANCEL may carry no group, so a row is found by
 * its key alone and its group's totals are updated in the same call):
 *
 * <ul>
 *   <li>{@code rows}: key → (version, live, group columns, summed inputs) as last applied;
 *   <li>{@code groups}: group → (live rows, then per sum: the sum and its count of non-nulls).
 * </ul>
 *
 * <p>Input columns: {@code k, v, ref, deleted, g0.., m0..} ({@code serve.view_changes} builds
 * them); versions and summed inputs arrive as DECIMAL(38, s) (integers as DECIMAL(38, 0)) or
 * DOUBLE, so sums are exact as Spark's are. Output: the view's row per changed group, then
 * {@code live_rows} (0 = the group emptied).
 *
 * <p>Each measure is described as {@code sum:scale} ({@code -1} for none): a count of live rows
 * when sum is -1, else the sum of input {@code m<sum>}, rounded half-up to {@code scale}, then
 * cast to the output column's type (a decimal rounds half-up to its scale; an integral type
 * truncates toward zero) — Spark's {@code round(sum(x), scale)} cast to the view's type.
 */
public final class AdditiveViewState extends StatefulProcessor<Integer, Row, Row> {
  private static final long serialVersionUID = 1L;

  private final StructType keySchema;
  private final StructType rowSchema;
  private final StructType groupSchema;
  private final StructType totalsSchema;
  private final StructType outputSchema;
  private final int[] measureSum;
  private final int[] measureScale;
  private final int nGroups;
  private final int nSums;
  private transient MapState<Row, Row> rows;
  private transient MapState<Row, Row> groups;

  private AdditiveViewState(
      String keyDdl,
      String rowDdl,
      String groupDdl,
      String totalsDdl,
      String outputDdl,
      String measures) {
    keySchema = StructType.fromDDL(keyDdl);
    rowSchema = StructType.fromDDL(rowDdl);
    groupSchema = StructType.fromDDL(groupDdl);
    totalsSchema = StructType.fromDDL(totalsDdl);
    outputSchema = StructType.fromDDL(outputDdl);
    nGroups = groupSchema.size();
    nSums = (totalsSchema.size() - 1) / 2;
    String[] parts = measures.split(";");
    measureSum = new int[parts.length];
    measureScale = new int[parts.length];
    for (int i = 0; i < parts.length; i++) {
      String[] p = parts[i].split(":");
      measureSum[i] = Integer.parseInt(p[0]);
      measureScale[i] = Integer.parseInt(p[1]);
    }
  }

  /** The view's changed groups per micro-batch, from {@code input}'s accepted changes. */
  public static Dataset<Row> apply(
      Dataset<Row> input,
      String keyDdl,
      String rowDdl,
      String groupDdl,
      String totalsDdl,
      String outputDdl,
      String measures) {
    AdditiveViewState processor =
        new AdditiveViewState(keyDdl, rowDdl, groupDdl, totalsDdl, outputDdl, measures);
    return input
        .groupByKey((MapFunction<Row, Integer>) r -> 0, Encoders.INT())
        .transformWithState(
            processor, TimeMode.None(), OutputMode.Update(), Encoders.row(processor.outputSchema));
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    StatefulProcessorHandle handle = getHandle();
    rows =
        handle.getMapState(
            "rows", Encoders.row(keySchema), Encoders.row(rowSchema), TTLConfig.NONE());
    groups =
        handle.getMapState(
            "groups", Encoders.row(groupSchema), Encoders.row(totalsSchema), TTLConfig.NONE());
  }

  /** One group's net movement in this batch: live rows, and per sum its delta and count. */
  private static final class Move {
    long live;
    final Object[] sums;
    final long[] counts;

    Move(int n) {
      sums = new Object[n];
      counts = new long[n];
    }
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

  // The batch's winner per key: highest version, ties by source reference (latest_per_key);
  // a null version (or reference) sorts last.
  private static final Comparator<Row> WINNER_FIRST =
      (a, b) -> {
        int c = compareNullsLast(a.get(1), b.get(1), true);
        return c != 0 ? c : compareNullsLast(a.get(2), b.get(2), false);
      };

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
          move(moves, slice(old, 2, nGroups), values(old, 2 + nGroups, nSums), -1);
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
      Row group = e.getKey();
      Move m = e.getValue();
      boolean unchanged = m.live == 0;
      for (int i = 0; unchanged && i < nSums; i++) {
        unchanged = m.counts[i] == 0 && (m.sums[i] == null || isZero(m.sums[i]));
      }
      if (unchanged) continue; // what left the group came back: nothing changed
      Row stored = groups.getValue(group);
      Object[] totals;
      if (stored != null) {
        totals = values(stored, 0, 1 + 2 * nSums);
      } else {
        totals = new Object[1 + 2 * nSums];
        totals[0] = 0L;
        for (int i = 0; i < nSums; i++) totals[2 + 2 * i] = 0L;
      }
      long live = (Long) totals[0] + m.live;
      totals[0] = live;
      for (int i = 0; i < nSums; i++) {
        long count = (Long) totals[2 + 2 * i] + m.counts[i];
        if (m.sums[i] != null) totals[1 + 2 * i] = add(totals[1 + 2 * i], m.sums[i]);
        totals[2 + 2 * i] = count;
        if (count == 0) totals[1 + 2 * i] = null; // Spark's sum of no values is null
      }
      int width = nGroups + measureSum.length + 1;
      Object[] row = new Object[width];
      for (int i = 0; i < nGroups; i++) row[i] = group.get(i);
      if (live <= 0) {
        groups.removeKey(group);
        row[width - 1] = 0L;
        out.add(RowFactory.create(row));
        continue;
      }
      groups.updateValue(group, RowFactory.create(totals));
      for (int j = 0; j < measureSum.length; j++) {
        DataType type = outputSchema.fields()[nGroups + j].dataType();
        int sum = measureSum[j];
        row[nGroups + j] =
            sum < 0
                ? finish(BigDecimal.valueOf(live), -1, type)
                : finish(totals[1 + 2 * sum], measureScale[j], type);
      }
      row[width - 1] = live;
      out.add(RowFactory.create(row));
    }
    return CollectionConverters.asScala(out.iterator());
  }

  /** A sum as Spark gives it: {@code round(sum, scale)} half-up, then the cast to the type. */
  static Object finish(Object total, int scale, DataType type) {
    if (total == null) return null;
    BigDecimal value =
        total instanceof BigDecimal d ? d : BigDecimal.valueOf((Double) total);
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

  private static Object[] values(Row r, int from, int n) {
    Object[] v = new Object[n];
    for (int i = 0; i < n; i++) v[i] = r.get(from + i);
    return v;
  }

  private static Row slice(Row r, int from, int n) {
    return RowFactory.create(values(r, from, n));
  }
}
