#include "util/units.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <utility>

namespace fmstack::units {
namespace {

struct Suffix {
  std::string_view name;
  double scale;
};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "15 TB" into 15 and "tb" (lower case, spaces dropped).
std::pair<double, std::string> SplitNumber(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  const char* begin = text.data() + i;
  const char* end = text.data() + text.size();
  double value = 0;
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc() || !std::isfinite(value)) {
    throw std::invalid_argument(
        fmt::format("'{}' is not a {}: it must start with a number", text, what));
  }
  std::string unit;
  for (const char* p = ptr; p < end; ++p) {
    if (!std::isspace(static_cast<unsigned char>(*p))) unit += *p;
  }
  return {value, Lower(unit)};
}

template <size_t N>
double Parse(std::string_view text, std::string_view what, const std::array<Suffix, N>& suffixes,
             std::string_view examples) {
  const auto [value, unit] = SplitNumber(text, what);
  for (const Suffix& s : suffixes) {
    if (unit == s.name) return value * s.scale;
  }
  throw std::invalid_argument(fmt::format("'{}' has an unknown unit '{}' for a {} (use e.g. {})",
                                          text, unit, what, examples));
}

std::string ThreeDigits(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}

std::string GroupThousands(double v) {
  const auto n = static_cast<long long>(std::llround(v));
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

}  // namespace

// One grammar for every size and duration: a number, optional spaces, a
// unit in any case, singular or plural, short or spelled out.
double ParseBytes(std::string_view text) {
  static constexpr std::array<Suffix, 19> kSuffixes = {{{"", 1},
                                                        {"b", 1},
                                                        {"byte", 1},
                                                        {"bytes", 1},
                                                        {"kb", kKB},
                                                        {"mb", kMB},
                                                        {"gb", kGB},
                                                        {"tb", kTB},
                                                        {"pb", kPB},
                                                        {"kib", 1024.0},
                                                        {"mib", 1048576.0},
                                                        {"gib", kGiB},
                                                        {"tib", kTiB},
                                                        {"pib", kTiB * 1024},
                                                        {"k", kKB},
                                                        {"m", kMB},
                                                        {"g", kGB},
                                                        {"t", kTB},
                                                        {"p", kPB}}};
  return Parse(text, "size", kSuffixes, "\"420GB\", \"15TB\", \"15T\", \"1.5TiB\"");
}

double ParseCount(std::string_view text) {
  static constexpr std::array<Suffix, 12> kSuffixes = {{{"", 1},
                                                        {"tokens", 1},
                                                        {"k", 1e3},
                                                        {"ktokens", 1e3},
                                                        {"m", 1e6},
                                                        {"mtokens", 1e6},
                                                        {"b", 1e9},
                                                        {"btokens", 1e9},
                                                        {"g", 1e9},
                                                        {"t", 1e12},
                                                        {"ttokens", 1e12},
                                                        {"p", 1e15}}};
  return Parse(text, "count", kSuffixes, "\"15T\", \"2.5B\", \"800M\", \"15T tokens\"");
}

double ParseSeconds(std::string_view text) {
  static constexpr std::array<Suffix, 28> kSuffixes = {
      {{"", 1},          {"s", 1},          {"sec", 1},          {"secs", 1},
       {"second", 1},    {"seconds", 1},    {"ms", 1e-3},        {"m", kMinute},
       {"min", kMinute}, {"mins", kMinute}, {"minute", kMinute}, {"minutes", kMinute},
       {"h", kHour},     {"hr", kHour},     {"hrs", kHour},      {"hour", kHour},
       {"hours", kHour}, {"d", kDay},       {"day", kDay},       {"days", kDay},
       {"w", 7 * kDay},  {"wk", 7 * kDay},  {"week", 7 * kDay},  {"weeks", 7 * kDay},
       {"y", kYear},     {"yr", kYear},     {"year", kYear},     {"years", kYear}}};
  return Parse(text, "duration", kSuffixes, "\"900s\", \"15m\", \"30 minutes\", \"2.5h\", \"54d\"");
}

double ParseBandwidth(std::string_view text) {
  static constexpr std::array<Suffix, 12> kSuffixes = {{{"", 1},
                                                        {"b/s", 1},
                                                        {"kb/s", kKB},
                                                        {"mb/s", kMB},
                                                        {"gb/s", kGB},
                                                        {"tb/s", kTB},
                                                        {"gib/s", kGiB},
                                                        {"mbps", kMB / 8},
                                                        {"gbps", kGB / 8},
                                                        {"tbps", kTB / 8},
                                                        {"mbit/s", kMB / 8},
                                                        {"gbit/s", kGB / 8}}};
  return Parse(text, "bandwidth", kSuffixes, "\"3GB/s\", \"200MB/s\", \"3200Gbps\"");
}

std::string FormatBytes(double bytes) {
  static constexpr std::array<Suffix, 5> kScale = {
      {{"PB", kPB}, {"TB", kTB}, {"GB", kGB}, {"MB", kMB}, {"kB", kKB}}};
  for (const Suffix& s : kScale) {
    if (std::fabs(bytes) >= s.scale)
      return ThreeDigits(bytes / s.scale) + " " + std::string(s.name);
  }
  return fmt::format("{:.0f} B", bytes);
}

std::string FormatSeconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a < kMinute) return ThreeDigits(seconds) + " s";
  if (a < 2 * kHour) return ThreeDigits(seconds / kMinute) + " min";
  if (a < 2 * kDay) return ThreeDigits(seconds / kHour) + " h";
  if (a < kYear) return ThreeDigits(seconds / kDay) + " days";
  return ThreeDigits(seconds / kYear) + " years";
}

std::string FormatBandwidth(double bytes_per_second) {
  return FormatBytes(bytes_per_second) + "/s";
}

std::string FormatFlop(double flop) {
  std::string out = fmt::format("{:.3g}", flop);  // "7.39e+07"
  const size_t e = out.find('e');
  if (e == std::string::npos) return out;
  size_t digits = e + 1;
  if (out[digits] == '+') out.erase(digits, 1);
  if (out[digits] == '-') ++digits;
  while (digits + 1 < out.size() && out[digits] == '0') out.erase(digits, 1);
  return out;  // "7.39e7"
}

std::string FormatFlopRate(double flop_per_second) {
  if (std::fabs(flop_per_second) >= 1e12)
    return fmt::format("{:.4g} TFLOP/s", flop_per_second / 1e12);
  return fmt::format("{:.4g} GFLOP/s", flop_per_second / 1e9);
}

std::string FormatCount(double count) {
  const double a = std::fabs(count);
  if (a >= 1e12) return ThreeDigits(count / 1e12) + "T";
  if (a >= 1e9) return ThreeDigits(count / 1e9) + "B";
  if (a >= 1e6) return ThreeDigits(count / 1e6) + "M";
  return GroupThousands(count);
}

std::string FormatUsd(double usd) {
  return "$" + GroupThousands(usd);
}

}  // namespace fmstack::units
