// SPDX-License-Identifier: GPL-3.0-or-later
#include "optscope/tensor/chunk_reader.h"
#include "optscope/base/error.h"
#include "optscope/io/byte_source.h"
#include "optscope/io/storage.h"
#include "optscope/pickle/torch_save_archive.h"

#include <algorithm>
#include <cstring>

namespace optscope {

namespace {

/// flips the sign bit of the float of @p width bytes at @p p (little- or big-endian): IEEE negation, NaN included
void flipSign(uint8_t* p, size_t width, bool bigEndian)
{
    p[bigEndian ? 0 : width - 1] ^= 0x80;
}

bool isBf16Nan(const uint8_t* p, bool bigEndian)
{
    const unsigned bits = unsigned(p[bigEndian ? 0 : 1]) << 8 | p[bigEndian ? 1 : 0];
    return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
}

bool isF16Nan(const uint8_t* p, bool bigEndian)
{
    const unsigned bits = unsigned(p[bigEndian ? 0 : 1]) << 8 | p[bigEndian ? 1 : 0];
    return (bits & 0x7c00) == 0x7c00 && (bits & 0x03ff) != 0;
}

/// 0.0 - x of the float64 at @p p (a zero becomes +0, unlike a sign flip)
void subtractFromZero(uint8_t* p, bool bigEndian)
{
    uint8_t b[8];
    for (size_t i = 0; i < 8; ++i)
        b[i] = p[bigEndian ? 7 - i : i];
    double v;
    std::memcpy(&v, b, 8);
    v = 0.0 - v;
    std::memcpy(b, &v, 8);
    for (size_t i = 0; i < 8; ++i)
        p[bigEndian ? 7 - i : i] = b[i];
}

/// two's complement negation (wrapping, as torch.neg of int8 -128 and of uint8 200 gives -128 and 56)
void negateInteger(uint8_t* p, size_t width, bool bigEndian)
{
    uint64_t v = 0;
    for (size_t i = 0; i < width; ++i)
        v |= uint64_t(p[bigEndian ? width - 1 - i : i]) << (8 * i);
    v = ~v + 1;
    for (size_t i = 0; i < width; ++i)
        p[bigEndian ? width - 1 - i : i] = static_cast<uint8_t>(v >> (8 * i));
}

/// the values torch.load gives a tensor saved with lazy @p bits (lazyBitsUnreadable(bits, d.dtype) is ""): its
/// storage copied, the bits applied to every element of it (so the view's offset and strides stay as they are)
void applyLazyBits(ChunkData& d, uint8_t bits)
{
    const size_t width = d.elementSize();
    const uint64_t n = d.storageBytes;
    std::shared_ptr<uint8_t[]> copy(new uint8_t[std::max<uint64_t>(n, 1)]);
    if (d.deferred) {
        d.file->copyOut(d.storageAt, n, copy.get()); // located only: fetched now, as every element is rewritten
        d.deferred = false;
    } else if (n) {
        std::memcpy(copy.get(), d.storage, n);
    }
    const bool complex = d.dtype == DType::Complex32 || d.dtype == DType::Complex64 || d.dtype == DType::Complex128;
    const bool isFloat = d.dtype == DType::Float64 || d.dtype == DType::Float32 || d.dtype == DType::Float16
        || d.dtype == DType::BFloat16;
    uint8_t* p = copy.get();
    for (uint64_t i = 0; i + width <= n; i += width, p += width) {
        if (complex) {
            // neg first, then conj (the imaginary part's sign), as torch 2.6 resolves both; its complex128 neg
            // subtracts from zero (a zero stays +0), the others flip signs
            const size_t half = width / 2;
            if (bits & kLazyNeg) {
                if (d.dtype == DType::Complex128) {
                    subtractFromZero(p, d.bigEndian);
                    subtractFromZero(p + half, d.bigEndian);
                } else {
                    flipSign(p, half, d.bigEndian);
                    flipSign(p + half, half, d.bigEndian);
                }
            }
            if (bits & kLazyConj) flipSign(p + half, half, d.bigEndian);
        } else if (d.dtype == DType::BFloat16 && isBf16Nan(p, d.bigEndian)) {
            // torch negates bfloat16 through float32, and its conversion back makes every NaN 0x7fc0
            p[d.bigEndian ? 0 : 1] = 0x7f;
            p[d.bigEndian ? 1 : 0] = 0xc0;
        } else if (d.dtype == DType::Float16 && isF16Nan(p, d.bigEndian)) {
            // float16 too goes through float32: the sign flips, the payload stays, and the way back sets the quiet bit
            flipSign(p, width, d.bigEndian);
            p[d.bigEndian ? 0 : 1] |= 0x02;
        } else if (isFloat) {
            flipSign(p, width, d.bigEndian);
        } else {
            negateInteger(p, width, d.bigEndian);
        }
    }
    d.owned = copy;
    d.storage = copy.get();
    d.lazyBits = 0;
}

} // namespace

int64_t ChunkData::numel() const
{
    int64_t n = 1;
    for (auto s : sizes)
        n *= s;
    return n;
}

bool ChunkData::isContiguous() const
{
    if (numel() == 0) return true;
    int64_t expected = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
        if (sizes[d] != 1 && strides[d] != expected) return false;
        expected *= sizes[d];
    }
    return true;
}

