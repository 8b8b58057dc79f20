// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/model/checkpoint.h"
#include "optscope/base/error.h"
#include "optscope/io/mapped_file.h"
#include "optscope/io/storage.h"
#include "optscope/io/zip_inflate.h"

#include <algorithm>
#include <set>

namespace optscope {

// 100k entries of four path elements each: the 100 MiB target for a torch.save of 100k keys rests on these sizes
static_assert(sizeof(void*) != 8 || sizeof(KeyPathElem) <= 48, "KeyPathElem grew past 48 bytes");
static_assert(sizeof(void*) != 8 || sizeof(Entry) <= 192, "Entry grew past 192 bytes");

const char* checkpointFormatName(CheckpointFormat format)
{
    switch (format) {
    case CheckpointFormat::TorchSave:
        return "torch_save";
    case CheckpointFormat::Dcp:
        return "dcp";
    case CheckpointFormat::Safetensors:
        return "safetensors";
    case CheckpointFormat::HfTrainer:
        return "hf_trainer";
    case CheckpointFormat::DeepSpeedZero:
        return "deepspeed_zero";
    case CheckpointFormat::DeepSpeedUniversal:
        return "deepspeed_universal";
    case CheckpointFormat::MegatronDist:
        return "megatron_dist";
    case CheckpointFormat::TorchSaveRanks:
        return "torch_save_ranks";
    }
    return "torch_save";
}

std::string shapeText(const std::vector<int64_t>& shape)
{
    std::string t = "[";
    for (size_t i = 0; i < shape.size(); ++i)
        t += (i ? ", " : "") + std::to_string(shape[i]);
    return t + "]";
}

std::string TensorEntry::withoutDataText() const
{
    return "the tensor " + shapeText(shape) + " was saved without data ("
        + (subclass.empty() ? std::string("meta device") : subclass.str())
        + "): torch.load gives a meta tensor, with no values to load into a model or optimizer";
}

bool isDTensorSubclass(std::string_view subclass)
{
    const std::string_view suffix = ".DTensor";
    return subclass.size() > suffix.size() && subclass.substr(subclass.size() - suffix.size()) == suffix;
}

std::string lazyBitsUnreadable(uint8_t lazyBits, DType dtype)
{
    const bool complex = dtype == DType::Complex32 || dtype == DType::Complex64 || dtype == DType::Complex128;
    if ((lazyBits & kLazyConj) && !complex)
        return "a conj bit on a " + std::string(dtypeName(dtype)) + " tensor (conj() sets it on complex tensors only)";
    if (!(lazyBits & kLazyNeg) || complex) return {};
    switch (dtype) {
    case DType::Float64:
    case DType::Float32:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Int8:
    case DType::Int16:
    case DType::Int32:
    case DType::Int64:
    case DType::UInt8:
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
        return {};
    default:
        // what torch 2.6 says when the loaded tensor's bit is resolved (values printed, compared, copied)
        return "PyTorch cannot resolve a neg bit on " + std::string(dtypeName(dtype)) + " either (\"neg_cpu\" not "
            + "implemented), so the tensor torch.load gives cannot be read";
    }
}

std::string lazyBitText(uint8_t lazyBits, DType dtype)
{
    const std::string view = lazyBits == (kLazyConj | kLazyNeg) ? "conj() and neg view (its conj and neg bits are"
        : lazyBits & kLazyConj                                  ? "conj() view (its conj bit is"
                                                                : "neg view (its neg bit is";
    const std::string saved = "saved from a lazy " + view + " set): torch.load applies the bit to the stored bytes";
    if (const std::string why = lazyBitsUnreadable(lazyBits, dtype); !why.empty())
        return saved + "; its values are not read: " + why;
    return saved
        + ", and so does every read here (statistics, hashes, diff); what gather, fix and reshard write holds "
          "the values resolved, without the bit";
}

std::string joinKeyPath(const KeyPath& path)
{
    std::string key;
    for (size_t i = 0; i < path.size(); ++i) {
        if (i) key += '.';
        key += path[i].key;
    }
    return key;
}

int64_t TensorEntry::numel() const
{
    int64_t n = 1;
    for (auto s : shape)
        n *= s;
    return n;
}

uint64_t TensorEntry::nbytes() const
{
    return static_cast<uint64_t>(numel()) * dtypeSize(dtype);
}

std::vector<int> TensorEntry::ranks() const
{
    std::vector<int> r;
    for (size_t i = 0; i < chunks.size(); ++i)
        r.push_back(chunks.rank(i));
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    return r;
}

namespace {

std::atomic<size_t> g_localFilesOpen {0}; ///< CheckpointFiles' local files open, every checkpoint's

} // namespace

CheckpointFiles::CheckpointFiles(std::string rootDir, size_t maxOpen)
    : m_root(std::move(rootDir))
    , m_maxOpen(maxOpen ? maxOpen : openFileBudget())
{ }

CheckpointFiles::~CheckpointFiles()
{
    g_localFilesOpen -= m_lru.size();
}

/// a source the budget of open files may close: a local file, which opening its path again brings back as it was
/// (checked then). Not a remote object (it holds no descriptor), nor an inflated copy of one (opening its URL again
/// would give the deflated archive): neither has a detached check
static bool closable(const ByteSource& f)
{
    return !f.isRemote() && f.detachedCheck();
}

std::string CheckpointFiles::absolute(const std::string& relative) const
{
    if (!relative.empty() && relative.front() == '/') return relative;
    if (m_root.empty()) return relative;
    return childLocation(m_root, relative);
}

std::shared_ptr<const ByteSource> CheckpointFiles::open(const std::string& relative) const
{
    bool closedBefore = false;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        auto it = m_files.find(relative);
        if (it != m_files.end()) {
            if (it->second.lru != m_lru.end()) m_lru.splice(m_lru.end(), m_lru, it->second.lru); // used last now
            return it->second.source;
        }
        closedBefore = m_closed.count(relative) > 0;
    }
    // the checkpoint's files only: a path its metadata names may lead anywhere (statInside). A file closed to stay
    // within the budget was looked at then; that it is the same file now, wherever its path leads, is checked below
    if (!m_root.empty() && !closedBefore) {
        const MemberStat m = statInside(m_root, relative);
        if (m.kind != MemberStat::Regular && m.kind != MemberStat::Missing)
            throw Error(ErrorKind::Io, absolute(relative), m.what + ": not read");
    }
    auto f = openByteSource(absolute(relative));
    std::lock_guard<std::mutex> lock(m_mutex);
    if (auto e = m_expectedSizes.find(relative); e != m_expectedSizes.end() && e->second != f->size())
        throw Error(ErrorKind::Io, f->path(),
            "changed while being read (was " + std::to_string(e->second) + " bytes, now " + std::to_string(f->size())
                + " bytes)");
    if (auto closed = m_closed.find(relative); closed != m_closed.end()) {
        closed->second(); // read before, closed since: the same file still
        m_closed.erase(closed);
    }
    const bool local = closable(*f); // a local file counts against the budget (a remote one holds no descriptor)
    auto [at, added] = m_files.emplace(relative, OpenFile {std::move(f), m_lru.end()});
    if (!added) return at->second.source; // another thread opened it meanwhile
    auto source = at->second.source;
    if (local) {
        at->second.lru = m_lru.insert(m_lru.end(), &at->first);
        if (++g_localFilesOpen > m_maxOpen && !m_keepOpen.load() && m_lru.size() > 1) {
            // close the least recently opened local file (its readers keep it until they are done)
            const auto oldest = m_files.find(*m_lru.front());
            if (auto c = oldest->second.source->detachedCheck()) m_closed[oldest->first] = std::move(c);
            m_lru.pop_front();
            m_files.erase(oldest);
            --g_localFilesOpen;
        }
    }
    return source;
}

