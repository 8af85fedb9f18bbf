// Decodes dsh-pipeline's Avro single-object records with Apache Avro's Java library, using
// nothing but the .avsc files, and prints each record as wire JSON (one line per record).
//
// Usage: java AvroDecode SCHEMA_DIR FILE... [--writer-only FILE...] < requests
// The files are parsed in order with one Schema.Parser (later files use earlier names).
// --writer-only files are self-contained schemas (every named type inlined) that are known
// as writer schemas (by fingerprint) but never used as reader schemas.
// Each request line is "<record full name> <hex>"; the record is read into the newest schema
// of that name through BinaryMessageDecoder, which checks the C3 01 marker and the
// fingerprint against a SchemaStore. The first output line maps each message schema's name to
// its CRC-64-AVRO parsing fingerprint (little-endian hex, as in the header).
//
// JSON mapping (the same rule as schemas/convert.py): a record is an object of its non-null
// fields; dsh.v1.JsonValue is its value; dsh.v1.BigInt is the integer its decimal spells.

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericEnumSymbol;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.SchemaStore;

public class AvroDecode {
  public static void main(String[] args) throws Exception {
    File dir = new File(args[0]);
    SchemaStore.Cache store = new SchemaStore.Cache();
    Map<String, Schema> readers = new LinkedHashMap<>();
    Map<String, String> fingerprints = new LinkedHashMap<>();
    boolean writerOnly = false;
    Schema.Parser parser = new Schema.Parser();
    for (int i = 1; i < args.length; i++) {
      if (args[i].equals("--writer-only")) {
        writerOnly = true;
        continue;
      }
      // A writer-only version gets a parser of its own: its names would clash with ours.
      Schema s = writerOnly
          ? new Schema.Parser().parse(new File(args[i]))
          : parser.parse(new File(dir, args[i]));
      if (s.getType() != Schema.Type.RECORD) {
        continue;
      }
      store.addSchema(s);
      fingerprints.put(s.getFullName() + (writerOnly ? " (writer-only)" : ""), hex(s));
      if (!writerOnly) {
        readers.put(s.getFullName(), s);
      }
    }
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    StringBuilder fp = new StringBuilder();
    json(new LinkedHashMap<String, Object>(fingerprints), fp);
    out.println(fp);

    Map<String, BinaryMessageDecoder<GenericRecord>> decoders = new LinkedHashMap<>();
    for (Map.Entry<String, Schema> e : readers.entrySet()) {
      decoders.put(e.getKey(), new BinaryMessageDecoder<>(GenericData.get(), e.getValue(), store));
    }
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.isEmpty()) {
        continue;
      }
      String[] parts = line.split(" ", 2);
      StringBuilder sb = new StringBuilder();
      try {
        GenericRecord r = decoders.get(parts[0]).decode(unhex(parts[1]));
        json(r, sb);
      } catch (Exception e) {
        sb.setLength(0);
        sb.append("{\"javaError\":");
        json(e.getClass().getName() + ": " + e.getMessage(), sb);
        sb.append('}');
      }
      out.println(sb);
    }
  }

  static String hex(Schema s) {
    long fp = SchemaNormalization.parsingFingerprint64(s);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < 8; i++) {
      sb.append(String.format("%02x", (fp >>> (8 * i)) & 0xff));
    }
    return sb.toString();
  }

  static byte[] unhex(String h) {
    byte[] b = new byte[h.length() / 2];
    for (int i = 0; i < b.length; i++) {
      b[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
    }
    return b;
  }

  static void json(Object v, StringBuilder sb) {
    if (v == null) {
      sb.append("null");
    } else if (v instanceof GenericRecord) {
      GenericRecord r = (GenericRecord) v;
      String name = r.getSchema().getFullName();
      if (name.equals("dsh.v1.JsonValue")) {
        json(r.get("value"), sb);
      } else if (name.equals("dsh.v1.BigInt")) {
        sb.append(new BigInteger(r.get("decimal").toString()));
      } else {
        sb.append('{');
        boolean first = true;
        for (Schema.Field f : r.getSchema().getFields()) {
          Object x = r.get(f.pos());
          if (x == null) {
            continue; // null field: absent key
          }
          if (!first) {
            sb.append(',');
          }
          first = false;
          json(f.name(), sb);
          sb.append(':');
          json(x, sb);
        }
        sb.append('}');
      }
    } else if (v instanceof Map) {
      sb.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        json(e.getKey().toString(), sb);
        sb.append(':');
        json(e.getValue(), sb);
      }
      sb.append('}');
    } else if (v instanceof List) {
      sb.append('[');
      boolean first = true;
      for (Object x : (List<?>) v) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        json(x, sb);
      }
      sb.append(']');
    } else if (v instanceof CharSequence || v instanceof GenericEnumSymbol) {
      String s = v.toString();
      sb.append('"');
      for (int i = 0; i < s.length(); i++) {
        char c = s.charAt(i);
        if (c == '"' || c == '\\') {
          sb.append('\\').append(c);
        } else if (c < 0x20) {
          sb.append(String.format("\\u%04x", (int) c));
        } else {
          sb.append(c);
        }
      }
      sb.append('"');
    } else if (v instanceof Double) {
      sb.append(v.toString()); // shortest text that reads back as the same double
    } else {
      sb.append(v.toString()); // Long, Integer, Boolean
    }
  }
}
