/* shunt-perf: the out-of-band channel between the two sides. A stream socket
 * (a socketpair to the locally spawned responder, or TCP between server and
 * client) carrying one text line per message. Setup only, never timed. */
#pragma once

#include <cstdint>
#include <string>

namespace shunt::perf {

class oob_channel {
public:
    explicit oob_channel(int fd = -1) : fd_(fd) {}
    ~oob_channel();
    oob_channel(const oob_channel &) = delete;
    oob_channel &operator=(const oob_channel &) = delete;

    int fd() const { return fd_; }
    /** Send one line (no newline inside). @return 0 or -FI_ECONNRESET. */
    [[nodiscard]] int send(const std::string &line);
    /** Receive one line, waiting at most @p timeout_s seconds.
     *  @return 0; -FI_ETIMEDOUT; -FI_ECONNRESET on EOF or error;
     *  -FI_EMSGSIZE on a line over 64 KiB. */
    [[nodiscard]] int recv(std::string &line, double timeout_s);
    /** Receive a line that must start with @p word; "ERROR ..." lines from
     *  the peer become -FI_EREMOTEIO with the text in @p line. */
    [[nodiscard]] int expect(const char *word, std::string &line, double timeout_s);

private:
    int fd_;
    std::string buf_;
};

/** Listen on @p bind (empty: any) : @p port, accept one client within
 *  @p timeout_s. @return the connected fd, or a negative code with @p why. */
int tcp_accept_one(const std::string &bind, std::uint16_t port, double timeout_s, std::string &why);
/** Connect to @p host : @p port, retrying until @p timeout_s (the server may
 *  still be starting). @return the fd, or a negative code with @p why. */
int tcp_connect(const std::string &host, std::uint16_t port, double timeout_s, std::string &why);

/** Has the peer closed its end (EOF or error pending)? Never blocks. */
bool peer_gone(int fd);

} // namespace shunt::perf