ChunkData ChunkReader::resolve(
    const Checkpoint& checkpoint, const Entry& entry, const TensorChunk& chunk, bool deferRemoteBytes)
{
    ChunkData d = resolveAsStored(checkpoint, entry, chunk, deferRemoteBytes);
    const std::string where
        = d.file->path() + "[" + std::to_string(chunk.source.offset) + "+" + std::to_string(chunk.source.length) + "]";
    if (d.dtype != entry.tensor->dtype)
        throw Error(ErrorKind::Format, where,
            "DCP item of '" + entry.key + "' stores " + std::string(dtypeName(d.dtype)) + " but the metadata says "
                + std::string(dtypeName(entry.tensor->dtype)));
    if (d.sizes != chunk.sizes)
        throw Error(ErrorKind::Format, where,
            "DCP item of '" + entry.key + "' stores shape " + shapeText(d.sizes) + " but the metadata chunk has "
                + shapeText(chunk.sizes));
    if (const uint8_t bits = d.lazyBits | entry.tensor->lazyBits) {
        if (!lazyBitsUnreadable(bits, d.dtype).empty())
            throw Error(ErrorKind::Unsupported, where, "'" + entry.key + "': " + lazyBitText(bits, d.dtype));
        applyLazyBits(d, bits);
    }
    return d;
}

namespace {

/// where a chunk's storage bytes are: in the file's map (local, zero-copy), or, from a remote object, in a copy of
/// their own, so that the object's memory goes as soon as they are copied (ByteSource::copyOut)
const uint8_t* locateStorage(ChunkData& d, uint64_t offset, uint64_t length, bool defer)
{
    constexpr uint64_t kMaxCopy = uint64_t(1) << 30; // beyond: kept in the object's map (correct, not bounded)
    d.storageAt = offset;
    if (d.file->isRemote() && defer) {
        d.deferred = true;
        return d.file->bytes(offset, 0); // where the bytes will be; the caller fetches the rows it reads
    }
    if (!d.file->isRemote() || length == 0 || length > kMaxCopy) return d.file->bytes(offset, length);
    std::shared_ptr<uint8_t[]> copy(new uint8_t[length]);
    d.file->copyOut(offset, length, copy.get());
    d.owned = copy;
    return copy.get();
}

} // namespace

uint64_t ChunkReader::prefetch(const Checkpoint& checkpoint, const TensorChunk& chunk, uint64_t maxBytes)
{
    const ChunkSource& src = chunk.source;
    if (src.file.empty() || src.length == 0 || !isUrl(checkpoint.files->rootDir())) return 0;
    constexpr uint64_t kZipIndex = 64u << 10;
    std::shared_ptr<const ByteSource> file;
    try {
        file = checkpoint.files->open(src.file);
    } catch (const Error&) {
        return 0;
    }
    if (src.offset > file->size() || src.length > file->size() - src.offset) return 0;
    const uint64_t head = std::min(src.length, maxBytes);
    file->prefetch(src.offset, head);
    if (src.kind == ChunkSource::Kind::TorchSaveBlob && head < src.length) {
        const uint64_t tail = std::min(kZipIndex, src.length - head);
        file->prefetch(src.offset + src.length - tail, tail);
        return head + tail;
    }
    return head;
}

