// Test helper: a checkpoint generation's files damaged as a disk can damage
// them, so that a read meets a block whose checksum fails.
#ifndef PS_TESTS_UTIL_DAMAGED_FILES_H_
#define PS_TESTS_UTIL_DAMAGED_FILES_H_

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <vector>

namespace ps {

// The largest .sst file of the database folder `dir` (empty when it has
// none).
inline std::filesystem::path LargestSstFile(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> ssts;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".sst") ssts.push_back(e.path());
  }
  if (ssts.empty()) return {};
  return *std::max_element(ssts.begin(), ssts.end(),
                           [](const std::filesystem::path& a, const std::filesystem::path& b) {
                             return std::filesystem::file_size(a) < std::filesystem::file_size(b);
                           });
}

// Inverts 16 bytes at `fraction` of the file's length (twice: as it was).
inline void FlipBytes(const std::filesystem::path& file, double fraction) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(
      static_cast<double>(std::filesystem::file_size(file)) * fraction);
  char bytes[16];
  f.seekg(at);
  f.read(bytes, sizeof bytes);
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(at);
  f.write(bytes, sizeof bytes);
}

}  // namespace ps

#endif  // PS_TESTS_UTIL_DAMAGED_FILES_H_
