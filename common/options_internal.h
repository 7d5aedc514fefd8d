// Helpers shared by the files of JobOptions::Validate() (options.cc,
// options_train.cc); not part of the options interface.
#ifndef PS_COMMON_OPTIONS_INTERNAL_H_
#define PS_COMMON_OPTIONS_INTERNAL_H_

#include <string>
#include <string_view>

#include "common/options.h"
#include "common/status.h"

namespace ps {

// The train section's checks: none without a training program; else the
// common limits and the program's own checks (its tables, layers, features).
Status ValidateTrain(const std::string& source, const JobOptions& job);

}  // namespace ps

#endif  // PS_COMMON_OPTIONS_INTERNAL_H_
