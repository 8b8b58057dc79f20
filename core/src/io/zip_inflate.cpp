// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/io/zip_inflate.h"
#include "optscope/base/error.h"
#include "optscope/base/progress.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/output_file.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_archive.h"
#include "optscope/io/zip_writer.h"

#include <atomic>
#include <filesystem>
#include <sys/statvfs.h>
#include <unistd.h>
#include <vector>
#include <zlib.h>

namespace optscope {

namespace {

namespace fs = std::filesystem;

constexpr const char* kCopyPrefix = "optscope-inflated-"; ///< removeDeadEntries' PREFIX<PID>- names

/// The inflated copy, read as the original: its bytes are the copy's, its path, change checks and detached check the
/// original's (the copy is unlinked: nobody else can change it)
class InflatedArchive final : public ByteSource
{
public:
    InflatedArchive(std::shared_ptr<const ByteSource> original, std::shared_ptr<const ByteSource> copy)
        : m_original(std::move(original))
        , m_copy(std::move(copy))
    {
        m_path = m_original->path();
        m_size = m_copy->size();
        m_base = m_copy->all();
    }
    bool faulted() const override { return m_original->faulted() || m_copy->faulted(); }
    void checkUnchanged() const override { m_original->checkUnchanged(); }
    void checkContentUnchanged() const override { m_original->checkContentUnchanged(); }
    std::function<void()> detachedCheck() const override { return m_original->detachedCheck(); }
    void adviseSequential(uint64_t offset, uint64_t length) const override { m_copy->adviseSequential(offset, length); }
    void release(uint64_t offset, uint64_t length) const override { m_copy->release(offset, length); }
    int fd() const override { return m_copy->fd(); }
    std::string readAs() const override
    {
        return "records deflated by another tool, read from an inflated copy of " + std::to_string(m_size) + " bytes";
    }

private:
    void fetch(uint64_t, uint64_t) const override { }
    std::shared_ptr<const ByteSource> m_original;
    std::shared_ptr<const ByteSource> m_copy;
};

/// appends the inflated bytes of @p e (deflate, raw) to @p zip's open record, a piece at a time
void inflateRecord(const ByteSource& file, const ZipEntry& e, ZipWriter& zip)
{
    z_stream z {};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
        throw Error(ErrorKind::Io, file.path(), "zip: cannot start inflating '" + std::string(e.name) + "'");
    struct End
    {
        z_stream& z;
        ~End() { inflateEnd(&z); }
    } end {z};
    constexpr uint64_t kPiece = uint64_t(1) << 20; // zlib's lengths are 32-bit
    // a remote object is copied out 16 MiB at a time, as ZipWriter::writeFromFile does (many ranged GETs in flight,
    // the next piece fetched while this one inflates, each piece's memory given back); a local one is read in place
    const bool remote = file.isRemote();
    const uint64_t inPiece = remote ? uint64_t(16) << 20 : kPiece;
    std::vector<uint8_t> in(remote ? static_cast<size_t>(std::min(inPiece, e.storedSize)) : 0);
    std::vector<uint8_t> out(kPiece);
    uint64_t readAt = 0, written = 0;
    int status = Z_OK;
    while (status != Z_STREAM_END) {
        if (z.avail_in == 0 && readAt < e.storedSize) {
            const uint64_t n = std::min(inPiece, e.storedSize - readAt);
            if (remote) file.copyOut(e.dataOffset + readAt, n, in.data(), e.dataOffset + e.storedSize);
            z.next_in = remote ? in.data() : const_cast<Bytef*>(file.bytes(e.dataOffset + readAt, n));
            z.avail_in = static_cast<uInt>(n);
            readAt += n;
        }
        z.next_out = out.data();
        z.avail_out = static_cast<uInt>(out.size());
        status = inflate(&z, Z_NO_FLUSH);
        const uint64_t produced = out.size() - z.avail_out;
        if (written + produced > e.size || (status != Z_OK && status != Z_STREAM_END)
            || (status == Z_OK && produced == 0 && z.avail_in == 0 && readAt == e.storedSize))
            throw Error(ErrorKind::Format, file.path(),
                "zip: record '" + std::string(e.name) + "' does not inflate to its " + std::to_string(e.size)
                    + " bytes (deflate data damaged or cut short)",
                e.dataOffset + readAt - z.avail_in);
        zip.write(out.data(), produced);
        written += produced;
        CancelScope::check(file.path());
    }
    if (written != e.size || readAt - z.avail_in != e.storedSize)
        throw Error(ErrorKind::Format, file.path(),
            "zip: record '" + std::string(e.name) + "' inflates to " + std::to_string(written) + " bytes from "
                + std::to_string(readAt - z.avail_in) + " of its " + std::to_string(e.storedSize)
                + ", not its recorded " + std::to_string(e.size),
            e.dataOffset);
    file.release(e.dataOffset, e.storedSize);
}

} // namespace

std::shared_ptr<const ByteSource> inflatedIfCompressed(std::shared_ptr<const ByteSource> file)
{
    if (file->isRemote()) {
        // the central directory only (a smaller archive whole, as readTorchSaveArchive fetches it): the ranges the
        // archive's own parse reads first, so no request is added
        if (file->size() <= kZipFetchWholeBytes) file->all();
        const auto need = [&file](uint64_t at, uint64_t length) { file->bytes(at, length); };
        if (!zipHasCompressedRecords(file->bytes(0, 0), file->size(), need)) return file;
    } else if (!zipHasCompressedRecords(file->all(), file->size())) {
        return file;
    }
    const ZipArchive archive = ZipArchive::parseInPlace(*file, 0, file->size(), file->path(), true);
    std::error_code ec;
    const fs::path dir = fs::temp_directory_path(ec);
    if (ec)
        throw Error(ErrorKind::Io, file->path(),
            "its records are deflated (zipped again by another tool) and are inflated into a temporary copy, but the "
            "temporary folder cannot be used: "
                + ec.message() + "; point TMPDIR at a folder with room");
    removeDeadEntries(dir.string(), kCopyPrefix); // left by a run killed between its copy's rename and unlink
    // the copy's size is known before a byte is written (the records' sizes, their headers): a copy that cannot fit
    // is refused now, not after filling the disk (a small file may inflate a thousandfold)
    uint64_t needed = 128; // the end records (ZIP64 and plain)
    for (const ZipEntry& e : archive.entries()) // each record, and its central directory record with a ZIP64 field
        needed += ZipWriter::recordSpan(std::string(e.name), needed, e.size) + 46 + e.name.size() + 32;
    if (struct statvfs fsInfo {}; ::statvfs(dir.c_str(), &fsInfo) == 0) {
        const uint64_t available = uint64_t(fsInfo.f_bavail) * fsInfo.f_frsize;
        if (needed > available)
            throw Error(ErrorKind::Io, file->path(),
                "its records are deflated (zipped again by another tool) and are inflated into a temporary copy of "
                    + std::to_string(needed) + " bytes, but " + dir.string() + " has " + std::to_string(available)
                    + " bytes free; point TMPDIR at a folder with room");
    }
    static std::atomic<unsigned> counter {0};
    const std::string copyPath = (dir
        / (kCopyPrefix + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-"
            + locationName(file->path())))
                                     .string();
    std::shared_ptr<const ByteSource> copy;
    try {
        WriteOptions options;
        options.fsync = false; // read back at once and never kept
        OutputFile out(copyPath, options);
        ZipWriter zip(out);
        for (const ZipEntry& e : archive.entries()) {
            zip.beginRecord(std::string(e.name));
            if (e.method == 0)
                zip.writeFromFile(*file, e.dataOffset, e.size);
            else
                inflateRecord(*file, e, zip);
            zip.endRecord();
            // an inflated record is checked against its CRC-32; a stored one is copied as torch.load reads it, which
            // checks none (torch.serialization.set_crc32_options(False) writes 0)
            if (e.method != 0 && zip.records().back().crc != e.crc32)
                throw Error(ErrorKind::Format, file->path(),
                    "zip: record '" + std::string(e.name) + "' does not match its CRC-32 (damaged)", e.dataOffset);
        }
        zip.finish();
        out.commit();
        copy = MappedFile::open(copyPath);
    } catch (const Error& e) {
        ::unlink(copyPath.c_str());
        if (e.file() == file->path() || e.kind() == ErrorKind::Cancelled) throw;
        throw Error(e.kind(), file->path(),
            "its records are deflated (zipped again by another tool) and are inflated into a temporary copy in "
                + dir.string() + ", which failed: " + e.what() + "; point TMPDIR at a folder with room");
    }
    ::unlink(copyPath.c_str()); // mapped: its bytes stay until the map goes
    return std::make_shared<InflatedArchive>(std::move(file), std::move(copy));
}

} // namespace optscope
