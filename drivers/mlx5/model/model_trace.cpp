/* drivers/mlx5/model: the raw trace. Every WQE the device consumed and every
 * CQE it wrote, byte for byte, with its queue and index, so that a decoder
 * written independently of the driver can check them. The format is in
 * doc/guides/drivers/mlx5.md ("Trace format"); keep the two in step.
 *
 *   file   := "MLX5TRC1" u32 version (1) u32 reserved  record*
 *   record := u16 type, u16 length, u32 queue, u32 index, u32 sequence, bytes[length], pad to 8
 * All header integers little-endian; the bytes as the device saw them. */
#include <unistd.h>

#include <cstring>

#include "env/log.h"
#include "model_impl.h"

namespace shunt::drv::mlx5::model {

SHUNT_LOG_COMPONENT(trace_log, "mlx5-model");

void trace_open(mport &p)
{
    if (p.opt.trace.empty())
        return;
    p.trace_file = p.opt.trace + "." + std::to_string(getpid()) + "." + std::to_string(p.tag);
    p.trace = std::fopen(p.trace_file.c_str(), "wb");
    if (!p.trace) {
        SHUNT_LOG(trace_log, error, "cannot write trace %s: %s", p.trace_file.c_str(), std::strerror(errno));
        p.trace_file.clear();
        return;
    }
    const char magic[8] = {'M', 'L', 'X', '5', 'T', 'R', 'C', '1'};
    std::uint32_t hdr[2] = {1, 0};
    std::fwrite(magic, 1, 8, p.trace);
    std::fwrite(hdr, 4, 2, p.trace);
}

void trace_close(mport &p)
{
    if (p.trace)
        std::fclose(p.trace);
    p.trace = nullptr;
}

void trace(mport &p, trace_type t, std::uint32_t queue, std::uint32_t index, const void *data, std::size_t len)
{
    if (!p.trace)
        return;
    if (len > 0xffff)
        len = 0xffff;
    struct {
        std::uint16_t type, length;
        std::uint32_t queue, index, seq;
    } h{static_cast<std::uint16_t>(t), static_cast<std::uint16_t>(len), queue, index, p.trace_seq++};
    static_assert(sizeof h == 16);
    std::fwrite(&h, sizeof h, 1, p.trace);
    if (len)
        std::fwrite(data, 1, len, p.trace);
    static const std::uint8_t zeros[8] = {};
    if (len & 7)
        std::fwrite(zeros, 1, 8 - (len & 7), p.trace);
}

} // namespace shunt::drv::mlx5::model
