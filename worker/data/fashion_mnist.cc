#include "worker/data/fashion_mnist.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <utility>

namespace ps {
namespace {

// MD5 of the UNCOMPRESSED files (`zcat FILE | md5sum`), computed once from the
// files of the Debian package dataset-fashion-mnist
// 0.0~git20200523.55506a9-1 (upstream zalandoresearch/fashion-mnist). The
// upstream README lists MD5s of the .gz files instead; those cannot be used
// because Debian recompressed the files (gzip header timestamp 2020-06-05),
// which changes the compressed bytes but not the contents checked here.
constexpr char kTrainImagesMd5[] = "f4a8712d7a061bf5bd6d2ca38dc4d50a";
constexpr char kTrainLabelsMd5[] = "9018921c3c673c538a1fc5bad174d6f9";
constexpr char kTestImagesMd5[] = "8181f5470baa50b63fa0f6fddb340f0a";
constexpr char kTestLabelsMd5[] = "15d484375f8d13e6eb1aabb0c3f46965";

constexpr uint32_t kImagesMagic = 2051;  // 0x00000803: ubyte, 3 dims
constexpr uint32_t kLabelsMagic = 2049;  // 0x00000801: ubyte, 1 dim
constexpr uint32_t kTrainSize = kFashionMnistTrainSamples;
constexpr uint32_t kTestSize = 10000;
constexpr uint8_t kIdxUnsignedByte = 0x08;
constexpr char kReinstall[] =
    "reinstall dataset-fashion-mnist (apt-get install --reinstall dataset-fashion-mnist)";

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

struct EvpMdCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};

std::string Where(const std::string& path, std::string_view what, const IdxExpectation& expect) {
  std::string msg = path;
  msg += ": ";
  msg += what;
  msg += "; ";
  msg += expect.remedy;
  return msg;
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::string DimsString(const std::vector<uint32_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) s += "x";
    s += std::to_string(dims[i]);
  }
  return s.empty() ? "(none)" : s;
}

// The whole decompressed stream. zlib's gzread silently passes non-gzip
// input through and reports a truncated stream only via gzerror, so both
// are checked explicitly.
StatusOr<std::vector<uint8_t>> ReadGzFile(const std::string& path, const IdxExpectation& expect) {
  errno = 0;
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (f == nullptr) {
    const int err = errno;
    std::string why = "cannot open";
    if (err != 0) why += std::string(": ") + std::strerror(err);
    if (err == ENOENT || err == 0) return NotFoundError(Where(path, why, expect));
    return FailedPreconditionError(Where(path, why, expect));
  }
  gzbuffer(f.get(), 1 << 17);
  std::vector<uint8_t> out;
  constexpr size_t kChunk = 1 << 20;
  while (true) {
    const size_t old_size = out.size();
    out.resize(old_size + kChunk);
    const int n = gzread(f.get(), out.data() + old_size, static_cast<unsigned>(kChunk));
    if (n < 0) {
      int errnum = Z_OK;
      const char* zmsg = gzerror(f.get(), &errnum);
      return DataLossError(
          Where(path, std::string("corrupt gzip stream (zlib: ") + zmsg + ")", expect));
    }
    out.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
  }
  int errnum = Z_OK;
  const char* zmsg = gzerror(f.get(), &errnum);
  if (errnum != Z_OK) {
    return DataLossError(
        Where(path, std::string("truncated or corrupt gzip stream (zlib: ") + zmsg + ")", expect));
  }
  if (out.empty() || gzdirect(f.get()) == 1) {
    return DataLossError(Where(path, "not a gzip stream", expect));
  }
  return out;
}

}  // namespace

StatusOr<std::string> Md5Hex(const std::vector<uint8_t>& bytes) {
  std::unique_ptr<EVP_MD_CTX, EvpMdCtxFree> ctx(EVP_MD_CTX_new());
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (ctx == nullptr || EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr) != 1 ||
      EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1 ||
      EVP_DigestFinal_ex(ctx.get(), digest, &len) != 1) {
    return InternalError(
        "OpenSSL could not compute MD5 (EVP_md5 unavailable, e.g. a FIPS-only provider); "
        "enable the default provider");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    hex += kHex[digest[i] >> 4];
    hex += kHex[digest[i] & 0xf];
  }
  return hex;
}

