// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace optscope {

/// A file written under a temporary name next to its destination and renamed into place by commit(), so that a
/// reader never sees a half-written output. Destroying an uncommitted OutputFile removes the temporary.
class OutputFile
{
public:
    /// throws Error(Io) naming @p path if the temporary cannot be created
    explicit OutputFile(std::string path);
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    void write(const void* data, size_t size);
    /// zero bytes, for alignment padding
    void writeZeros(size_t size);
    uint64_t position() const { return m_position; }
    /// flush, fsync and rename over the destination
    void commit();
    const std::string& path() const { return m_path; }
    const std::string& tempPath() const { return m_temp; }

private:
    void flushBuffer();
    std::string m_path;
    std::string m_temp;
    int m_fd = -1;
    uint64_t m_position = 0;
    bool m_committed = false;
    // small writes (headers, pickles) are batched; large blocks go straight to the kernel
    static constexpr size_t kBufferSize = 1 << 16;
    char* m_buffer = nullptr;
    size_t m_buffered = 0;
};

} // namespace optscope
