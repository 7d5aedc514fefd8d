#include "common/yaml_reader.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>

#include "common/text.h"

namespace ps {
namespace {

std::string ChildPath(const std::string& path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return path + "." + std::string(key);
}

std::string IndexPath(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

// "a map", "a list", "an empty value", "\"abc\"" or "the quoted string \"5\"".
std::string Describe(const YamlNode& node) {
  switch (node.type) {
    case YamlNode::Type::kNull:
      return "an empty value";
    case YamlNode::Type::kList:
      return "a list";
    case YamlNode::Type::kMap:
      return "a map";
    case YamlNode::Type::kScalar:
      if (node.tag == "!") return "the quoted string " + Quote(node.scalar);
      return Quote(node.scalar);
  }
  return "nothing";
}

// True for a scalar that YAML would resolve to a number or boolean: plain
// (unquoted) or explicitly tagged with the core tag `core_tag`. A quoted "64"
// is a string in YAML, and silently reading it as a number would hide typos
// such as a quoted list.
bool IsPlainScalar(const YamlNode& node, std::string_view core_tag) {
  return node.IsScalar() &&
         (node.tag == "?" || node.tag == "tag:yaml.org,2002:" + std::string(core_tag));
}

enum class NumberParse { kOk, kNotANumber, kOutOfRange };

// YAML 1.2 core-schema floats: 1, -2.5, 1e-3, .5, .inf, -.inf, .nan.
NumberParse ParseDouble(std::string_view text, double* out) {
  bool negative = false;
  std::string_view body = text;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
    return NumberParse::kOk;
  }
  if (body == text && (body == ".nan" || body == ".NaN" || body == ".NAN")) {
    *out = std::numeric_limits<double>::quiet_NaN();
    return NumberParse::kOk;
  }
  // from_chars also accepts "inf", "nan" and "infinity", which YAML does not.
  if (body.empty() || body.find_first_not_of("0123456789.eE+-") != std::string_view::npos ||
      !(std::isdigit(static_cast<unsigned char>(body.front())) || body.front() == '.')) {
    return NumberParse::kNotANumber;
  }
  double value = 0.0;
  auto [end, ec] =
      std::from_chars(body.data(), body.data() + body.size(), value, std::chars_format::general);
  if (end != body.data() + body.size()) return NumberParse::kNotANumber;
  if (ec == std::errc::result_out_of_range) return NumberParse::kOutOfRange;
  if (ec != std::errc()) return NumberParse::kNotANumber;
  *out = negative ? -value : value;
  return NumberParse::kOk;
}

// The number of a float or double read; `expected` names what is allowed.
Status ReadNumber(const YamlReader& reader, const YamlValue& value, std::string_view expected,
                  double* out) {
  const YamlNode& node = *value.node;
  if (!IsPlainScalar(node, "float")) {
    return reader.Error(value, "got " + Describe(node), expected);
  }
  switch (ParseDouble(node.scalar, out)) {
    case NumberParse::kOk:
      return Status::Ok();
    case NumberParse::kNotANumber:
      return reader.Error(value, "got " + Describe(node), expected);
    case NumberParse::kOutOfRange:
      break;
  }
  return reader.Error(value, "got " + node.scalar + ", which is out of range", expected);
}

// " (line L, column C)" for a position, nothing for a null mark.
std::string PositionText(const YamlMark& mark) {
  if (mark.is_null()) return "";
  return " (line " + std::to_string(mark.line + 1) + ", column " +
         std::to_string(mark.column + 1) + ")";
}

}  // namespace

const YamlValue* YamlMap::Find(std::string_view key) const {
  for (const auto& [name, value] : entries_) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::string_view name : names) {
    if (!out.empty()) out.append(", ");
    out.append(name);
  }
  return out;
}

Status YamlReader::Error(std::string_view path, const YamlMark& mark, std::string_view problem,
                         std::string_view expected) const {
  std::string message;
  if (!source_.empty()) message.append(source_).append(": ");
  message.append(path.empty() ? std::string_view("(top level)") : path);
  message.append(": ").append(problem);
  message.append("; expected ").append(expected);
  message.append(PositionText(mark));
  return InvalidArgumentError(message);
}

void YamlReader::Remember(const std::string& path, const YamlMark& mark) const {
  marks_.emplace(path, mark);
}

YamlMark YamlReader::MarkOf(std::string_view path) const {
  auto it = marks_.find(path);
  return it == marks_.end() ? YamlMark() : it->second;
}

Status YamlReader::WithPosition(const Status& status) const {
  if (status.code() != StatusCode::kInvalidArgument) return status;
  std::string_view message = status.message();
  const std::string prefix = source_.empty() ? std::string() : source_ + ": ";
  if (message.substr(0, prefix.size()) != prefix) return status;
  const std::string_view rest = message.substr(prefix.size());
  const size_t end = rest.find(": ");
  if (end == std::string_view::npos || message.find(" (line ") != std::string_view::npos) {
    return status;
  }
  const YamlMark mark = MarkOf(rest.substr(0, end));
  if (mark.is_null()) return status;
  return InvalidArgumentError(std::string(message) + PositionText(mark));
}