StatusOr<IdxArray> ReadIdxGz(const std::string& path, const IdxExpectation& expect) {
  PS_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadGzFile(path, expect));

  if (bytes.size() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != kIdxUnsignedByte ||
      bytes[3] == 0) {
    return DataLossError(Where(path,
                               "bad IDX magic number (want 00 00 08 <ndims>, an unsigned-byte "
                               "IDX file)",
                               expect));
  }
  IdxArray idx;
  idx.magic = BigEndian32(bytes.data());
  if (expect.magic.has_value() && idx.magic != *expect.magic) {
    return DataLossError(Where(path,
                               "bad IDX magic number " + std::to_string(idx.magic) + ", want " +
                                   std::to_string(*expect.magic),
                               expect));
  }
  const size_t ndims = bytes[3];
  const size_t header = 4 + 4 * ndims;
  if (bytes.size() < header) {
    return DataLossError(Where(path,
                               "IDX header cut short: " + std::to_string(bytes.size()) +
                                   " bytes, header needs " + std::to_string(header),
                               expect));
  }
  uint64_t elements = 1;
  for (size_t i = 0; i < ndims; ++i) {
    idx.dims.push_back(BigEndian32(bytes.data() + 4 + 4 * i));
    // Each factor is < 2^32, so stop before the product could wrap.
    if (elements > (uint64_t{1} << 40)) {
      return DataLossError(Where(path, "IDX dimensions implausibly large", expect));
    }
    elements *= idx.dims.back();
  }
  if (!expect.dims.empty() && idx.dims != expect.dims) {
    return DataLossError(
        Where(path, "IDX dimensions " + DimsString(idx.dims) + ", want " + DimsString(expect.dims),
              expect));
  }
  const uint64_t payload = bytes.size() - header;
  if (payload != elements) {
    return DataLossError(Where(path,
                               "IDX payload is " + std::to_string(payload) +
                                   " bytes but dimensions " + DimsString(idx.dims) + " need " +
                                   std::to_string(elements) +
                                   (payload < elements ? " (file truncated)" : " (trailing data)"),
                               expect));
  }
  if (expect.md5_hex.has_value()) {
    PS_ASSIGN_OR_RETURN(std::string md5, Md5Hex(bytes));
    if (md5 != *expect.md5_hex) {
      return DataLossError(Where(path,
                                 "MD5 of uncompressed contents is " + md5 + ", want " +
                                     *expect.md5_hex + " (corrupt or not the expected file)",
                                 expect));
    }
  }
  bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
  idx.data = std::move(bytes);
  return idx;
}

StatusOr<FashionMnistDataset> LoadFashionMnist(const std::string& dir, FashionMnistSplit split,
                                               uint32_t rank, uint32_t num_ranks) {
  if (num_ranks == 0 || rank >= num_ranks) {
    return InvalidArgumentError("LoadFashionMnist: rank " + std::to_string(rank) + " of " +
                                std::to_string(num_ranks) +
                                " ranks is impossible; pass num_ranks >= 1 and rank < num_ranks");
  }
  const bool train = split == FashionMnistSplit::kTrain;
  const uint32_t n = train ? kTrainSize : kTestSize;
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");

  IdxExpectation labels_expect;
  labels_expect.magic = kLabelsMagic;
  labels_expect.dims = {n};
  labels_expect.md5_hex = train ? kTrainLabelsMd5 : kTestLabelsMd5;
  labels_expect.remedy = kReinstall;
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  PS_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxGz(labels_path, labels_expect));

  IdxExpectation images_expect;
  images_expect.magic = kImagesMagic;
  images_expect.dims = {n, FashionMnistDataset::kRows, FashionMnistDataset::kCols};
  images_expect.md5_hex = train ? kTrainImagesMd5 : kTestImagesMd5;
  images_expect.remedy = kReinstall;
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  PS_ASSIGN_OR_RETURN(IdxArray images, ReadIdxGz(images_path, images_expect));

  // Guaranteed by the expectations above; kept so a future relaxation of
  // them cannot pair images with the wrong labels.
  if (images.dims[0] != labels.dims[0]) {
    return DataLossError(images_path + " holds " + std::to_string(images.dims[0]) + " images but " +
                         labels_path + " holds " + std::to_string(labels.dims[0]) + " labels; " +
                         kReinstall);
  }

  FashionMnistDataset ds;
  ds.split_size = n;
  ds.range = ShardRows(n, num_ranks, rank);
  const size_t count = ds.range.size();
  ds.labels.resize(count);
  ds.images.resize(count * FashionMnistDataset::kPixels);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t global = ds.range.begin + i;
    const uint8_t label = labels.data[global];
    if (label >= FashionMnistDataset::kNumClasses) {
      return DataLossError(labels_path + ": label " + std::to_string(label) + " of sample " +
                           std::to_string(global) + " is outside 0..9; " + kReinstall);
    }
    ds.labels[i] = label;
    const uint8_t* src = images.data.data() + global * FashionMnistDataset::kPixels;
    float* dst = ds.images.data() + i * FashionMnistDataset::kPixels;
    for (uint32_t p = 0; p < FashionMnistDataset::kPixels; ++p) {
      dst[p] = static_cast<float>(src[p]) / 255.0f;  // exact at 0 and 255
    }
  }
  return ds;
}

}  // namespace ps
