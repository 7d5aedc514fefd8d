// Tests of the YAML tree (common/yaml_tree.h) and the typed reads on it
// (common/yaml_reader.h), apart from any job schema.
#include "common/yaml_reader.h"

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/status.h"
#include "common/yaml_tree.h"
#include "tests/util/status_matchers.h"

namespace ps {
namespace {

YamlDocument Read(const std::string& text) {
  StatusOr<YamlDocument> document = ReadYamlDocument(text, "mem");
  EXPECT_OK(document);
  return std::move(document).value();
}

TEST(YamlTreeTest, KeepsTypesTagsPositionsAndEntryOrder) {
  const YamlDocument document = Read("b: 1\na: \"2\"\nc: [x, !!int 3]\nd:\n");
  ASSERT_EQ(document.documents(), 1);
  const YamlNode& root = document.root();
  ASSERT_TRUE(root.IsMap());
  ASSERT_EQ(root.entries.size(), 4u);
  EXPECT_EQ(root.entries[0].first->scalar, "b");
  EXPECT_EQ(root.entries[0].second->tag, "?");
  EXPECT_EQ(root.entries[1].second->tag, "!");
  EXPECT_EQ(root.entries[1].second->mark.line, 1);
  EXPECT_EQ(root.entries[1].second->mark.column, 3);
  const YamlNode& list = *root.entries[2].second;
  ASSERT_TRUE(list.IsList());
  EXPECT_EQ(list.items[1]->tag, "tag:yaml.org,2002:int");
  EXPECT_TRUE(root.entries[3].second->IsNull());
}

TEST(YamlTreeTest, CountsDocumentsAndReportsSyntaxErrors) {
  EXPECT_EQ(Read("").documents(), 0);
  EXPECT_EQ(Read("a: 1\n---\nb: 2\n").documents(), 2);
  StatusOr<YamlDocument> bad = ReadYamlDocument("a: [1, 2\n", "mem");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("mem: line ", 0), 0u) << bad.status().message();
  // yaml-cpp 0.7 would loop forever here without the document walk's guard.
  EXPECT_FALSE(ReadYamlDocument(",a: 1", "mem").ok());
}

TEST(YamlTreeTest, AliasesShareOneNodeAndMayBeCyclic) {
  // Nine levels of ten aliases each would be 10^9 nodes if copied.
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 10; ++level) {
    text += "l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 10; ++i) text += (i ? ", *l" : "*l") + std::to_string(level - 1);
    text += "]\n";
  }
  const YamlDocument bomb = Read(text);
  const YamlNode& last = *bomb.root().entries.back().second;
  EXPECT_EQ(last.items[0], last.items[9]);

  const YamlDocument cycle = Read("a: &a [*a]\n");
  const YamlNode& list = *cycle.root().entries[0].second;
  EXPECT_EQ(list.items[0], &list);
}

TEST(YamlReaderTest, TypedReadsAreStrict) {
  const YamlDocument document =
      Read("n: 7\nq: \"7\"\nf: 0.1\nd: 1e300\nb: true\ne: two\nneg: -3\n");
  YamlReader reader("mem");
  StatusOr<YamlMap> map = reader.ReadMap(YamlReader::Root(document.root()),
                                         {"n", "q", "f", "d", "b", "e", "neg"}, "a map");
  ASSERT_OK(map);
  uint32_t n = 0;
  EXPECT_OK(reader.ReadUnsigned(*map->Find("n"), &n));
  EXPECT_EQ(n, 7u);
  Status quoted = reader.ReadUnsigned(*map->Find("q"), &n);
  EXPECT_EQ(quoted.message(),
            "mem: q: got the quoted string \"7\"; expected an integer in 0..4294967295 "
            "(line 2, column 4)");
  Status negative = reader.ReadUnsigned(*map->Find("neg"), &n);
  EXPECT_NE(negative.message().find("a negative number"), std::string::npos);
  double d = 0;
  EXPECT_OK(reader.ReadDouble(*map->Find("f"), &d));
  EXPECT_EQ(d, 0.1);  // not 0.1f widened
  EXPECT_OK(reader.ReadDouble(*map->Find("d"), &d));
  EXPECT_EQ(d, 1e300);
  float f = 0;
  EXPECT_NE(reader.ReadFloat(*map->Find("d"), &f).message().find("too large"), std::string::npos);
  bool b = false;
  EXPECT_OK(reader.ReadBool(*map->Find("b"), &b));
  EXPECT_TRUE(b);
  struct Entry {
    std::string_view name;
    int value;
  };
  const Entry kTable[] = {{"one", 1}, {"two", 2}};
  int e = 0;
  EXPECT_OK(reader.ReadEnum(*map->Find("e"), kTable, &e));
  EXPECT_EQ(e, 2);
  EXPECT_EQ(reader.ReadEnum(*map->Find("n"), kTable, &e).message(),
            "mem: n: got \"7\"; expected one of one, two (line 1, column 4)");
}