void CheckpointFiles::expectSize(const std::string& relative, uint64_t size) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_expectedSizes.emplace(relative, size);
}

void CheckpointFiles::checkUnchanged() const
{
    std::vector<std::shared_ptr<const ByteSource>> files;
    std::vector<std::function<void()>> closed;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        for (const auto& [name, f] : m_files)
            files.push_back(f.source);
        for (const auto& [name, check] : m_closed)
            closed.push_back(check);
    }
    const bool held = m_held.load();
    const auto check = [held](const ByteSource& f) { held ? f.checkContentUnchanged() : f.checkUnchanged(); };
    // faulted ones first: their message says what the reader met
    for (const auto& f : files)
        if (f->faulted()) check(*f);
    for (const auto& f : files)
        check(*f);
    for (const auto& c : closed)
        c();
}

void CheckpointFiles::hold() const
{
    std::vector<std::string> unopened;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        for (const auto& [name, size] : m_expectedSizes)
            if (!m_files.count(name) && !isUrl(absolute(name))) unopened.push_back(name);
        // within the budget only: a step of more files than the process may open (a watched 4,096-rank run) keeps
        // what fits, and the rest is checked by path like any closed file (checkUnchanged: "removed while being
        // read" once the run rotates it away, never a silent mix)
        if (g_localFilesOpen.load() + unopened.size() + m_closed.size() > m_maxOpen) {
            m_held.store(true);
            return;
        }
    }
    m_keepOpen.store(true); // every file from now on, and those opened here
    for (const auto& name : unopened) {
        try {
            open(name);
        } catch (const Error&) {
            // gone already or not a file: its first read says so
        }
    }
    m_held.store(true);
}

