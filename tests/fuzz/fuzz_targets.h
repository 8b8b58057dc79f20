// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once

// The bodies of the libFuzzer harnesses, shared by the fuzzers (fuzz_*.cpp, clang + libFuzzer) and by the
// regression test that replays tests/fuzz/regressions/<harness>/* under the normal build (GCC, ASan in build-asan).
//
// Contract checked by every harness: the core never crashes, hangs, leaks or throws anything but optscope::Error on
// any input; on success the result is consistent (records inside the archive, JSON that dumps, ...). A violation
// aborts (an uncaught exception or a failed check), which libFuzzer reports as a crash.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace optscope::fuzz {

/// What a harness made of an input: accepted (read as valid) or rejected with an optscope::Error.
enum class Outcome { Accepted, Rejected };

/// optscope::unpickle with a persistent loader that turns torch.save storage tuples into Storage values; then the
/// consumers of the value graph: flattenStateDict, valueToJson (dumped), pyRepr.
Outcome fuzzPickle(const uint8_t* data, size_t size);

/// ZipArchive::parse; then every record is looked up and its bytes read.
Outcome fuzzZip(const uint8_t* data, size_t size);

/// A torch.save file: the input is written to a file in a private temporary folder (in /dev/shm when it exists),
/// opened with openCheckpoint (TorchSaveReader: readArchive, flattening, checkpoint building), inspected
/// (inspect --json, dumped) and every tensor up to kMaxHashBytes is hashed (chunk resolution, assembly).
Outcome fuzzTorchSave(const uint8_t* data, size_t size);

/// A DCP folder packed into one input (see splitDcpInput): written to a private temporary folder, opened with
/// DcpReader::open through openCheckpoint, inspected and hashed like fuzzTorchSave.
Outcome fuzzDcp(const uint8_t* data, size_t size);
/// a .safetensors file: SafetensorsReader (header length, JSON header, tensor records) through openCheckpoint,
/// inspected, hashed and with statistics like fuzzTorchSave.
Outcome fuzzSafetensors(const uint8_t* data, size_t size);

/// An S3 XML answer (what a server or anything between it and us sends back), read as a ListObjectsV2 page
/// (parseListingPage), a ListMultipartUploads page (parseUploadsPage), both for the prefix kListingPrefix, and an
/// error (s3ErrorCode); every item or upload listed lies below the prefix.
Outcome fuzzS3Listing(const uint8_t* data, size_t size);
constexpr std::string_view kListingPrefix = "ckpt/step_1/";

/// A RemoteObject's block bookkeeping (BlockMap) driven by the input as a sequence of operations (claim a range,
/// settle a claim fetched or failed, give a range back), checked against a plain model after each: a claim takes
/// exactly the absent blocks of its range that are not skipped, in maximal runs; its parts cover exactly their bytes,
/// in order, none larger than the part size; waiting is said exactly when a block of the range is in flight; giving
/// back frees exactly the whole blocks inside the range.
Outcome fuzzBlockMap(const uint8_t* data, size_t size);

/// Tensors larger than this are not hashed by the harnesses: a few bytes of pickle can describe an expanded
/// (stride 0) tensor of terabytes, which is valid and would only make the fuzzer slow.
constexpr uint64_t kMaxHashBytes = 1u << 20;

/// The DCP input format: the .metadata bytes, then any number of files, each introduced by a line
/// "\n==> NAME\n" (kDcpFileMarker, the file name, a newline) and running to the next marker or the end. Names keep
/// only [A-Za-z0-9._-], must not start with '.', and are at most 64 characters; other parts are skipped.
constexpr std::string_view kDcpFileMarker = "\n==> ";
struct DcpFile
{
    std::string name;
    std::string_view bytes;
};
std::vector<DcpFile> splitDcpInput(std::string_view input);
/// the inverse, for making seeds: .metadata first, then the data files
std::string joinDcpInput(const std::vector<DcpFile>& files);

} // namespace optscope::fuzz
