// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace optscope {

/// A read-only memory map of a whole file. Tensors are read zero-copy from it; it is never written.
/// An empty file maps to a valid object with size() == 0 and data() == nullptr.
class MappedFile
{
public:
    /// throws Error(Io) naming @p path when the file cannot be opened or mapped
    static std::shared_ptr<const MappedFile> open(const std::string& path);

    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return m_data; }
    uint64_t size() const { return m_size; }
    const std::string& path() const { return m_path; }
    /// the open descriptor (kept for kernel-side copies: copy_file_range)
    int fd() const { return m_fd; }

    /// hint that [offset, offset+length) will be read sequentially soon (madvise WILLNEED + SEQUENTIAL)
    void adviseSequential(uint64_t offset, uint64_t length) const;
    /// drop the pages of [offset, offset+length) from this process (MADV_DONTNEED): they stay in the page cache, but
    /// no longer count toward our resident memory; reading them again simply maps them back
    void release(uint64_t offset, uint64_t length) const;

private:
    MappedFile() = default;
    std::string m_path;
    const uint8_t* m_data = nullptr;
    uint64_t m_size = 0;
    int m_fd = -1;
};

} // namespace optscope
