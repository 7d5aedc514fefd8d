// The program table (worker/programs.h): every row is complete, names are
// unique and found by name, and an unknown name is refused listing them all.
#include "worker/programs.h"

#include <set>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/train_options.h"

namespace ps {
namespace {

TEST(TrainProgramsTest, EveryRowHasANameACheckAndARun) {
  ASSERT_FALSE(TrainPrograms().empty());
  for (const TrainProgram& program : TrainPrograms()) {
    SCOPED_TRACE(std::string(program.name));
    EXPECT_FALSE(program.name.empty());
    EXPECT_NE(program.check, nullptr);
    EXPECT_NE(program.run, nullptr);
  }
}

TEST(TrainProgramsTest, NamesAreUniqueAndFoundByName) {
  std::set<std::string_view> seen;
  for (const TrainProgram& program : TrainPrograms()) {
    EXPECT_TRUE(seen.insert(program.name).second) << "two rows named " << program.name;
    EXPECT_EQ(FindTrainProgram(program.name), &program);
  }
  EXPECT_EQ(TrainProgramNames().size(), TrainPrograms().size());
  EXPECT_EQ(FindTrainProgram("word2vec"), nullptr);
  EXPECT_EQ(FindTrainProgram(""), nullptr);
}

TEST(TrainProgramsTest, TheDefaultProgramIsInTheTable) {
  ASSERT_NE(FindTrainProgram(kDefaultTrainProgram), nullptr);
  // It drives the client itself, so --standalone refuses it.
  EXPECT_TRUE(FindTrainProgram(kDefaultTrainProgram)->needs_servers);
}

TEST(TrainProgramsTest, UnknownProgramIsRefusedListingEveryName) {
  const std::string yaml =
      "cluster: { servers: [\"127.0.0.1:7000\"], workers: 1 }\n"
      "tables: [ { name: weights, rows: 64 } ]\n"
      "train: { program: word2vec }\n";
  const Status loaded = LoadTrainJobString(yaml, "mem").status();
  TrainJob built{TestJob().Table("weights", 64).Build(), TrainOptions()};
  built.train.program = "word2vec";
  const Status validated = ValidateTrain(built);
  EXPECT_TRUE(InvalidWith(loaded, {"mem: train.program: got \"word2vec\"", "line 3"}));
  EXPECT_TRUE(InvalidWith(validated, {"train.program: got \"word2vec\""}));
  for (std::string_view name : TrainProgramNames()) {
    EXPECT_TRUE(InvalidWith(loaded, {std::string(name)}));
    EXPECT_TRUE(InvalidWith(validated, {std::string(name)}));
  }
}

}  // namespace
}  // namespace ps