TEST(YamlReaderTest, MapKeysAreCheckedAndSectionsReadFromTheirTable) {
  struct Section {
    uint32_t a = 0;
    bool b = false;
  };
  const std::vector<YamlField<Section>> fields = {
      UnsignedField("a", &Section::a, "a count"),
      BoolField("b", &Section::b),
  };
  YamlReader reader("");
  Section section;
  const YamlDocument good = Read("{ b: true, a: 3 }");
  ASSERT_OK(ReadSection(reader, YamlReader::Root(good.root()), fields, "", &section));
  EXPECT_EQ(section.a, 3u);
  EXPECT_TRUE(section.b);

  const YamlDocument missing = Read("{ b: true }");
  EXPECT_EQ(ReadSection(reader, YamlReader::Root(missing.root()), fields, "", &section).message(),
            "a: missing required key; expected a count (line 1, column 1)");
  const YamlDocument unknown = Read("{ a: 1, c: 2 }");
  EXPECT_EQ(ReadSection(reader, YamlReader::Root(unknown.root()), fields, "", &section).message(),
            "c: unknown key; expected one of a, b (line 1, column 9)");
  const YamlDocument twice = Read("a: 1\na: 2\n");
  EXPECT_EQ(ReadSection(reader, YamlReader::Root(twice.root()), fields, "", &section).message(),
            "a: duplicate key (first at line 1); expected each key once (line 2, column 1)");
  const YamlDocument list = Read("[1]");
  EXPECT_EQ(ReadSection(reader, YamlReader::Root(list.root()), fields, "", &section).message(),
            "(top level): got a list; expected a map with a, b (line 1, column 1)");
}

TEST(YamlReaderTest, WithPositionNamesTheLineOfAValueItHandedOut) {
  const YamlDocument document = Read("a:\n  b: 7\nc: [1, 2]\n");
  const YamlReader r("mem");
  StatusOr<YamlMap> top = r.ReadMap(YamlReader::Root(document.root()), {"a", "c"}, "a map");
  ASSERT_OK(top);
  ASSERT_OK(r.ReadMap(*top->Find("a"), {"b"}, "a map"));
  ASSERT_OK(r.ReadList(*top->Find("c"), "a list"));
  EXPECT_EQ(r.MarkOf("a.b").line, 1);
  EXPECT_EQ(r.MarkOf("c[1]").column, 7);
  EXPECT_TRUE(r.MarkOf("a.x").is_null());

  // A check that saw only the value: the reader adds where it is.
  EXPECT_EQ(r.WithPosition(InvalidArgumentError("mem: a.b: got 7; expected < 5")).message(),
            "mem: a.b: got 7; expected < 5 (line 2, column 6)");
  EXPECT_EQ(r.WithPosition(InvalidArgumentError("mem: c[1]: got 2; expected 1")).message(),
            "mem: c[1]: got 2; expected 1 (line 3, column 8)");
  // Left as they are: a path it did not hand out, another source, a message
  // that names its position already, another code, OK.
  for (const Status& s :
       {InvalidArgumentError("mem: a.x: got 1; expected 2"),
        InvalidArgumentError("other: a.b: got 7; expected < 5"),
        InvalidArgumentError("mem: a.b: got 7; expected < 5 (line 9, column 1)"),
        InternalError("mem: a.b: broken")}) {
    EXPECT_EQ(r.WithPosition(s).message(), s.message());
    EXPECT_EQ(r.WithPosition(s).code(), s.code());
  }
  EXPECT_OK(r.WithPosition(Status::Ok()));
}

}  // namespace
}  // namespace ps
