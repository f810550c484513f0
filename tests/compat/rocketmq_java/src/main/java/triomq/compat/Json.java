package triomq.compat;

import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.Map;

/** JSON lines on stdout, one object a line, written whole even from the client's threads. */
final class Json {
    private Json() {
    }

    /** An object from alternating keys and values, keeping their order. */
    static Map<String, Object> of(Object... pairs) {
        Map<String, Object> map = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            map.put((String) pairs[i], pairs[i + 1]);
        }
        return map;
    }

    static synchronized void print(Map<String, Object> object) {
        Main.OUT.println(write(object));
        Main.OUT.flush();
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    private static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Number || value instanceof Boolean) {
            out.append(value);
        } else if (value instanceof Map) {
            out.append('{');
            String sep = "";
            for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
                out.append(sep);
                write(String.valueOf(entry.getKey()), out);
                out.append(':');
                write(entry.getValue(), out);
                sep = ",";
            }
            out.append('}');
        } else if (value instanceof Collection) {
            out.append('[');
            String sep = "";
            for (Object item : (Collection<?>) value) {
                out.append(sep);
                write(item, out);
                sep = ",";
            }
            out.append(']');
        } else {
            String text = value.toString();
            out.append('"');
            for (int i = 0; i < text.length(); i++) {
                char c = text.charAt(i);
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        }
    }
}
