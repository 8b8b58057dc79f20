// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace optscope {

/// How outputs are made durable.
struct WriteOptions
{
    /// fsync the file (and, for folders, every file) before the rename that makes it visible: on a crash the
    /// output is either complete or absent. Off trades that for speed (torch.save does not sync either).
    bool fsync = true;
    /// called just before the rename that publishes the output; throwing there leaves no output (the algorithms
    /// check here that their inputs did not change while they were read)
    std::function<void()> beforeCommit;
    /// files and folders the output must not be, lie inside or hold (the checkpoints read, a model beside them): the
    /// writer refuses such an output before it creates anything (refuseOutputOverInputs)
    std::vector<std::string> inputs;
    /// asked once more after the last byte is written and before the rename (the writers pass their Progress's):
    /// true makes commit() throw Error(Cancelled) and leave no output
    std::function<bool()> cancelled;
    /// the file goes into a folder this run made for the output (a DCP output's temporary folder): no earlier run
    /// left temporaries there to look for, and looking was a listing of the folder per file (quadratic: a reshard to
    /// 5,000 ranks spent most of its 26 s in readdir)
    bool inFreshFolder = false;
    /// object storage: set, the object is created only where none is, tagged with this (ObjectUpload::createOnlyNew):
    /// a DCP output's objects, so that two runs writing one prefix cannot both succeed with a mix of their files,
    /// and a failed run removes only its own
    std::string newObjectsTag;
};

/// throws Error(Usage) naming @p output when it is one of @p inputs (the same path, or the same file by another name:
/// a symlink or hard link), lies inside an input folder, or is a folder that holds an input: writing it would
/// destroy or change what is being read. Paths that do not exist yet are compared by their resolved parent.
void refuseOutputOverInputs(const std::string& output, const std::vector<std::string>& inputs);

/// What an output is renamed onto its name as.
enum class OutputShape { File, Folder };
/// throws Error(Usage) naming local @p output when what is at that name (a trailing slash ignored, links not followed)
/// is not what the finished output may replace: the rename would replace a symbolic link, not what it leads to, and
/// turn a device, FIFO or socket into a regular file (as root, -o /dev/null would replace it for the whole machine).
/// A file output may replace a regular file; a folder output is checked further by its writer (empty folders only)
void refuseOutputOverSpecialFile(const std::string& output, OutputShape shape);

/// Temporaries are named ".NAME.tmp-PID-XXXXXX" next to the output NAME, and their writer holds an exclusive flock
/// on each (TemporaryLock) until it is done. A later run that writes NAME removes those that are provably dead: the
/// lock can be taken (the kernel drops a dead process's locks, whatever PID namespace or host it ran in) and the PID,
/// where it means anything here, is gone. A live temporary of a writer in another container or on another host
/// sharing the folder is never touched. Returns how many it removed.
size_t removeStaleTemporaries(const std::string& output);
/// the temporary name prefix for @p output: "DIR/.NAME.tmp-PID-"
std::string temporaryPrefix(const std::string& output);
/// what every temporary of @p output starts with, whichever process made it: "DIR/.NAME.tmp-"
std::string temporaryNamePrefix(const std::string& output);
/// removes the entries of @p dir named "PREFIX<PID>-..." (@p prefix given, e.g. "optscope-verify-") that are
/// provably dead as above; how many it removed. The rule of removeStaleTemporaries, for scratch folders.
size_t removeDeadEntries(const std::string& dir, const std::string& prefix);

/// An exclusive advisory lock (flock) on a file or folder, held for this object's life: it tells other processes
/// that the temporary is being written.
class TemporaryLock
{
public:
    TemporaryLock() = default;
    /// locks @p path (a file or a folder); false when it cannot be opened or is locked by someone else
    bool lock(const std::string& path);
    /// locks the open descriptor @p fd for as long as it stays open (not taken over)
    static bool lockFd(int fd);
    ~TemporaryLock();
    TemporaryLock(const TemporaryLock&) = delete;
    TemporaryLock& operator=(const TemporaryLock&) = delete;

private:
    int m_fd = -1;
};

