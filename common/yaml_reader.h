// Typed, checked reads of a YAML tree (common/yaml_tree.h) into plain
// structs, with messages that say where and what.
//
// Every error is InvalidArgument with the message
//   "<source>: <path>: <problem>; expected <expected> (line L, column C)"
// where <path> is the YAML path of the value ("tables[0].init.type", or
// "(top level)" for the document), and the line and column (counted from 1)
// are left out when the value has no position. "<source>: " is left out
// when the source is empty.
//
// The reads are strict, as config/README.md documents: integers are plain
// decimal numbers, floats are YAML core-schema numbers, booleans are
// true/false, and a quoted scalar is always a string, so "64" is not a
// number. An empty value is never a default: it is reported.
//
// Thread-safe: a YamlReader keeps no state beyond its source name.
#ifndef PS_COMMON_YAML_READER_H_
#define PS_COMMON_YAML_READER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/yaml_tree.h"

namespace ps {

// A node with the YAML path that leads to it and the position its messages
// name. `node` must outlive the value (it belongs to a YamlDocument).
struct YamlValue {
  const YamlNode* node = nullptr;
  std::string path;
  YamlMark mark;
};

// The entries of one YAML map, after ReadMap checked its keys.
class YamlMap {
 public:
  YamlMap(std::string path, YamlMark mark) : path_(std::move(path)), mark_(mark) {}

  const std::string& path() const { return path_; }
  const YamlMark& mark() const { return mark_; }
  // In document order, each key once.
  const std::vector<std::pair<std::string, YamlValue>>& entries() const { return entries_; }

  // The value of `key`, or nullptr when the map does not have it.
  const YamlValue* Find(std::string_view key) const;

  void Add(std::string key, YamlValue value) {
    entries_.emplace_back(std::move(key), std::move(value));
  }

 private:
  std::string path_;
  YamlMark mark_;
  std::vector<std::pair<std::string, YamlValue>> entries_;
};

// "a, b, c".
std::string JoinNames(const std::vector<std::string_view>& names);

class YamlReader {
 public:
  // `source` names the text in messages; may be empty.
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  const std::string& source() const { return source_; }

  // The document's root as a value with the empty path.
  static YamlValue Root(const YamlNode& root) { return YamlValue{&root, "", root.mark}; }

  // The message of the file header, built from its parts (see above).
  Status Error(std::string_view path, const YamlMark& mark, std::string_view problem,
               std::string_view expected) const;
  Status Error(const YamlValue& value, std::string_view problem,
               std::string_view expected) const {
    return Error(value.path, value.mark, problem, expected);
  }

  // A map whose keys are all in `allowed`, each once. `expected` describes
  // the map when the value is not one. Errors: not a map, a key that is not
  // a scalar, an unknown key (listing `allowed`), a duplicate key (naming
  // the first one's line).
  StatusOr<YamlMap> ReadMap(const YamlValue& value, const std::vector<std::string_view>& allowed,
                            std::string_view expected) const;

  // The value of `key` in `map`; an error at the map's position when it is
  // missing.
  StatusOr<const YamlValue*> Required(const YamlMap& map, std::string_view key,
                                      std::string_view expected) const;

  // The items of a list, with paths "<path>[i]". Error: not a list.
  StatusOr<std::vector<YamlValue>> ReadList(const YamlValue& value,
                                            std::string_view expected) const;

  // A plain decimal integer in 0..max (a leading '+' is allowed; "-0" is 0).
  Status ReadUnsigned(const YamlValue& value, uint64_t max, uint64_t* out) const;
  // As above, up to the largest value of T.
  template <typename T>
  Status ReadUnsigned(const YamlValue& value, T* out) const {
    uint64_t parsed = 0;
    PS_RETURN_IF_ERROR(ReadUnsigned(value, std::numeric_limits<T>::max(), &parsed));
    *out = static_cast<T>(parsed);
    return Status::Ok();
  }

  // A YAML core-schema number (1, -2.5, 1e-3, .5, .inf, -.inf, .nan) that a
  // float holds: finite values beyond its range and non-zero values that
  // would round to zero are errors.
  Status ReadFloat(const YamlValue& value, float* out) const;
  // As ReadFloat, for a double.
  Status ReadDouble(const YamlValue& value, double* out) const;

  // true/True/TRUE or false/False/FALSE, plain or tagged !!bool.
  Status ReadBool(const YamlValue& value, bool* out) const;

  // Any scalar, as its text (a plain 123 is the string "123").
  Status ReadString(const YamlValue& value, std::string_view expected, std::string* out) const;

  // One of `names`; returns its index there. Error: "one of <names>".
  StatusOr<size_t> ReadName(const YamlValue& value, const std::vector<std::string_view>& names) const;

