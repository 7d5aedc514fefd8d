// The adapter of yaml-cpp: the one file that includes it. It turns yaml-cpp's
// nodes into YamlNode and every yaml-cpp exception into a Status.
#include "common/yaml_tree.h"

#include <algorithm>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

namespace ps {
namespace {

YamlMark ToMark(const YAML::Mark& mark) { return YamlMark{mark.pos, mark.line, mark.column}; }

// Walks the documents of a YAML stream without building nodes, to count them.
//
// yaml-cpp 0.7's LoadAll() never returns on some malformed input: on a token
// that cannot start a node (a ',' at the top level, or after "[a]") each
// HandleNextDocument() reports another empty document without consuming
// anything (jbeder/yaml-cpp#1040; fixed upstream in 2024 by #1319, after
// every release this project builds with). So the walk is bounded, and a
// document that starts where the previous one started is reported as the
// syntax error it is.
class DocumentWalker final : public YAML::EventHandler {
 public:
  struct Result {
    int documents = 0;    // counted up to 2; more are not needed
    bool stuck = false;   // the parser stopped making progress
    YAML::Mark stuck_at;  // where, when stuck
  };

  // Throws what yaml-cpp throws on a syntax error.
  static Result Walk(const std::string& text) {
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentWalker walker;
    Result result;
    // A third document is parsed only to tell "two documents" from "stuck
    // after one".
    while (result.documents < 3 && parser.HandleNextDocument(walker)) {
      if (result.documents > 0 && walker.start_.pos == walker.previous_.pos) {
        result.stuck = true;
        result.stuck_at = walker.start_;
        return result;
      }
      walker.previous_ = walker.start_;
      ++result.documents;
    }
    result.documents = std::min(result.documents, 2);
    return result;
  }

  void OnDocumentStart(const YAML::Mark& mark) override { start_ = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

 private:
  YAML::Mark start_;
  YAML::Mark previous_;
};

Status SyntaxError(const std::string& source, const YAML::Mark& mark, std::string_view what) {
  std::string message;
  if (!source.empty()) message.append(source).append(": ");
  if (!mark.is_null()) {
    message.append("line " + std::to_string(mark.line + 1) + ", column " +
                   std::to_string(mark.column + 1) + ": ");
  }
  message.append("YAML syntax error: ").append(what);
  message.append(
      "; expected well-formed YAML (check brackets, commas, quotes, and "
      "indentation, which must use spaces, not tabs)");
  return InvalidArgumentError(message);
}

}  // namespace

// Copies a yaml-cpp node graph into a YamlDocument. A map or list reached
// twice (through an alias) becomes one YamlNode, so a document of nested
// aliases ("billion laughs") stays as small as its text, and an alias inside
// the node it names becomes a cycle rather than endless recursion.
class YamlTreeBuilder {
 public:
  explicit YamlTreeBuilder(YamlDocument* document) : document_(document) {}

  const YamlNode* Build(const YAML::Node& node) {
    const bool container = node.IsMap() || node.IsSequence();
    if (container) {
      auto [begin, end] = seen_.equal_range(node.Mark().pos);
      for (auto it = begin; it != end; ++it) {
        if (it->second.first.is(node)) return it->second.second;
      }
    }
    document_->nodes_.push_back(std::make_unique<YamlNode>());
    YamlNode* out = document_->nodes_.back().get();
    out->tag = node.Tag();
    out->mark = ToMark(node.Mark());
    switch (node.Type()) {
      case YAML::NodeType::Scalar:
        out->type = YamlNode::Type::kScalar;
        out->scalar = node.Scalar();
        break;
      case YAML::NodeType::Sequence:
        out->type = YamlNode::Type::kList;
        seen_.emplace(node.Mark().pos, std::make_pair(node, out));
        for (const YAML::Node& item : node) out->items.push_back(Build(item));
        break;
      case YAML::NodeType::Map:
        out->type = YamlNode::Type::kMap;
        seen_.emplace(node.Mark().pos, std::make_pair(node, out));
        for (auto it = node.begin(); it != node.end(); ++it) {
          const YamlNode* key = Build(it->first);
          out->entries.emplace_back(key, Build(it->second));
        }
        break;
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        out->type = YamlNode::Type::kNull;
        break;
    }
    return out;
  }

 private:
  YamlDocument* document_;
  // Maps and lists built so far, by their position in the text.
  std::unordered_multimap<int, std::pair<YAML::Node, const YamlNode*>> seen_;
};

StatusOr<YamlDocument> ReadYamlDocument(const std::string& text, const std::string& source) {
  try {
    const DocumentWalker::Result walk = DocumentWalker::Walk(text);
    if (walk.stuck) {
      const size_t pos = static_cast<size_t>(walk.stuck_at.pos);
      return SyntaxError(source, walk.stuck_at,
                         pos < text.size() ? "unexpected " + std::string(1, text[pos])
                                           : "unexpected end of input");
    }
    YamlDocument document;
    document.documents_ = walk.documents;
    if (walk.documents == 1) {
      // Load() builds the first document only, which is the only one.
      YamlTreeBuilder builder(&document);
      document.root_ = builder.Build(YAML::Load(text));
    }
    return document;
  } catch (const YAML::Exception& e) {
    // ParserException (syntax) and anything else yaml-cpp raises while
    // reading: both mean the text is not a YAML document we can read.
    return SyntaxError(source, e.mark, e.msg);
  } catch (const std::exception& e) {
    return InternalError((source.empty() ? "" : source + ": ") +
                         "reading the YAML document failed: " + e.what());
  }
}

}  // namespace ps
