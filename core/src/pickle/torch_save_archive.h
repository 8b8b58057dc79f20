// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// torch.save files, read without running Python.
//
// Zip format (PyTorch >= 1.6, the default), see zip_archive.h for the container:
//   <prefix>/data.pkl      the object, pickled (protocol 2 unless pickle_protocol= was given); each storage is a
//                          persistent id ('storage', StorageClass, key, location, numel) — numel in elements of the
//                          storage class's dtype (bytes for UntypedStorage)
//   <prefix>/data/<key>    raw storage bytes, numel * element size, in the writer's byte order
//   <prefix>/byteorder     "little" or "big" (>= 2.1; absent means little)
//   <prefix>/version       "3\n" (or .data/version); .format_version, .storage_alignment (>= 2.7)
// Tensors are REDUCE(torch._utils._rebuild_tensor_v2, (storage, storage_offset, size, stride, requires_grad,
// hooks[, metadata])) or _rebuild_tensor_v3 (+ dtype, for dtypes without a typed storage class). Parameters wrap
// them in _rebuild_parameter; DTensor/ShardedTensor go through _rebuild_from_type_v2 + _rebuild_wrapper_subclass.
//
// Legacy format (pre-1.6 or _use_new_zipfile_serialization=False): five pickles back to back — magic number
// 0x1950a86a20f9469cfc6c, protocol version 1001, sys_info {'little_endian': bool, ...}, the object (storage pids
// carry a 6th element, view_metadata), the list of storage keys — then for each key in that order an int64 element
// count followed by the storage bytes. The even older tar format (<= 0.3) is rejected.
//
// Failure semantics: a file that is not a torch.save archive, an archive whose records are missing, short or
// inconsistent, or a tensor that reaches past its storage throws Error naming the file and the byte offset.

#include "optscope/model/checkpoint.h"
#include "optscope/pickle/pickle_machine.h"

#include <memory>
#include <string>

namespace optscope {

class ByteSource;

/// One torch.save archive read into an inert value graph, with its storages located in the file.
struct TorchSaveArchive
{
    const PyValue* root = nullptr;
    std::string prefix; ///< zip prefix ("archive", "optim", ...); empty for the legacy format
    bool legacy = false;
    bool bigEndian = false;
    int pickleProtocol = 0;
    std::vector<PickleWarning> warnings;
};

/// Reads the archive in [offset, offset+length) of @p file into @p arena (which then keeps the file mapped).
/// @p displayName names the archive in errors ("ckpt/__0_0.distcp[4096+1244]"). @p storagesLater: the caller reads the
/// tensors' headers only (dtype, shape, where their bytes lie), so a remote archive's storages are not fetched with it
/// (one under 4 MiB is otherwise fetched whole, one request being cheaper than the two its directory needs; one
/// under 256 KiB still is).
TorchSaveArchive readTorchSaveArchive(const std::shared_ptr<const ByteSource>& file, uint64_t offset, uint64_t length,
    PyArena& arena, const std::string& displayName, const PickleLimits& limits = {}, bool storagesLater = false);
/// Asks @p file ahead (ByteSource::prefetch: a remote source starts fetching, a local one ignores it) for what
/// readTorchSaveArchive reads first of the archive in [offset, offset+length): its magic and data.pkl at the head, the
/// zip's end records at the tail. A reader that opens many archives in turn asks for the next ones' while it reads one.
void prefetchTorchSaveArchive(const ByteSource& file, uint64_t offset, uint64_t length);
/// The storage a tensor views, located in the archive; throws Error naming @p where if it has none or the archive
/// does not hold its bytes.
const PyStorageInfo& torchSaveStorageOf(const PyTensorInfo& t, const std::string& where);
/// Checks that a tensor's view lies inside its storage record; throws Error naming @p where otherwise.
void checkTorchSaveTensorExtent(const PyTensorInfo& t, uint64_t storageBytes, const std::string& where);

/// true if the bytes look like a torch.save file of either format (zip with a data.pkl, or the legacy magic)
bool looksLikeTorchSave(const uint8_t* data, uint64_t size);
/// the first bytes looksLikeTorchSave needs (a legacy file of pickle protocol 4 or 5 frames its magic: 22)
constexpr uint64_t kTorchSaveHeadBytes = 24;

} // namespace optscope