void CheckpointFiles::checkFaults() const
{
    const uint64_t n = MappedFile::faultCount();
    if (n == m_faultsSeen.load(std::memory_order_relaxed)) return;
    std::vector<std::shared_ptr<const ByteSource>> files;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        for (const auto& [name, f] : m_files)
            files.push_back(f.source);
    }
    for (const auto& f : files)
        if (f->faulted()) m_held.load() ? f->checkContentUnchanged() : f->checkUnchanged();
    m_faultsSeen.store(n, std::memory_order_relaxed); // the faults were another checkpoint's
}

std::vector<std::string> CheckpointFiles::knownFiles() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    std::vector<std::string> out;
    out.reserve(m_files.size() + m_closed.size() + m_expectedSizes.size());
    for (const auto& [name, f] : m_files)
        out.push_back(f.source->path());
    for (const auto& [name, check] : m_closed)
        if (!m_files.count(name)) out.push_back(absolute(name));
    for (const auto& [name, size] : m_expectedSizes)
        if (!m_files.count(name) && !m_closed.count(name)) out.push_back(absolute(name));
    return out;
}

std::shared_ptr<const ByteSource> CheckpointFiles::openArchive(const std::string& relative) const
{
    auto file = open(relative);
    if (!file->isRemote()) return file; // a local one is inflated when opened (openByteSource)
    auto inflated = inflatedIfCompressed(file);
    if (inflated == file) return file;
    std::lock_guard<std::mutex> lock(m_mutex);
    if (auto it = m_files.find(relative); it != m_files.end()) it->second.source = inflated; // never closed: as remote
    return inflated;
}

void CheckpointFiles::add(const std::string& relative, std::shared_ptr<const ByteSource> file) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    const bool local = closable(*file);
    auto [at, added] = m_files.emplace(relative, OpenFile {std::move(file), m_lru.end()});
    if (added && local) {
        at->second.lru = m_lru.insert(m_lru.end(), &at->first);
        ++g_localFilesOpen;
    }
}

const Entry* Checkpoint::find(std::string_view key) const
{
    if (m_index.empty()) return nullptr;
    const size_t mask = m_index.size() - 1;
    const uint64_t hash = std::hash<std::string_view>()(key);
    const uint64_t tag = hash >> 32 << 32;
    for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
        const uint64_t at = m_index[slot];
        if (at == 0) return nullptr;
        if ((at & ~uint64_t(0xffffffff)) == tag && entries[(at & 0xffffffff) - 1].key == key)
            return &entries[(at & 0xffffffff) - 1];
    }
}

