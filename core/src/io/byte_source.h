// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

namespace optscope {

/// What every reader reads from: the bytes of one file or object, addressed by offset. A local file is a read-only
/// memory map and bytes() is zero-copy (MappedFile); a remote object (RemoteObject: S3, HTTP) is backed by a sparse
/// anonymous map of its size whose ranges are fetched the first time bytes() asks for them. Readers and algorithms do
/// not know which one they read from: they ask for the range they are about to read, and keep the pointer while the
/// source lives.
class ByteSource : public std::enable_shared_from_this<ByteSource>
{
public:
    virtual ~ByteSource() = default;
    ByteSource(const ByteSource&) = delete;
    ByteSource& operator=(const ByteSource&) = delete;

    /// the file's path, or the object's URL (never with credentials or a presigned query)
    const std::string& path() const { return m_path; }
    uint64_t size() const { return m_size; }

    /// [offset, offset + length) of the source; fetched first when remote (throws Error(Io) naming the URL when it
    /// cannot be). The pointer stays valid while the source lives and the range is not release()d. A local file does
    /// no work here: the bytes are its memory map.
    const uint8_t* bytes(uint64_t offset, uint64_t length) const
    {
        if (m_fetchOnRead) fetch(offset, length);
        return m_base + offset;
    }
    /// the whole source (fetched whole when remote)
    const uint8_t* all() const { return bytes(0, m_size); }
    /// where a pointer that bytes() returned lies in the source
    uint64_t offsetOf(const uint8_t* p) const { return static_cast<uint64_t>(p - m_base); }

    /// a read met bytes the source no longer has (a file cut short under its map, an object replaced)
    virtual bool faulted() const = 0;
    /// throws Error(Io) "changed while being read …", "removed while being read" or "replaced while being read" when
    /// the source is no longer the one read
    virtual void checkUnchanged() const = 0;
    /// checkUnchanged() for a source whose bytes are kept though its path moves on: throws only when the bytes it
    /// was read from changed. A local map keeps the file it was made of, so a path that now names another file or
    /// none (a run's old step rotated away, or replaced by a rename) is no change; one rewritten in place is
    virtual void checkContentUnchanged() const { checkUnchanged(); }
    /// checkUnchanged() kept apart from the source: a closure that throws as checkUnchanged() would when the path no
    /// longer names the bytes that were read. A cache of open files closes a local file with it and checks it later
    /// (and again when it opens the file anew). Null for a source that is never closed early (remote: pinned to its
    /// ETag instead)
    virtual std::function<void()> detachedCheck() const { return nullptr; }
    /// hint that [offset, offset+length) will be read sequentially soon
    virtual void adviseSequential(uint64_t offset, uint64_t length) const = 0;
    /// this process no longer needs [offset, offset+length): its memory may go (reading it again brings it back)
    virtual void release(uint64_t offset, uint64_t length) const = 0;
    /// copies [offset, offset+length) to @p destination. A remote source fetches the range, copies it and gives the
    /// memory of its blocks back at once as finished() does (under its lock: no reader can hold a pointer into them),
    /// so that a tensor read from a remote object costs its own buffer only while it is used. A sequential scan reads
    /// ahead, no further than @p scanEnd (the end of what the caller will read: bytes past it may have been read
    /// and given back already).
    virtual void copyOut(uint64_t offset, uint64_t length, uint8_t* destination, uint64_t scanEnd = UINT64_MAX) const
    {
        (void)scanEnd;
        if (length) std::memcpy(destination, bytes(offset, length), length);
    }
    /// hint that [offset, offset+length) will be read soon, through copyOut: a remote source starts fetching it in
    /// the background, many ranged GETs at once, and returns; the bytes wait for the read (the caller bounds how much
    /// it asks ahead). A local file does nothing: the page cache reads ahead on its own.
    virtual void prefetch(uint64_t offset, uint64_t length) const
    {
        (void)offset;
        (void)length;
    }
    /// the caller reads [offset, offset+length) now, once, from its start to its end (a `.metadata` parsed as it
    /// arrives): a remote source fetches it with one GET in the background, and bytes() of a range returns as soon as
    /// the range has arrived, not when the whole has. The parse overlaps the download, and one stream keeps pace with
    /// a parse (both near 100 MB/s), where parallel ranged GETs would cost more requests for no time (a server that
    /// serves a range by reading its object, as moto does, is far slower). A stream that fails or ends short leaves
    /// the rest to bytes()'s own ranged GETs (counted as a retry). A range no larger than one ranged GET (8 MiB) is
    /// fetched here and now instead. A local file does nothing.
    virtual void stream(uint64_t offset, uint64_t length) const
    {
        (void)offset;
        (void)length;
    }
    /// the calling thread is done with [offset, offset+length) (a DCP item parsed and its tensor copied out) and
    /// points into it no more: a remote source gives back the memory of each block all of whose bytes are done, here
    /// or before, and into which no other thread points (a block shared by many small items goes with the last of
    /// them; a read fetches it again). A local file does nothing: its pages are the page cache's.
    virtual void finished(uint64_t offset, uint64_t length) const
    {
        (void)offset;
        (void)length;
    }
    /// an open descriptor for kernel-side copies (copy_file_range), or -1 when there is none (remote)
    virtual int fd() const { return -1; }
    /// how the bytes differ from the file's own, for a reader to say ("" when they do not): a deflated torch.save
    /// archive's inflated copy (zip_inflate.h)
    virtual std::string readAs() const { return {}; }
    bool isRemote() const { return m_fetchOnRead; }

protected:
    ByteSource() = default;
    /// make [offset, offset+length) readable at m_base + offset (remote sources)
    virtual void fetch(uint64_t offset, uint64_t length) const = 0;

    std::string m_path;
    const uint8_t* m_base = nullptr;
    uint64_t m_size = 0;
    bool m_fetchOnRead = false;
};

/// opens a local path (MappedFile) or a URL (s3://, gs://, http://, https://: RemoteObject); throws Error(Io) naming it
std::shared_ptr<const ByteSource> openByteSource(const std::string& location);

} // namespace optscope