  // One of the names of `table`, a list of {name, value} entries (see
  // EnumName in common/options.h); sets *out to that entry's value.
  template <typename Table, typename Enum>
  Status ReadEnum(const YamlValue& value, const Table& table, Enum* out) const {
    std::vector<std::string_view> names;
    for (const auto& entry : table) names.push_back(entry.name);
    PS_ASSIGN_OR_RETURN(size_t index, ReadName(value, names));
    *out = std::begin(table)[index].value;
    return Status::Ok();
  }

  // Fails on the first key of `map` that is not in `allowed`, saying that
  // `what` of type `type` does not use it (e.g. seed with init type
  // constant).
  Status CheckKeysForType(const YamlMap& map, std::string_view what, std::string_view type,
                          const std::vector<std::string_view>& allowed) const;

  // Where the value at `path` is, for a value this reader handed out
  // (ReadMap, ReadList); a null mark for any other path.
  YamlMark MarkOf(std::string_view path) const;

  // `status` with the line and column of the value it names: for an
  // InvalidArgument of the form "<source>: <path>: ..." (InvalidOption's,
  // from the checks that see options, not YAML) whose path MarkOf knows
  // and which names no position yet. Any other status is returned as it is.
  // So a value is checked in one place, and a loaded file's message still
  // points at the value.
  Status WithPosition(const Status& status) const;

 private:
  // What ReadMap and ReadList handed out: path -> position.
  void Remember(const std::string& path, const YamlMark& mark) const;

  std::string source_;
  mutable std::map<std::string, YamlMark, std::less<>> marks_;
};

// One key of a section map and how its value is read into the section's
// options struct. A table of these describes a section once: the allowed
// keys, their order, which are required and where each value goes.
template <typename Options>
struct YamlField {
  std::string_view key;
  // Reads the value of the key, when the map has it.
  std::function<Status(const YamlReader&, const YamlValue&, Options*)> read;
  // Non-empty for a required key: the "expected" text when it is missing.
  std::string_view required = {};
  // Set instead of `read` for a key whose rules depend on keys read before
  // it (required or ignored by the section's type): called whether or not
  // the map has the key, with `value` null when it does not.
  std::function<Status(const YamlReader&, const YamlMap&, const YamlValue* value, Options*)>
      read_any = {};
};

// Reads the section map `value` with the keys of `fields`: checks the keys
// (`expected` describes the map when the value is not one; empty: "a map
// with <the keys>"), then reads each present key, in the order of `fields`,
// failing at the first missing required key or bad value.
// REQUIRES: each field has `read` or `read_any`.
template <typename Options>
Status ReadSection(const YamlReader& reader, const YamlValue& value,
                   const std::vector<YamlField<Options>>& fields, std::string_view expected,
                   Options* out) {
  std::vector<std::string_view> keys;
  for (const YamlField<Options>& field : fields) keys.push_back(field.key);
  const std::string described =
      expected.empty() ? "a map with " + JoinNames(keys) : std::string(expected);
  PS_ASSIGN_OR_RETURN(YamlMap map, reader.ReadMap(value, keys, described));
  for (const YamlField<Options>& field : fields) {
    const YamlValue* entry = map.Find(field.key);
    if (field.read_any) {
      PS_RETURN_IF_ERROR(field.read_any(reader, map, entry, out));
      continue;
    }
    if (entry == nullptr && !field.required.empty()) {
      PS_ASSIGN_OR_RETURN(entry, reader.Required(map, field.key, field.required));
    }
    if (entry != nullptr) PS_RETURN_IF_ERROR(field.read(reader, *entry, out));
  }
  return Status::Ok();
}

// Fields bound to a member of the options struct.
template <typename Options, typename T>
YamlField<Options> UnsignedField(std::string_view key, T Options::*member,
                                 std::string_view required = {}) {
  return {key,
          [member](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadUnsigned(v, &(o->*member));
          },
          required};
}

template <typename Options>
YamlField<Options> FloatField(std::string_view key, float Options::*member) {
  return {key, [member](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadFloat(v, &(o->*member));
          }};
}

template <typename Options>
YamlField<Options> DoubleField(std::string_view key, double Options::*member) {
  return {key, [member](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadDouble(v, &(o->*member));
          }};
}

template <typename Options>
YamlField<Options> BoolField(std::string_view key, bool Options::*member) {
  return {key, [member](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadBool(v, &(o->*member));
          }};
}

// `expected` describes the string ("a folder") for a value that is not one.
template <typename Options>
YamlField<Options> StringField(std::string_view key, std::string Options::*member,
                               std::string_view expected) {
  return {key, [member, expected](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadString(v, expected, &(o->*member));
          }};
}

// `table`: a {name, value} table (EnumName in common/options.h) that
// outlives the field.
template <typename Options, typename Table, typename Enum>
YamlField<Options> EnumField(std::string_view key, Enum Options::*member, const Table& table) {
  return {key, [member, &table](const YamlReader& r, const YamlValue& v, Options* o) {
            return r.ReadEnum(v, table, &(o->*member));
          }};
}

}  // namespace ps

#endif  // PS_COMMON_YAML_READER_H_