const CompanionFile* Checkpoint::companionOf(const Entry& e) const
{
    if (companionFiles.empty() || e.path.empty()) return nullptr;
    for (const auto& c : companionFiles)
        if (std::find(c.keys.begin(), c.keys.end(), e.path.front().key.view()) != c.keys.end()) return &c;
    return nullptr;
}

std::vector<size_t> Checkpoint::buildIndex()
{
    if (entries.size() >= UINT32_MAX / 2) throw Error(ErrorKind::Limit, path, "more than 2^31 entries");
    size_t capacity = 16;
    while (capacity < 2 * entries.size())
        capacity *= 2;
    m_index.assign(capacity, 0);
    const size_t mask = capacity - 1;
    std::vector<size_t> duplicates;
    // the keys' hashes a block ahead, their slots asked for from memory (a table of 1.5M keys is 32 MB: each insert
    // waited for its slot's cache line)
    constexpr size_t kAhead = 32;
    uint64_t hashes[kAhead];
    for (size_t i = 0; i < entries.size(); ++i) {
        if (i % kAhead == 0)
            for (size_t j = i; j < std::min(i + kAhead, entries.size()); ++j) {
                hashes[j - i] = std::hash<std::string_view>()(entries[j].key);
                __builtin_prefetch(&m_index[hashes[j - i] & mask], 1);
                if (j + kAhead < entries.size()) __builtin_prefetch(entries[j + kAhead].key.data()); // the next block's
            }
        const std::string& key = entries[i].key;
        const uint64_t hash = hashes[i % kAhead];
        const uint64_t tag = hash >> 32 << 32;
        for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
            uint64_t& at = m_index[slot];
            if (at == 0) {
                at = tag | static_cast<uint64_t>(i + 1);
                break;
            }
            if ((at & ~uint64_t(0xffffffff)) == tag && entries[(at & 0xffffffff) - 1].key == key) {
                duplicates.push_back(i); // the first wins
                break;
            }
        }
    }
    return duplicates;
}

uint64_t Checkpoint::tensorBytes() const
{
    uint64_t n = 0;
    for (const auto& e : entries)
        if (e.isTensor()) n += e.tensor->nbytes();
    return n;
}

std::vector<int> Checkpoint::ranks() const
{
    constexpr size_t kDense = size_t(1) << 20; // ranks below this in a bitmap; a hostile file's huge ones in a set
    std::vector<bool> seen; // by rank + 1
    std::set<int> sparse;
    for (const auto& e : entries)
        for (size_t i = 0; i < e.tensor->chunks.size(); ++i) {
            const auto at = static_cast<size_t>(std::max(e.tensor->chunks.rank(i), -1) + 1);
            if (at >= kDense) {
                sparse.insert(static_cast<int>(at - 1));
                continue;
            }
            if (at >= seen.size()) seen.resize(std::max(at + 1, 2 * seen.size()), false);
            seen[at] = true;
        }
    std::vector<int> out;
    for (size_t at = 0; at < seen.size(); ++at)
        if (seen[at]) out.push_back(static_cast<int>(at) - 1);
    out.insert(out.end(), sparse.begin(), sparse.end());
    return out;
}

size_t Checkpoint::tensorCount() const
{
    return static_cast<size_t>(
        std::count_if(entries.begin(), entries.end(), [](const Entry& e) { return e.isTensor(); }));
}

bool Checkpoint::hasErrors() const
{
    return std::any_of(warnings.begin(), warnings.end(), [](const CheckpointWarning& w) { return w.isError; });
}

std::string Checkpoint::missingDataReason() const
{
    for (const CheckpointWarning& w : warnings)
        if (w.isError && readerCodeInfo(w.code).contentMissing) return w.message;
    return {};
}

} // namespace optscope