class ObjectUpload;

/// A file written under a temporary name next to its destination and renamed into place by commit(), so that a
/// reader never sees a half-written output. Destroying an uncommitted OutputFile removes the temporary. An object
/// (s3://, gs://) is streamed to its store as it is written, nothing kept on the local disk (ObjectUpload), and
/// appears only when commit() completes it; destroyed uncommitted, the upload is aborted.
class OutputFile
{
public:
    /// throws Error(Io) naming @p path if the temporary cannot be created
    explicit OutputFile(std::string path, WriteOptions options = {});
    /// joins the output that another process of a job made for @p path, @p shared being its shareWithJob(): a
    /// file's temporary, to write this process's parts of it at the positions seek() gives, or an object's upload,
    /// to stream this process's shares of it (beginShare()). commit() then flushes and syncs them only (an upload:
    /// sends them, partsWritten() says which), and destroying it leaves the output to its maker, which publishes it
    /// once every part is written. Throws Error(Io) naming @p path when the temporary cannot be opened (the folder is
    /// not shared with that process).
    OutputFile(std::string path, const std::string& shared, WriteOptions options);
    ~OutputFile();
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    void write(const void* data, size_t size);
    /// zero bytes, for alignment padding
    void writeZeros(size_t size);
    /// appends [offset, offset+length) of the open file @p srcFd, copied inside the kernel (copy_file_range) when
    /// the file systems allow it, through a buffer otherwise
    void copyFrom(int srcFd, uint64_t offset, uint64_t length);
    uint64_t position() const { return m_position; }
    /// writes go on at @p position (the bytes in between belong to another writer or are written later). An
    /// object is written front to back: only beginShare() moves on there
    void seek(uint64_t position);

    /// what another process of a job needs to join this output: a file's temporary path; an object's upload id (the
    /// multipart upload starts now)
    std::string shareWithJob();
    /// the writes that follow begin at @p position, share @p index of the @p count that the processes of a job write
    /// in the output's order, @p bytes long (0: not known, the last share). A file: seek(). An object: the share's
    /// parts are numbered and sized apart from the other shares' (ObjectUpload::beginShare); every share but the last
    /// must be at least ObjectUpload's kMinPartBytes (kMinShareBytes)
    void beginShare(uint64_t position, size_t index, size_t count, uint64_t bytes);
    /// a joined temporary file whose maker is gone (killed: it can no longer remove it): removed, so that no
    /// partial output stays beside the destination. Objects: their maker's upload is never completed
    void abandonJoined();
    /// a joined object's parts, once committed, for its maker's addPartsWritten(); "" for a file
    const std::string& partsWritten() const { return m_partsWritten; }
    /// the maker of an object: parts another process wrote, listed when commit() completes the upload
    void addPartsWritten(const std::string& parts);
    /// the shortest share but the last of an object written by several processes (S3's smallest part)
    static const uint64_t kMinShareBytes;
    /// flush, fsync and rename over the destination (a joined temporary: flush and fsync)
    void commit();
    const std::string& path() const { return m_path; }
    const std::string& tempPath() const { return m_temp; }

private:
    void flushBuffer();
    void copyThroughBuffer(int srcFd, uint64_t offset, uint64_t length);
    std::string m_path;
    std::string m_temp;
    int m_fd = -1;
    uint64_t m_position = 0;
    bool m_committed = false;
    bool m_joined = false; ///< another process's temporary: not ours to rename or remove (but see abandonJoined)
    WriteOptions m_options;
    // small writes (headers, pickles) are batched; large blocks go straight to the kernel
    static constexpr size_t kBufferSize = 1 << 16;
    char* m_buffer = nullptr;
    size_t m_buffered = 0;
    std::unique_ptr<ObjectUpload> m_upload; ///< an object's output: streamed there, no local file
    std::string m_partsWritten;
};

} // namespace optscope
