// shunt-info: a small JSON writer (strings escaped, commas placed by the
// writer), shared by --json, --doctor --json and --live --json.
#pragma once

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace shunt::info {

class json {
public:
    json &begin_object() { return open('{'); }
    json &end_object() { return close('}'); }
    json &begin_array() { return open('['); }
    json &end_array() { return close(']'); }
    /** The key of the next value (inside an object). */
    json &key(const std::string &k)
    {
        comma();
        s_ += quote(k);
        s_ += ':';
        after_key_ = true;
        return *this;
    }
    json &str(const std::string &v) { return raw(quote(v)); }
    json &num(std::uint64_t v) { return raw(std::to_string(v)); }
    json &num(std::int64_t v) { return raw(std::to_string(v)); }
    json &num(int v) { return raw(std::to_string(v)); }
    json &num(unsigned v) { return raw(std::to_string(v)); }
    json &real(double v)
    {
        if (!std::isfinite(v))
            return raw("null");
        char b[32];
        std::snprintf(b, sizeof b, "%.1f", v);
        return raw(b);
    }
    json &boolean(bool v) { return raw(v ? "true" : "false"); }
    json &null() { return raw("null"); }
    /** Already formatted JSON (a value read from a telemetry reply). */
    json &raw(const std::string &v)
    {
        comma();
        s_ += v;
        return *this;
    }
    /** An array of strings. */
    json &strings(const std::vector<std::string> &v)
    {
        begin_array();
        for (const std::string &x : v)
            str(x);
        return end_array();
    }
    /** An array of numbers. */
    json &numbers(const std::vector<unsigned> &v)
    {
        begin_array();
        for (unsigned x : v)
            num(x);
        return end_array();
    }
    const std::string &text() const { return s_; }

    static std::string quote(const std::string &v)
    {
        std::string o = "\"";
        for (unsigned char c : v) {
            if (c == '"' || c == '\\') {
                o += '\\';
                o += static_cast<char>(c);
            } else if (c < 0x20) {
                char b[8];
                std::snprintf(b, sizeof b, "\\u%04x", c);
                o += b;
            } else {
                o += static_cast<char>(c);
            }
        }
        return o + "\"";
    }

private:
    json &open(char c)
    {
        comma();
        s_ += c;
        first_.push_back(true);
        return *this;
    }
    json &close(char c)
    {
        s_ += c;
        if (!first_.empty())
            first_.pop_back();
        if (!first_.empty())
            first_.back() = false;
        return *this;
    }
    void comma()
    {
        if (after_key_) {
            after_key_ = false;
            return;
        }
        if (!first_.empty()) {
            if (!first_.back())
                s_ += ',';
            first_.back() = false;
        }
    }

    std::string s_;
    std::vector<bool> first_;
    bool after_key_ = false;
};

} // namespace shunt::info

namespace shunt::info {

/** A parsed JSON value (what a telemetry reply holds). Numbers keep their
 *  text too, so 64-bit counters pass through --json exactly. */
struct jvalue {
    enum kind { null_v, bool_v, number_v, string_v, array_v, object_v } k = null_v;
    bool b = false;
    double n = 0;
    std::string s; ///< string_v: the string; number_v: the number as written
    std::vector<jvalue> a;
    std::vector<std::pair<std::string, jvalue>> o;

    const jvalue *get(const std::string &key) const
    {
        for (const auto &kv : o)
            if (kv.first == key)
                return &kv.second;
        return nullptr;
    }
};

/** Parse @p text (one JSON value, surrounding blanks allowed). @return false
 *  on malformed input. Nesting is limited to 32 levels. */
bool parse_json(const std::string &text, jvalue &out);

} // namespace shunt::info
