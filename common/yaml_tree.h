// A YAML document as the project's own tree of nodes, and the one function
// that reads YAML text into it. common/yaml_tree.cc is the only file that
// includes yaml-cpp; nothing else sees its types or its exceptions.
//
// Thread-safe: a YamlDocument is immutable once built.
#ifndef PS_COMMON_YAML_TREE_H_
#define PS_COMMON_YAML_TREE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ps {

// A position in the YAML text, counted from 0. All -1: no position (e.g.
// the document as a whole).
struct YamlMark {
  int pos = -1;
  int line = -1;
  int column = -1;

  bool is_null() const { return pos == -1 && line == -1 && column == -1; }
};

// One node of a document. Maps keep their entries in document order, with
// every entry of a key that appears more than once. An alias is the node it
// names (the same object), so shared and even cyclic structures cost one
// node each.
struct YamlNode {
  enum class Type { kNull, kScalar, kList, kMap };

  Type type = Type::kNull;
  // kScalar: the text, after YAML unquoting and escapes.
  std::string scalar;
  // The node's tag as YAML resolves it: "?" for a plain (unquoted, untagged)
  // node, "!" for a quoted scalar, else the explicit tag in full
  // ("tag:yaml.org,2002:int" for !!int).
  std::string tag;
  // Where the node starts. An empty value (kNull) has no text of its own:
  // its mark says little, so readers point at its key or list instead.
  YamlMark mark;
  // kMap: (key, value) pairs. kList: the items. Never null; owned by the
  // document.
  std::vector<std::pair<const YamlNode*, const YamlNode*>> entries;
  std::vector<const YamlNode*> items;

  bool IsNull() const { return type == Type::kNull; }
  bool IsScalar() const { return type == Type::kScalar; }
  bool IsList() const { return type == Type::kList; }
  bool IsMap() const { return type == Type::kMap; }
};

// The first document of a YAML text, and how many the text holds.
class YamlDocument {
 public:
  // Documents in the text, counted up to 2 (more are not told apart).
  int documents() const { return documents_; }
  // The first document's root. REQUIRES: documents() >= 1.
  const YamlNode& root() const { return *root_; }

 private:
  friend class YamlTreeBuilder;
  friend StatusOr<YamlDocument> ReadYamlDocument(const std::string& text,
                                                 const std::string& source);

  int documents_ = 0;
  const YamlNode* root_ = nullptr;
  // Every node of the tree; the pointers above and in the nodes point here.
  std::vector<std::unique_ptr<YamlNode>> nodes_;
};

// Reads `text` as a YAML stream and builds its first document.
// Errors:
//   InvalidArgument  the text is not well-formed YAML: "<source>: line L,
//                    column C: YAML syntax error: <what>; expected
//                    well-formed YAML (...)" (no "<source>: " when `source`
//                    is empty; no line when yaml-cpp gives none).
//   Internal         yaml-cpp failed otherwise while reading.
StatusOr<YamlDocument> ReadYamlDocument(const std::string& text, const std::string& source);

}  // namespace ps

#endif  // PS_COMMON_YAML_TREE_H_
