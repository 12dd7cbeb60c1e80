// Reading this process's statistics the way another process does: through
// its DPDK telemetry socket with dpdk-telemetry.py (Debian package dpdk-dev).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <string>

namespace shunt::test {

/** The output of @p cmd (a shell command line), its exit status in @p status. */
inline std::string run_cmd(const std::string &cmd, int *status)
{
    std::string out;
    FILE *p = ::popen(cmd.c_str(), "r");
    if (!p) {
        *status = -1;
        return out;
    }
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    *status = ::pclose(p);
    return out;
}

/** Is @p prog on the PATH? */
inline bool have_prog(const char *prog)
{
    int status = 0;
    run_cmd(std::string("command -v ") + prog + " >/dev/null 2>&1", &status);
    return status == 0;
}

/** Trailing blanks off; "error: ..." when the command failed. */
inline std::string cmd_result(std::string out, int status)
{
    while (!out.empty() && (out.back() == '\n' || out.back() == ' '))
        out.pop_back();
    return status == 0 ? out : "error: " + out;
}

/** Field @p f of block @p name as dpdk-telemetry.py reads it from this
 *  process's socket (`/shunt/stats,NAME`), as text; bounded by timeouts.
 *  @p f may name several fields separated by spaces: their values come
 *  back separated by spaces, from one reading. */
inline std::string telemetry_field(const std::string &name, const char *f)
{
    const std::string cmd = "printf '/shunt/stats," + name + "\\n' | timeout 20 dpdk-telemetry.py -f shunt-" +
                            std::to_string(::getpid()) + " 2>&1 | " +
                            "timeout 20 python3 -c 'import json,sys\nfor l in sys.stdin:\n    if l.startswith(\"{\"): "
                            "d = json.loads(l)[\"/shunt/stats\"]; print(\" \".join(str(d[k]) for k in sys.argv[1:]))' " +
                            f;
    int status = 0;
    std::string out = run_cmd(cmd, &status);
    return cmd_result(out, status);
}

} // namespace shunt::test
