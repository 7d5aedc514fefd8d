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
// finds in the document carry the line and column where they are; problems
// found by Validate() name the path only. YAML syntax errors name the line
// and column instead of a path.
//
// Thread-safe: the functions keep no state.
#ifndef PS_COMMON_CONFIG_H_
#define PS_COMMON_CONFIG_H_

#include <string>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// Reads, parses and validates the job file at `path`. The result's `source`
// is `path`, as given.
// Errors:
//   NotFound         no file at `path`.
//   InvalidArgument  `path` is not a regular file, or the document is not a
//                    valid job (syntax, unknown key, wrong type, missing
//                    required key, unknown enum value, or a value that
//                    Validate() rejects).
//   PermissionDenied / Internal  the file exists but cannot be read.
StatusOr<JobOptions> LoadJobFile(const std::string& path);

// As LoadJobFile, from YAML text in memory. `source` names the text in
// messages and becomes the result's `source`; it may be empty, and then
// messages start with the YAML path.
// Errors: InvalidArgument, as for LoadJobFile.
StatusOr<JobOptions> LoadJobString(const std::string& yaml_text,
                                   const std::string& source);

}  // namespace ps

#endif  // PS_COMMON_CONFIG_H_