ChunkData ChunkReader::resolveAsStored(
    const Checkpoint& checkpoint, const Entry& entry, const TensorChunk& chunk, bool deferRemoteBytes, bool keepItem)
{
    const ChunkSource& src = chunk.source;
    if (src.file.empty())
        throw Error(ErrorKind::Format, checkpoint.path, "chunk of '" + entry.key + "' has no known location");
    auto file = checkpoint.files->open(src.file);
    const std::string where = file->path() + "[" + std::to_string(src.offset) + "+" + std::to_string(src.length) + "]";
    if (src.offset > file->size() || src.length > file->size() - src.offset)
        throw Error(ErrorKind::Truncated, file->path(),
            "chunk of '" + entry.key + "' at [" + std::to_string(src.offset) + ", +" + std::to_string(src.length)
                + ") lies past the end of the file (" + std::to_string(file->size()) + " bytes)");
    ChunkData d;
    d.file = file;
    d.dtype = entry.tensor->dtype;
    if (src.kind == ChunkSource::Kind::StorageRecord) {
        d.storage = locateStorage(d, src.offset, src.length, deferRemoteBytes);
        d.storageBytes = src.length;
        d.sizes = chunk.sizes;
        d.strides = src.strides;
        d.storageOffset = src.storageOffset;
        d.bigEndian = src.bigEndian;
        if (d.strides.size() != d.sizes.size())
            throw Error(ErrorKind::Format, where, "chunk of '" + entry.key + "' has strides of the wrong rank");
        return d;
    }
    // an embedded torch.save archive holding exactly this chunk
    PyArena arena;
    TorchSaveArchive ar = [&] {
        try {
            return readTorchSaveArchive(file, src.offset, src.length, arena, where, {}, deferRemoteBytes);
        } catch (const Error& e) {
            if (e.kind() == ErrorKind::Cancelled) throw;
            // which tensor the damaged item holds, beside where it is
            throw Error(e.kind(), e.file(), "DCP item of '" + entry.key + "': " + e.detail(), e.offset());
        }
    }();
    const PyValue* root = ar.root;
    if (!root || root->kind != PyKind::Tensor || !root->tensor->storage)
        throw Error(ErrorKind::Format, where,
            "DCP item of '" + entry.key + "' does not hold a tensor (found " + pyRepr(root, 60) + ")");
    const PyTensorInfo& t = *root->tensor;
    const PyStorageInfo& rec = torchSaveStorageOf(t, where);
    checkTorchSaveTensorExtent(t, rec.recordLength, where);
    d.dtype = t.dtype;
    d.storage = locateStorage(d, rec.recordOffset, rec.recordLength, deferRemoteBytes);
    d.storageBytes = rec.recordLength;
    d.sizes = t.sizes;
    d.strides = t.strides;
    d.storageOffset = t.storageOffset;
    d.bigEndian = ar.bigEndian;
    d.lazyBits = static_cast<uint8_t>((t.conj ? kLazyConj : 0) | (t.neg ? kLazyNeg : 0));
    if (!keepItem) finishItem(d, chunk);
    return d;
}

void ChunkReader::finishItem(const ChunkData& d, const TensorChunk& chunk)
{
    if (chunk.source.kind != ChunkSource::Kind::StorageRecord && d.file && d.file->isRemote() && d.pointsIntoNoFile())
        d.file->finished(chunk.source.offset, chunk.source.length);
}

void ChunkReader::itemRead(const Checkpoint& checkpoint, const TensorChunk& chunk) noexcept
{
    const ChunkSource& src = chunk.source;
    if (src.kind == ChunkSource::Kind::StorageRecord || src.file.empty() || src.length == 0) return;
    try {
        const auto file = checkpoint.files->open(src.file);
        if (file->isRemote()) file->finished(src.offset, src.length);
    } catch (...) {
        // not open: nothing of it is held
    }
}

} // namespace optscope
