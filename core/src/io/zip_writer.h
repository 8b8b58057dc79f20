// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// Writes zip archives the way PyTorch's PyTorchStreamWriter (miniz) does, streaming: each record is STORED,
// its data starts at a multiple of 64 bytes (padding in a local-header extra field "FB"), flag 0x0808 (data
// descriptor follows the data, UTF-8 names) with zero sizes/CRC in the local header, the real CRC-32 and sizes in the
// data descriptor and the central directory, and always a ZIP64 end-of-central-directory record and locator (ZIP64
// extra fields in the central directory for values that do not fit 32 bits).

#include "optscope/io/output_file.h"

#include <cstdint>
#include <string>
#include <vector>

namespace optscope {

class ByteSource;

class ZipWriter
{
public:
    /// @p base: where the archive starts in the file (offsets and alignment are relative to it, as for an archive
    /// embedded in a DCP .distcp file)
    explicit ZipWriter(OutputFile& out, uint64_t alignment = 64, uint64_t base = 0);
    /// bytes written since the archive's start
    uint64_t size() const;

    void beginRecord(const std::string& name);
    void write(const void* data, size_t size);
    /// appends [offset, offset+length) of a mapped file to the current record: copied file-to-file in the kernel,
    /// while the CRC-32 is computed from the mapping on another core
    void writeFromFile(const ByteSource& file, uint64_t offset, uint64_t length);
    void endRecord();
    /// a whole small record at once
    void addRecord(const std::string& name, const void* data, size_t size);
    /// central directory and end records; the OutputFile is then ready to commit
    void finish();

    /// bytes a STORED record named @p name of @p size data bytes takes from its local header at @p localOffset to
    /// the end of its data descriptor: where the next record starts, known before any data exists (a job's
    /// processes write their records of one archive at offsets computed so)
    static uint64_t recordSpan(const std::string& name, uint64_t localOffset, uint64_t size, uint64_t alignment = 64);

    struct Record
    {
        std::string name;
        uint64_t localOffset = 0;
        uint64_t size = 0;
        uint32_t crc = 0;
    };
    /// the records written so far, in order
    const std::vector<Record>& records() const { return m_records; }
    /// records another writer wrote into this archive (a job's other processes): listed in the central directory
    /// by finish(), all records in offset order
    void addWrittenRecords(const std::vector<Record>& records);

private:
    static std::string localHeader(const std::string& name, uint64_t localOffset, uint64_t alignment);
    static size_t descriptorSize(uint64_t size, uint64_t localOffset);
    OutputFile& m_out;
    uint64_t m_alignment;
    uint64_t m_base;
    std::vector<Record> m_records;
    bool m_open = false;
    uint64_t m_crcState = 0;
};

} // namespace optscope
