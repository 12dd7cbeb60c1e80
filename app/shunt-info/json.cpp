// shunt-info: a JSON reader for telemetry replies (strict enough for what
// DPDK's telemetry library writes; \u escapes beyond ASCII become '?').
#include "json.h"

#include <cstdlib>

namespace shunt::info {
namespace {

struct reader {
    const std::string &t;
    std::size_t i = 0;

    void blanks()
    {
        while (i < t.size() && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t'))
            i++;
    }
    bool lit(const char *w)
    {
        std::size_t n = std::char_traits<char>::length(w);
        if (t.compare(i, n, w) != 0)
            return false;
        i += n;
        return true;
    }
    bool string(std::string &out)
    {
        if (i >= t.size() || t[i] != '"')
            return false;
        i++;
        while (i < t.size() && t[i] != '"') {
            char c = t[i++];
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i >= t.size())
                return false;
            char e = t[i++];
            switch (e) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'u': {
                if (i + 4 > t.size())
                    return false;
                long v = std::strtol(t.substr(i, 4).c_str(), nullptr, 16);
                out += v < 0x80 ? static_cast<char>(v) : '?';
                i += 4;
                break;
            }
            default: out += e;
            }
        }
        if (i >= t.size())
            return false;
        i++;
        return true;
    }
    bool value(jvalue &v, int depth)
    {
        if (depth > 32)
            return false;
        blanks();
        if (i >= t.size())
            return false;
        char c = t[i];
        if (c == '{') {
            v.k = jvalue::object_v;
            i++;
            blanks();
            if (i < t.size() && t[i] == '}')
                return ++i, true;
            for (;;) {
                blanks();
                std::string k;
                if (!string(k))
                    return false;
                blanks();
                if (i >= t.size() || t[i++] != ':')
                    return false;
                jvalue x;
                if (!value(x, depth + 1))
                    return false;
                v.o.emplace_back(std::move(k), std::move(x));
                blanks();
                if (i < t.size() && t[i] == ',') {
                    i++;
                    continue;
                }
                return i < t.size() && t[i++] == '}';
            }
        }
        if (c == '[') {
            v.k = jvalue::array_v;
            i++;
            blanks();
            if (i < t.size() && t[i] == ']')
                return ++i, true;
            for (;;) {
                jvalue x;
                if (!value(x, depth + 1))
                    return false;
                v.a.push_back(std::move(x));
                blanks();
                if (i < t.size() && t[i] == ',') {
                    i++;
                    continue;
                }
                return i < t.size() && t[i++] == ']';
            }
        }
        if (c == '"') {
            v.k = jvalue::string_v;
            return string(v.s);
        }
        if (lit("null"))
            return v.k = jvalue::null_v, true;
        if (lit("true"))
            return v.k = jvalue::bool_v, v.b = true, true;
        if (lit("false"))
            return v.k = jvalue::bool_v, v.b = false, true;
        const char *start = t.c_str() + i;
        char *end = nullptr;
        v.n = std::strtod(start, &end);
        if (end == start)
            return false;
        v.k = jvalue::number_v;
        v.s.assign(start, static_cast<std::size_t>(end - start));
        i += v.s.size();
        return true;
    }
};

} // namespace

bool parse_json(const std::string &text, jvalue &out)
{
    reader r{text};
    jvalue v;
    if (!r.value(v, 0))
        return false;
    r.blanks();
    if (r.i != text.size() && !(r.i + 1 == text.size() && text[r.i] == '\0'))
        return false;
    out = std::move(v);
    return true;
}

} // namespace shunt::info
