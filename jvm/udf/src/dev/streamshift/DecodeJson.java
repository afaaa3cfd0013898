package dev.streamshift;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.sql.api.java.UDF2;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;

/**
 * One Kafka message's JSON document, checked and taken apart in one call: what
 * {@code streamshift.engine.decode} computes with {@code try_parse_json}, a
 * {@code try_variant_get} and a {@code schema_of_variant} per field and the cast of each value
 * to text, as a chain of interpreted Spark expressions.
 *
 * <p>The document is parsed by Spark's own {@link VariantBuilder#parseJson} (duplicated keys
 * rejected, as {@code try_parse_json} does), so which documents parse, what type each value has
 * (the type names {@code schema_of_variant} gives) and each value's text (what
 * {@code try_variant_get(v, '$', 'string')} gives) are Spark's, not a second parser's.
 *
 * <p>Arguments: the message as text (null when it is not UTF-8 or empty), and the flow's
 * fields as {@code name=TYPE|TYPE;?name=TYPE...} (the JSON types each accepts; {@code ?}: an
 * optional field, which may be missing). Result, an array: [0] the document's type (OBJECT,
 * ARRAY, STRING, BIGINT, DECIMAL, DOUBLE, BOOLEAN, VOID; null when the text is not JSON), [1]
 * the missing required fields joined by ", ", [2] the fields of a wrong type as "name is TYPE"
 * joined by ", ", then each field's value as text (null for a JSON null or a missing field),
 * then the missing optional fields joined by "," and the document's fields the spec does not
 * name joined by ", ".
 */
public final class DecodeJson implements UDF2<String, String, String[]> {
  private static final long serialVersionUID = 1L;
  private static final ConcurrentHashMap<String, Spec> SPECS = new ConcurrentHashMap<>();

  private static final class Spec {
    final String[] names;
    final boolean[] optional;
    final Set<String> known = new HashSet<>();
    final List<Set<String>> accepted = new ArrayList<>();

    Spec(String text) {
      String[] fields = text.split(";");
      names = new String[fields.length];
      optional = new boolean[fields.length];
      for (int i = 0; i < fields.length; i++) {
        int eq = fields[i].indexOf('=');
        optional[i] = fields[i].startsWith("?");
        names[i] = fields[i].substring(optional[i] ? 1 : 0, eq);
        known.add(names[i]);
        accepted.add(new HashSet<>(Arrays.asList(fields[i].substring(eq + 1).split("\\|"))));
      }
    }
  }

  /** The base type name {@code schema_of_variant} gives ("DECIMAL" for DECIMAL(p,s)). */
  static String typeName(Variant v) {
    switch (v.getType()) {
      case OBJECT: return "OBJECT";
      case ARRAY: return "ARRAY";
      case NULL: return "VOID";
      case BOOLEAN: return "BOOLEAN";
      case LONG: return "BIGINT";
      case STRING: return "STRING";
      case DOUBLE: return "DOUBLE";
      case DECIMAL: return "DECIMAL";
      case FLOAT: return "FLOAT";
      case DATE: return "DATE";
      case TIMESTAMP: return "TIMESTAMP";
      case TIMESTAMP_NTZ: return "TIMESTAMP_NTZ";
      case BINARY: return "BINARY";
      case UUID: return "UUID";
      default: return v.getType().name();
    }
  }

  /** A scalar's text as {@code try_variant_get(v, '$', 'string')} gives it; null for VOID. */
  static String text(Variant v) {
    switch (v.getType()) {
      case NULL: return null;
      case STRING: return v.getString();
      case LONG: return Long.toString(v.getLong());
      case DECIMAL: return v.getDecimal().toPlainString();
      case DOUBLE: return Double.toString(v.getDouble());
      case BOOLEAN: return v.getBoolean() ? "true" : "false";
      default: return v.toJson(java.time.ZoneOffset.UTC);
    }
  }

  @Override
  public String[] call(String json, String specText) {
    Spec spec = SPECS.computeIfAbsent(specText, Spec::new);
    int n = spec.names.length;
    String[] out = new String[5 + n];
    if (json == null) return out;
    Variant doc;
    try {
      doc = VariantBuilder.parseJson(json, false);
    } catch (Exception e) {  // not JSON, a duplicated key, too large: try_parse_json's null
      return out;
    }
    String top = typeName(doc);
    out[0] = top;
    if (!"OBJECT".equals(top)) return out;
    StringBuilder missing = null;
    StringBuilder wrong = null;
    StringBuilder absent = null;
    for (int i = 0; i < n; i++) {
      Variant field = doc.getFieldByKey(spec.names[i]);
      if (field == null && spec.optional[i]) {
        absent = (absent == null ? new StringBuilder() : absent.append(",")).append(spec.names[i]);
        continue;
      }
      if (field == null) {
        missing = (missing == null ? new StringBuilder() : missing.append(", ")).append(spec.names[i]);
        continue;
      }
      String type = typeName(field);
      if (!spec.accepted.get(i).contains(type)) {
        wrong = (wrong == null ? new StringBuilder() : wrong.append(", "))
            .append(spec.names[i]).append(" is ").append(type);
        continue;
      }
      out[3 + i] = text(field);
    }
    List<String> unknown = new ArrayList<>();
    for (int i = 0, size = doc.objectSize(); i < size; i++) {
      String key = doc.getFieldAtIndex(i).key;
      if (!spec.known.contains(key)) unknown.add(key);
    }
    Collections.sort(unknown);
    out[1] = missing == null ? "" : missing.toString();
    out[2] = wrong == null ? "" : wrong.toString();
    out[3 + n] = absent == null ? "" : absent.toString();
    out[4 + n] = String.join(", ", unknown);
    return out;
  }
}
