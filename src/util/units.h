// Units used across fmstack: bytes, seconds, FLOP, bandwidth. Storage and
// network sizes follow the vendors' decimal convention (1 GB = 1e9 bytes)
// unless a binary suffix (GiB, TiB) is written.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fmstack::units {

inline constexpr double kKB = 1e3, kMB = 1e6, kGB = 1e9, kTB = 1e12, kPB = 1e15;
inline constexpr double kGiB = 1073741824.0, kTiB = 1099511627776.0;
inline constexpr double kMinute = 60, kHour = 3600, kDay = 86400;
inline constexpr double kYear = 365.25 * kDay;
inline constexpr double kMonth = 730 * kHour;  // the cloud billing month
inline constexpr double kTera = 1e12, kPeta = 1e15;

// Each parser throws std::invalid_argument with a message that says what
// forms are accepted. A bare number means bytes / seconds / bytes per second.
double ParseBytes(std::string_view text);      // "15TB", "420 GB", "1.5TiB", "800"
double ParseSeconds(std::string_view text);    // "15m", "2.5h", "54d", "900s", "150min"
double ParseBandwidth(std::string_view text);  // "3GB/s", "3200Gbps", "200MB/s" -> bytes/s
// A count with a decimal suffix: "15T", "2.5B", "800K", "1.2M", "15T tokens"
// (K 1e3, M 1e6, B and G 1e9, T 1e12, P 1e15).
double ParseCount(std::string_view text);

// Human-readable forms with three significant digits: "1.26 TB", "15.0 min",
// "6.81 days", "5.88e23".
std::string FormatBytes(double bytes);
std::string FormatSeconds(double seconds);
std::string FormatBandwidth(double bytes_per_second);
std::string FormatFlop(double flop);                 // 5.88e23: one notation for every FLOP count
std::string FormatFlopRate(double flop_per_second);  // 989.5 TFLOP/s: one for every rate
std::string FormatCount(double count);               // 70.6B, 1.54M, 12,288
std::string FormatUsd(double usd);                   // $1,234,567

}  // namespace fmstack::units
