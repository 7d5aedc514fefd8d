// Loading a job from YAML (config/README.md documents every key).
//
// Turns a YAML document (read by common/yaml_tree.h, the only part of the
// project that sees yaml-cpp, with the checked reads of
// common/yaml_reader.h) into JobOptions, rejects anything it does not
// understand, and runs JobOptions::Validate(). Nothing here throws.
//
// Every InvalidArgument message has the form
//   "<source>: <yaml.path>: <what is wrong>; expected <what is allowed>"
// e.g. "job.yaml: tables[0].init.type: got \"gaussian\"; expected one of
// zeros, constant, uniform, normal (line 7, column 20)". Problems the loader
// finds in the document carry the line and column where they are; so do
// those that Validate() finds in a value the file wrote (each value is
// checked in one place: Validate() for common's sections, the owning
// layer's check for the others). YAML syntax errors name the line and
// column instead of a path.
//
// Sections of other layers. A top-level key may belong to a layer above
// common, and that layer alone knows its schema: today `train`, the
// worker's training program (worker/train_options.h). Such a key is
// declared here (kJobSectionsOfOtherLayers), so that it is allowed and a
// typo in any top-level key is still refused, listing the keys. The layer
// that owns it passes a JobSection to read it; a loader given none skips
// the section unread (ps_server, ps_ctl).
//
// Thread-safe: the functions keep no state.
#ifndef PS_COMMON_CONFIG_H_
#define PS_COMMON_CONFIG_H_

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "common/options.h"
#include "common/status.h"
#include "common/yaml_reader.h"

namespace ps {

// The top-level keys whose sections a layer above common reads.
inline constexpr std::string_view kJobSectionsOfOtherLayers[] = {"train"};

// How a layer above common reads and checks its top-level section of the
// job file. `read` is called with the section's value when the document has
// the key, after common's own sections were read (in the order of the
// sections given) and before JobOptions::Validate(); `check`, when set,
// after Validate() passed, with the job read so far. Their errors become
// the loader's, and an InvalidOption of `check` gets the line and column of
// the value it names (YamlReader::WithPosition). Both run on the caller's
// thread and may use what they captured.
struct JobSection {
  // One of kJobSectionsOfOtherLayers.
  std::string_view key;
  std::function<Status(const YamlReader& reader, const YamlValue& value)> read;
  std::function<Status(const JobOptions& job)> check = nullptr;
};

// Reads, parses and validates the job file at `path`; `sections` read the
// sections of other layers (the others are skipped). The result's `source`
// is `path`, as given.
// Errors:
//   NotFound         no file at `path`.
//   InvalidArgument  `path` is not a regular file, or the document is not a
//                    valid job (syntax, unknown key, wrong type, missing
//                    required key, unknown enum value, or a value that
//                    Validate() rejects), or a section's `read` refused it.
//   PermissionDenied / Internal  the file exists but cannot be read.
//   Internal         a section's key is not in kJobSectionsOfOtherLayers,
//                    or two sections have the same key (a bug of the caller).
StatusOr<JobOptions> LoadJobFile(const std::string& path,
                                 std::span<const JobSection> sections = {});

// As LoadJobFile, from YAML text in memory. `source` names the text in
// messages and becomes the result's `source`; it may be empty, and then
// messages start with the YAML path.
// Errors: InvalidArgument and the Internal of `sections`, as for LoadJobFile.
StatusOr<JobOptions> LoadJobString(const std::string& yaml_text, const std::string& source,
                                   std::span<const JobSection> sections = {});

}  // namespace ps

#endif  // PS_COMMON_CONFIG_H_
