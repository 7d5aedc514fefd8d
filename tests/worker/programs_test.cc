// The program tables (worker/program_specs.h, what each program reads and
// checks; worker/programs.h, how it runs): every row is complete, the two
// list the same programs in the same order, names are unique and found by
// name, and an unknown name is refused listing them all.
#include "worker/programs.h"

#include <set>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "tests/util/status_matchers.h"
#include "tests/util/test_job.h"
#include "worker/program_specs.h"
#include "worker/train_options.h"

namespace ps {
namespace {

TEST(TrainProgramsTest, EveryRowHasANameACheckAndARun) {
  ASSERT_FALSE(ProgramSpecs().empty());
  for (const ProgramSpec& spec : ProgramSpecs()) {
    SCOPED_TRACE(std::string(spec.name));
    EXPECT_FALSE(spec.name.empty());
    EXPECT_NE(spec.check, nullptr);
  }
  for (const TrainProgram& program : TrainPrograms()) {
    SCOPED_TRACE(std::string(program.name));
    EXPECT_NE(program.run, nullptr);
  }
}

// A program's spec and its run are one program: the same names, in the
// same order, and an evaluation exactly where the spec says it evaluates.
TEST(TrainProgramsTest, EverySpecHasItsRunInTheSameOrder) {
  ASSERT_EQ(ProgramSpecs().size(), TrainPrograms().size());
  for (size_t i = 0; i < ProgramSpecs().size(); ++i) {
    const ProgramSpec& spec = ProgramSpecs()[i];
    const TrainProgram& program = TrainPrograms()[i];
    EXPECT_EQ(spec.name, program.name) << "row " << i;
    EXPECT_EQ(spec.evaluates, program.evaluation != nullptr) << spec.name;
  }
}

TEST(TrainProgramsTest, NamesAreUniqueAndFoundByName) {
  std::set<std::string_view> seen;
  for (const ProgramSpec& spec : ProgramSpecs()) {
    EXPECT_TRUE(seen.insert(spec.name).second) << "two rows named " << spec.name;
    EXPECT_EQ(FindProgramSpec(spec.name), &spec);
  }
  for (const TrainProgram& program : TrainPrograms()) {
    EXPECT_EQ(FindTrainProgram(program.name), &program);
  }
  EXPECT_EQ(ProgramNames().size(), ProgramSpecs().size());
  EXPECT_EQ(FindProgramSpec("word2vec"), nullptr);
  EXPECT_EQ(FindTrainProgram("word2vec"), nullptr);
  EXPECT_EQ(FindProgramSpec(""), nullptr);
}

TEST(TrainProgramsTest, TheDefaultProgramIsInTheTable) {
  ASSERT_NE(FindProgramSpec(kDefaultTrainProgram), nullptr);
  ASSERT_NE(FindTrainProgram(kDefaultTrainProgram), nullptr);
  // It drives the client itself, so --standalone refuses it.
  EXPECT_TRUE(FindProgramSpec(kDefaultTrainProgram)->needs_servers);
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
  for (std::string_view name : ProgramNames()) {
    EXPECT_TRUE(InvalidWith(loaded, {std::string(name)}));
    EXPECT_TRUE(InvalidWith(validated, {std::string(name)}));
  }
}

}  // namespace
}  // namespace ps
