// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/zip_writer.h"
#include "optscope/base/error.h"
#include "optscope/io/byte_source.h"

#include <algorithm>
#include <future>
#include <zlib.h>

namespace optscope {

namespace {

void put16(std::string& b, uint16_t v)
{
    b += static_cast<char>(v & 0xff);
    b += static_cast<char>(v >> 8);
}
void put32(std::string& b, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        b += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put64(std::string& b, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        b += static_cast<char>((v >> (8 * i)) & 0xff);
}

constexpr uint32_t k32 = 0xFFFFFFFFu;
constexpr uint16_t kFlags = 0x0808; // data descriptor + UTF-8 names, as torch writes

} // namespace

ZipWriter::ZipWriter(OutputFile& out, uint64_t alignment, uint64_t base)
    : m_out(out)
    , m_alignment(alignment)
    , m_base(base)
{ }

uint64_t ZipWriter::size() const
{
    return m_out.position() - m_base;
}

std::string ZipWriter::localHeader(const std::string& name, uint64_t localOffset, uint64_t alignment)
{
    std::string h;
    put32(h, 0x04034b50);
    put16(h, 0); // version needed (torch writes 0)
    put16(h, kFlags);
    put16(h, 0); // stored
    put16(h, 0); // time
    put16(h, 0); // date
    put32(h, 0); // crc (in the descriptor)
    put32(h, 0); // sizes (in the descriptor)
    put32(h, 0);
    put16(h, static_cast<uint16_t>(name.size()));
    // "FB" extra field pads the header so that the data starts aligned
    const uint64_t start = localOffset + 30 + name.size() + 4;
    const uint64_t pad = (alignment - start % alignment) % alignment;
    put16(h, static_cast<uint16_t>(4 + pad));
    h += name;
    h += "FB";
    put16(h, static_cast<uint16_t>(pad));
    h.append(pad, 'Z');
    return h;
}

size_t ZipWriter::descriptorSize(uint64_t size, uint64_t localOffset)
{
    return size >= k32 || localOffset >= k32 ? 24 : 16;
}

uint64_t ZipWriter::recordSpan(const std::string& name, uint64_t localOffset, uint64_t size, uint64_t alignment)
{
    const uint64_t start = localOffset + 30 + name.size() + 4;
    return (start - localOffset) + (alignment - start % alignment) % alignment + size
        + descriptorSize(size, localOffset);
}

void ZipWriter::beginRecord(const std::string& name)
{
    if (m_open) throw Error(ErrorKind::Usage, m_out.path(), "zip: record '" + name + "' started inside another");
    if (name.size() > 0xffff) throw Error(ErrorKind::Usage, m_out.path(), "zip: record name too long");
    Record r;
    r.name = name;
    r.localOffset = size();
    const std::string h = localHeader(name, r.localOffset, m_alignment);
    m_out.write(h.data(), h.size());
    m_records.push_back(std::move(r));
    m_open = true;
    m_crcState = crc32(0L, Z_NULL, 0);
}

void ZipWriter::addWrittenRecords(const std::vector<Record>& records)
{
    if (m_open) throw Error(ErrorKind::Usage, m_out.path(), "zip: records added inside a record");
    m_records.insert(m_records.end(), records.begin(), records.end());
    std::sort(m_records.begin(), m_records.end(),
        [](const Record& a, const Record& b) { return a.localOffset < b.localOffset; });
}

void ZipWriter::write(const void* data, size_t size)
{
    if (!m_open) throw Error(ErrorKind::Usage, m_out.path(), "zip: data written outside a record");
    auto crcOf = [](const Bytef* p, size_t left) {
        uLong c = crc32(0L, Z_NULL, 0);
        while (left > 0) {
            const auto n = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
            c = crc32(c, p, n);
            p += n;
            left -= n;
        }
        return c;
    };
    const auto* p = static_cast<const Bytef*>(data);
    if (size >= (4u << 20)) {
        // large blocks: the CRC runs on another core while this one writes the same bytes
        auto crc = std::async(std::launch::async, crcOf, p, size);
        m_out.write(data, size);
        m_crcState = crc32_combine64(m_crcState, crc.get(), static_cast<z_off64_t>(size));
    } else {
        m_crcState = crc32_combine64(m_crcState, crcOf(p, size), static_cast<z_off64_t>(size));
        m_out.write(data, size);
    }
    m_records.back().size += size;
}

void ZipWriter::writeFromFile(const ByteSource& file, uint64_t offset, uint64_t length)
{
    if (!m_open) throw Error(ErrorKind::Usage, m_out.path(), "zip: data written outside a record");
    if (offset > file.size() || length > file.size() - offset)
        throw Error(ErrorKind::Truncated, file.path(), "region past the end of the file");
    if (length < (1u << 20)) {
        // a small record (a 100k-tensor safetensors file is 100k of them): summed here and written through the
        // output's buffer; a thread and a copy_file_range per record cost 100 us each, 12 s for 100k
        write(file.bytes(offset, length), static_cast<size_t>(length));
        return;
    }
    if (file.fd() < 0) {
        // a remote object: copied out 64 MiB at a time (many ranged GETs in flight, the next piece fetched while this
        // one is written), each piece's memory given back as it is copied
        constexpr uint64_t piece = 64u << 20;
        std::vector<uint8_t> buffer(static_cast<size_t>(std::min(piece, length)));
        for (uint64_t done = 0; done < length;) {
            const uint64_t n = std::min(piece, length - done);
            file.copyOut(offset + done, n, buffer.data(), offset + length);
            write(buffer.data(), static_cast<size_t>(n));
            done += n;
        }
        return;
    }
    // CRC over the mapping, 64 MiB at a time, each piece dropped from our resident memory once summed
    auto crc = std::async(std::launch::async, [&file, offset, length] {
        uLong c = crc32(0L, Z_NULL, 0);
        constexpr uint64_t piece = 64u << 20;
        for (uint64_t done = 0; done < length;) {
            const uint64_t n = std::min(piece, length - done);
            file.adviseSequential(offset + done, n);
            const Bytef* p = file.bytes(offset + done, n);
            for (uint64_t k = 0; k < n;) {
                const auto m = static_cast<uInt>(std::min<uint64_t>(n - k, 1u << 30));
                c = crc32(c, p + k, m);
                k += m;
            }
            file.release(offset + done, n);
            done += n;
        }
        return c;
    });
    m_out.copyFrom(file.fd(), offset, length);
    m_crcState = crc32_combine64(m_crcState, crc.get(), static_cast<z_off64_t>(length));
    m_records.back().size += length;
}

void ZipWriter::endRecord()
{
    Record& r = m_records.back();
    r.crc = static_cast<uint32_t>(m_crcState);
    std::string d;
    put32(d, 0x08074b50);
    put32(d, r.crc);
    if (descriptorSize(r.size, r.localOffset) == 24) {
        put64(d, r.size);
        put64(d, r.size);
    } else {
        put32(d, static_cast<uint32_t>(r.size));
        put32(d, static_cast<uint32_t>(r.size));
    }
    m_out.write(d.data(), d.size());
    m_open = false;
}

void ZipWriter::addRecord(const std::string& name, const void* data, size_t size)
{
    beginRecord(name);
    write(data, size);
    endRecord();
}

void ZipWriter::finish()
{
    const uint64_t cdOffset = size();
    std::string cd;
    for (const auto& r : m_records) {
        const bool big = r.size >= k32 || r.localOffset >= k32;
        std::string extra;
        if (big) {
            // only the fields whose 32-bit slot is 0xFFFFFFFF, in order: size, compressed size, offset
            std::string body;
            if (r.size >= k32) {
                put64(body, r.size);
                put64(body, r.size);
            }
            if (r.localOffset >= k32) put64(body, r.localOffset);
            put16(extra, 0x0001);
            put16(extra, static_cast<uint16_t>(body.size()));
            extra += body;
        }
        put32(cd, 0x02014b50);
        put16(cd, big ? 45 : 0); // version made by
        put16(cd, big ? 45 : 0); // version needed
        put16(cd, kFlags);
        put16(cd, 0);
        put16(cd, 0);
        put16(cd, 0);
        put32(cd, r.crc);
        put32(cd, r.size >= k32 ? k32 : static_cast<uint32_t>(r.size));
        put32(cd, r.size >= k32 ? k32 : static_cast<uint32_t>(r.size));
        put16(cd, static_cast<uint16_t>(r.name.size()));
        put16(cd, static_cast<uint16_t>(extra.size()));
        put16(cd, 0); // comment
        put16(cd, 0); // disk
        put16(cd, 0); // internal attributes
        put32(cd, 0); // external attributes
        put32(cd, r.localOffset >= k32 ? k32 : static_cast<uint32_t>(r.localOffset));
        cd += r.name;
        cd += extra;
        if (cd.size() > (1u << 20)) {
            m_out.write(cd.data(), cd.size());
            cd.clear();
        }
    }
    m_out.write(cd.data(), cd.size());
    const uint64_t cdSize = size() - cdOffset;
    const uint64_t count = m_records.size();
    const uint64_t eocd64 = size();
    std::string e;
    put32(e, 0x06064b50);
    put64(e, 44); // size of the rest of this record
    put16(e, 45);
    put16(e, 45);
    put32(e, 0);
    put32(e, 0);
    put64(e, count);
    put64(e, count);
    put64(e, cdSize);
    put64(e, cdOffset);
    put32(e, 0x07064b50); // locator
    put32(e, 0);
    put64(e, eocd64);
    put32(e, 1);
    put32(e, 0x06054b50); // end of central directory
    put16(e, 0);
    put16(e, 0);
    put16(e, count >= 0xffff ? 0xffff : static_cast<uint16_t>(count));
    put16(e, count >= 0xffff ? 0xffff : static_cast<uint16_t>(count));
    put32(e, cdSize >= k32 ? k32 : static_cast<uint32_t>(cdSize));
    put32(e, cdOffset >= k32 ? k32 : static_cast<uint32_t>(cdOffset));
    put16(e, 0);
    m_out.write(e.data(), e.size());
}

} // namespace optscope
