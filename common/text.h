// Small text helpers for error messages and hand-written JSON.
#ifndef PS_COMMON_TEXT_H_
#define PS_COMMON_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace ps {

// `text` in double quotes; longer than `max_shown` characters it is cut and
// "..." follows, so a message stays one readable line.
std::string Quote(std::string_view text, size_t max_shown = 80);

// Shortest text that reads back as the same float ("0.05", "inf", "nan").
std::string FloatText(float value);

// Shortest text that reads back as the same double ("0.05", "1e+300").
std::string DoubleText(double value);

// `text` as a JSON string literal: quotes, backslashes and control
// characters escaped; bytes of 0x80 and up kept as they are (UTF-8 stays
// UTF-8).
std::string JsonString(std::string_view text);

}  // namespace ps

#endif  // PS_COMMON_TEXT_H_
