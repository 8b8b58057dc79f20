// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "optscope/base/read_policy.h"
#include "optscope/io/byte_source.h"

namespace optscope {

/// A read-only memory map of a whole file: the local ByteSource. Tensors are read zero-copy from it; it is never
/// written. An empty file maps to a valid object with size() == 0 and bytes() == nullptr.
///
/// Files change under a map (a training job rewrites its checkpoint): reading a page the file no longer has raises
/// SIGBUS. Every map is registered with a process-wide SIGBUS handler that, for a fault inside a registered map, maps
/// zero pages over the rest of it and flags it (no longjmp through C++ frames: the read simply goes on and reads
/// zeros); faults anywhere else go to the previous handler. Whoever reads must then ask checkUnchanged() (or the
/// cheap faultCount()) before trusting what it read: it throws "changed while being read (was N bytes, now M)".
/// What a path that a checkpoint's own metadata or index names is, checked before it is read (statInside).
struct MemberStat
{
    enum Kind {
        Regular, ///< a regular file inside the checkpoint: size holds its size
        Missing, ///< nothing there (or a symlink to nothing)
        Outside, ///< an absolute path, a path with '..' out of the root, or a symlink that leads out of it
        Special, ///< a FIFO, device, socket or folder: never read (a FIFO blocks, /dev/zero never ends)
        Loop, ///< a symlink loop
        Unreadable, ///< stat failed otherwise (permissions)
    };
    Kind kind = Missing;
    uint64_t size = 0;
    std::string what; ///< for the others: "is a FIFO", "leads outside the checkpoint to /etc/passwd", ...
    bool ok() const { return kind == Regular; }
};

/// Where @p relative (as a checkpoint's metadata names it) lies under @p root, and what it is. Reads must stay inside
/// the checkpoint the user named: a .metadata or index can name any path, and a data file can be a symlink out of the
/// folder. allowReadsOutsideCheckpoint(true) (the CLI's --allow-outside-reads) lets Outside paths through as Regular.
MemberStat statInside(const std::string& root, const std::string& relative);
/// A folder inside @p root that a format picks as the checkpoint (DeepSpeed's tag folder, Megatron's iter_ folder,
/// @p namedBy says how): throws Error(Io) naming it when a symlink leads it outside @p root, as a data file there
/// would be refused (statInside; --allow-outside-reads lets it through)
void refuseFolderOutside(const std::string& root, const std::string& name, const std::string& namedBy);
/// Asks ahead about many of @p root's members (statAhead), those statInside would look at: a remote checkpoint
/// over plain HTTP learns its files' sizes with their HEADs in flight together. Local: nothing to do.
void statInsideAhead(const std::string& root, const std::vector<std::string>& relatives);

/// How many local files checkpoints keep open and mapped at once (CheckpointFiles): about half the descriptors the
/// process may open, after raising its soft limit to the hard one, between 4 and 16,384 (well under the kernel's
/// 65,530 maps). A checkpoint of more files closes the least recently read ones.
size_t openFileBudget();

class MappedFile final : public ByteSource
{
public:
    /// throws Error(Io) naming @p path when the file cannot be opened or mapped
    static std::shared_ptr<const MappedFile> open(const std::string& path);

    ~MappedFile() override;

    /// the open descriptor (kept for kernel-side copies: copy_file_range)
    int fd() const override { return m_fd; }

    /// a read through this map hit a page the file no longer has (those pages now read as zeros)
    bool faulted() const override;
    /// throws Error(Io) "changed while being read (was N bytes, now M)", "removed while being read" or "replaced
    /// while being read" when a read faulted or the file on disk is no longer the one mapped (size, mtime, inode)
    void checkUnchanged() const override;
    void checkContentUnchanged() const override;
    /// checkUnchanged() by path, size, mtime and inode, without the map (a read that faulted was reported already)
    std::function<void()> detachedCheck() const override;
    /// faults handled in this process so far (all maps): a cheap test before the per-file checks
    static uint64_t faultCount();

    /// madvise WILLNEED + SEQUENTIAL
    void adviseSequential(uint64_t offset, uint64_t length) const override;
    /// drop the pages of [offset, offset+length) from this process (MADV_DONTNEED): they stay in the page cache, but
    /// no longer count toward our resident memory; reading them again simply maps them back
    void release(uint64_t offset, uint64_t length) const override;

private:
    MappedFile() = default;
    void fetch(uint64_t, uint64_t) const override { }
    int m_fd = -1;
    int m_slot = -1; ///< in the SIGBUS registry; -1 when not guarded (empty file, registry full)
    uint64_t m_dev = 0, m_ino = 0;
    int64_t m_mtimeSec = 0, m_mtimeNsec = 0;
};

} // namespace optscope