StatusOr<YamlMap> YamlReader::ReadMap(const YamlValue& value,
                                      const std::vector<std::string_view>& allowed,
                                      std::string_view expected) const {
  if (!value.node->IsMap()) return Error(value, "got " + Describe(*value.node), expected);
  YamlMap map(value.path, value.mark);
  for (const auto& [key, node] : value.node->entries) {
    if (!key->IsScalar()) {
      return Error(value.path, key->mark, "a key is " + Describe(*key),
                   "plain names as keys: " + JoinNames(allowed));
    }
    const std::string& name = key->scalar;
    const std::string path = ChildPath(value.path, name);
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return Error(path, key->mark, "unknown key", "one of " + JoinNames(allowed));
    }
    if (const YamlValue* first = map.Find(name)) {
      return Error(path, key->mark,
                   "duplicate key (first at line " + std::to_string(first->mark.line + 1) + ")",
                   "each key once");
    }
    // An empty value has no position of its own; point at its key.
    const YamlMark& mark = node->IsNull() ? key->mark : node->mark;
    Remember(path, mark);
    map.Add(name, YamlValue{node, path, mark});
  }
  return map;
}

StatusOr<const YamlValue*> YamlReader::Required(const YamlMap& map, std::string_view key,
                                                std::string_view expected) const {
  const YamlValue* value = map.Find(key);
  if (value == nullptr) {
    return Error(ChildPath(map.path(), key), map.mark(), "missing required key", expected);
  }
  return value;
}

StatusOr<std::vector<YamlValue>> YamlReader::ReadList(const YamlValue& value,
                                                      std::string_view expected) const {
  if (!value.node->IsList()) return Error(value, "got " + Describe(*value.node), expected);
  std::vector<YamlValue> items;
  for (const YamlNode* item : value.node->items) {
    // An empty item has no position of its own; point at the list.
    items.push_back(YamlValue{item, IndexPath(value.path, items.size()),
                              item->IsNull() ? value.mark : item->mark});
    Remember(items.back().path, items.back().mark);
  }
  return items;
}

Status YamlReader::ReadUnsigned(const YamlValue& value, uint64_t max, uint64_t* out) const {
  const std::string expected = "an integer in 0.." + std::to_string(max);
  const YamlNode& node = *value.node;
  if (!IsPlainScalar(node, "int")) return Error(value, "got " + Describe(node), expected);
  const std::string& text = node.scalar;
  std::string_view digits = text;
  bool negative = false;
  if (!digits.empty() && (digits.front() == '+' || digits.front() == '-')) {
    negative = digits.front() == '-';
    digits.remove_prefix(1);
  }
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    double ignored = 0.0;
    if (ParseDouble(text, &ignored) != NumberParse::kNotANumber) {
      return Error(value, "got " + text + ", which is not a whole number", expected);
    }
    return Error(value, "got " + Describe(node), expected);
  }
  if (negative && digits.find_first_not_of('0') != std::string_view::npos) {
    return Error(value, "got " + text + ", a negative number", expected);
  }
  uint64_t parsed = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
  if (ec == std::errc::result_out_of_range || parsed > max) {
    return Error(value, "got " + text + ", which is too large", expected);
  }
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return Error(value, "got " + Describe(node), expected);
  }
  *out = parsed;
  return Status::Ok();
}

Status YamlReader::ReadFloat(const YamlValue& value, float* out) const {
  constexpr std::string_view kExpected =
      "a number (e.g. 0.05, 1e-3, .inf, .nan) that fits a 32-bit float";
  double parsed = 0.0;
  PS_RETURN_IF_ERROR(ReadNumber(*this, value, kExpected, &parsed));
  const std::string& text = value.node->scalar;
  constexpr double kFloatMax = std::numeric_limits<float>::max();
  if (std::isfinite(parsed) && std::fabs(parsed) > kFloatMax) {
    return Error(value, "got " + text + ", which is too large", kExpected);
  }
  const float narrowed = static_cast<float>(parsed);
  if (parsed != 0.0 && narrowed == 0.0f) {
    return Error(value, "got " + text + ", which is too small", kExpected);
  }
  *out = narrowed;
  return Status::Ok();
}

Status YamlReader::ReadDouble(const YamlValue& value, double* out) const {
  constexpr std::string_view kExpected =
      "a number (e.g. 0.05, 1e-3, .inf, .nan) that fits a 64-bit float";
  return ReadNumber(*this, value, kExpected, out);
}

Status YamlReader::ReadBool(const YamlValue& value, bool* out) const {
  const YamlNode& node = *value.node;
  if (IsPlainScalar(node, "bool")) {
    const std::string& text = node.scalar;
    if (text == "true" || text == "True" || text == "TRUE") {
      *out = true;
      return Status::Ok();
    }
    if (text == "false" || text == "False" || text == "FALSE") {
      *out = false;
      return Status::Ok();
    }
  }
  return Error(value, "got " + Describe(node), "true or false");
}

Status YamlReader::ReadString(const YamlValue& value, std::string_view expected,
                              std::string* out) const {
  if (!value.node->IsScalar()) return Error(value, "got " + Describe(*value.node), expected);
  *out = value.node->scalar;
  return Status::Ok();
}

StatusOr<size_t> YamlReader::ReadName(const YamlValue& value,
                                      const std::vector<std::string_view>& names) const {
  const std::string expected = "one of " + JoinNames(names);
  std::string text;
  PS_RETURN_IF_ERROR(ReadString(value, expected, &text));
  const auto it = std::find(names.begin(), names.end(), text);
  if (it == names.end()) return Error(value, "got " + Describe(*value.node), expected);
  return static_cast<size_t>(it - names.begin());
}

Status YamlReader::CheckKeysForType(const YamlMap& map, std::string_view what,
                                    std::string_view type,
                                    const std::vector<std::string_view>& allowed) const {
  for (const auto& [key, value] : map.entries()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return Error(value, "not used by " + std::string(what) + " type " + std::string(type),
                   "only the keys " + JoinNames(allowed));
    }
  }
  return Status::Ok();
}

}  // namespace ps
