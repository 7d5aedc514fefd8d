// Fashion-MNIST reader: gzipped IDX files, verified, partitioned by rank.
//
// This is the one adapter for zlib and OpenSSL (MD5): no other file includes
// their headers. Every zlib or OpenSSL failure becomes a ps::Status here.
// All functions are thread-safe (no shared state).
#ifndef PS_WORKER_DATA_FASHION_MNIST_H_
#define PS_WORKER_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/key_range.h"
#include "common/status.h"

namespace ps {

// A decoded IDX file whose element type is unsigned byte (type code 0x08),
// the only type Fashion-MNIST uses.
struct IdxArray {
  uint32_t magic = 0;          // e.g. 2051 (images), 2049 (labels)
  std::vector<uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;   // row-major, product(dims) bytes
};

// What ReadIdxGz checks beyond a well-formed IDX stream.
struct IdxExpectation {
  // The IDX magic number; nullopt accepts any unsigned-byte magic.
  std::optional<uint32_t> magic;
  // The dimensions; empty accepts any.
  std::vector<uint32_t> dims;
  // Lower-case hex MD5 of the whole UNCOMPRESSED stream (header included);
  // nullopt skips the check (for small test files).
  std::optional<std::string> md5_hex;
  // Appended to every error message as the remedy, e.g. "reinstall
  // dataset-fashion-mnist".
  std::string remedy = "replace the file with an intact copy";
};

// Decompresses the gzip file at `path`, parses the IDX header and checks it
// against `expect`. Errors (each message names `path`, what is wrong, and
// `expect.remedy`):
//   NotFound       the file is missing.
//   FailedPrecondition  the file exists but cannot be opened (permissions).
//   DataLoss       not a gzip stream, truncated or corrupt gzip stream, a
//                  header that is not IDX unsigned-byte, a payload shorter or
//                  longer than the header's dimensions, a magic number or
//                  dimensions other than expected, an MD5 mismatch.
//   Internal       OpenSSL could not compute MD5 (e.g. a FIPS-only provider).
StatusOr<IdxArray> ReadIdxGz(const std::string& path, const IdxExpectation& expect);

// Lower-case hex MD5 of `bytes` via OpenSSL EVP. Internal on OpenSSL failure.
StatusOr<std::string> Md5Hex(const std::vector<uint8_t>& bytes);

enum class FashionMnistSplit { kTrain, kTest };

// One rank's share of a Fashion-MNIST split.
struct FashionMnistDataset {
  static constexpr uint32_t kRows = 28;
  static constexpr uint32_t kCols = 28;
  static constexpr uint32_t kPixels = kRows * kCols;  // 784 features
  static constexpr int32_t kNumClasses = 10;

  // num_samples() x kPixels, row-major, pixel/255 in [0, 1].
  std::vector<float> images;
  // num_samples() labels in 0..9.
  std::vector<int32_t> labels;
  // The samples of the split held here: sample i is split sample
  // range.begin + i, in file order.
  RowRange range;
  // Samples in the whole split (60000 train, 10000 test).
  uint64_t split_size = 0;

  size_t num_samples() const { return labels.size(); }
};

// Loads `split` from `dir` (the files train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz as installed by the Debian package
// dataset-fashion-mnist under /usr/share/datasets/fashion-mnist).
//
// Partition: CONTIGUOUS. Rank r of M holds split samples
// [floor(N*r/M), floor(N*(r+1)/M)) (ShardRows in common/key_range.h): ranks
// are disjoint, together cover every sample exactly once, and sizes differ by
// at most one. The files are already shuffled (upstream), so contiguous
// blocks are class-balanced to within sampling noise.
//
// Verifies both files in full (gzip CRC, IDX magic 2051/2049, 28x28, 60000 or
// 10000 samples, MD5 of the uncompressed contents against the official
// files) before returning. Errors: InvalidArgument when num_ranks == 0 or
// rank >= num_ranks; otherwise those of ReadIdxGz with the remedy "reinstall
// dataset-fashion-mnist (apt-get install --reinstall dataset-fashion-mnist)";
// DataLoss when a label is outside 0..9.
StatusOr<FashionMnistDataset> LoadFashionMnist(const std::string& dir, FashionMnistSplit split,
                                               uint32_t rank, uint32_t num_ranks);

// Samples of the training split (every worker's partition together).
inline constexpr uint32_t kFashionMnistTrainSamples = 60000;

// The directory the Debian package installs into.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

}  // namespace ps

#endif  // PS_WORKER_DATA_FASHION_MNIST_H_
