// write_test_checkpoint DIR CLOCK SHARDS: writes the test checkpoint of
// tests/util/test_checkpoint.h (its exact formula values) into DIR with
// the real writer, for tests in other languages (tests/python/
// checkpoint_test.py). Exits 0 on success, 1 with the error on stderr.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/util/test_checkpoint.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: write_test_checkpoint DIR CLOCK SHARDS\n");
    return 2;
  }
  const ps::Status s = ps::WriteTestCheckpoint(argv[1], static_cast<uint32_t>(std::atoi(argv[3])),
                                               std::atoll(argv[2]), /*formula=*/true);
  if (!s.ok()) {
    std::fprintf(stderr, "write_test_checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
