#include "common/text.h"

#include <charconv>
#include <cstdio>

namespace ps {

std::string Quote(std::string_view text, size_t max_shown) {
  const bool cut = text.size() > max_shown;
  // Appended piecewise: "\"" + std::string(...) trips GCC 12's -Wrestrict
  // false positive at -O3.
  std::string quoted;
  quoted.reserve((cut ? max_shown : text.size()) + 5);
  quoted.append(1, '"').append(cut ? text.substr(0, max_shown) : text);
  if (cut) quoted.append("...");
  quoted.append(1, '"');
  return quoted;
}

namespace {

template <typename Number>
std::string ShortestText(Number value) {
  char buffer[64];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  if (ec != std::errc()) return "?";
  return std::string(buffer, end);
}

}  // namespace

std::string FloatText(float value) { return ShortestText(value); }

std::string DoubleText(double value) { return ShortestText(value); }

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

}  // namespace ps
