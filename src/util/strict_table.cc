#include "util/strict_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "util/units.h"

namespace fmstack {
namespace {

SourcePos ToPos(const std::string& file, const toml::source_region& region) {
  return SourcePos{file, static_cast<int>(region.begin.line),
                   static_cast<int>(region.begin.column)};
}

std::string Quote(const toml::node& node) {
  std::ostringstream out;
  if (const auto* s = node.as_string()) {
    out << '"' << s->get() << '"';
  } else if (node.is_table()) {
    out << "a table";
  } else if (node.is_array()) {
    out << "an array";
  } else {
    node.visit([&](const auto& v) { out << v; });
  }
  return out.str();
}

}  // namespace

std::string_view TomlTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

StrictTable::StrictTable(const toml::table& table, std::string file, std::string path)
    : table_(&table), file_(std::move(file)), path_(std::move(path)) {}

std::string StrictTable::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

SourcePos StrictTable::Pos() const {
  return ToPos(file_, table_->source());
}

SourcePos StrictTable::PosOf(std::string_view key) const {
  for (const auto& [k, v] : *table_) {
    if (k.str() == key) return ToPos(file_, k.source());
  }
  return Pos();
}

void StrictTable::Fail(std::string_view key, const std::string& problem,
                       const std::string& hint) const {
  throw SpecError(PosOf(key), KeyPath(key), problem, hint);
}

void StrictTable::FailType(std::string_view key, const toml::node& node,
                           std::string_view expected) const {
  Fail(key, fmt::format("expected {}, got {} {}", expected, TomlTypeName(node), Quote(node)));
}

const toml::node* StrictTable::Lookup(std::string_view key) {
  if (std::find(asked_.begin(), asked_.end(), key) == asked_.end()) asked_.emplace_back(key);
  return table_->get(key);
}

bool StrictTable::Has(std::string_view key) {
  return Lookup(key) != nullptr;
}

std::optional<int64_t> StrictTable::Int(std::string_view key, int64_t min, int64_t max) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) return std::nullopt;
  const std::string range = min == 0   ? "a non-negative integer"
                            : min == 1 ? "a positive integer"
                                       : "an integer";
  std::optional<int64_t> value = node->value_exact<int64_t>();
  if (!value) {
    // 2e12 is a float in TOML; accept it when it is a whole number.
    if (const auto d = node->value_exact<double>();
        d && std::floor(*d) == *d && std::fabs(*d) < 9e18) {
      value = static_cast<int64_t>(*d);
    } else {
      FailType(key, *node, range);
    }
  }
  if (*value < min || *value > max) {
    if (max == std::numeric_limits<int64_t>::max()) {
      Fail(key, fmt::format("expected {} (>= {}), got {}", range, min, *value));
    }
    if (*value < min) Fail(key, fmt::format("expected {} (>= {}), got {}", range, min, *value));
    Fail(key, fmt::format("expected an integer in [{}, {}], got {}", min, max, *value));
  }
  return value;
}

std::optional<double> StrictTable::Number(std::string_view key, double min, double max) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) return std::nullopt;
  const std::optional<double> value = node->is_number() ? node->value<double>() : std::nullopt;
  if (!value) FailType(key, *node, "a number");
  if (!(*value >= min && *value <= max)) {
    Fail(key, fmt::format("expected a number in [{}, {}], got {}", min, max, *value));
  }
  return value;
}

std::optional<bool> StrictTable::Bool(std::string_view key) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_boolean()) FailType(key, *node, "true or false");
  return node->value<bool>();
}

std::optional<std::string> StrictTable::String(std::string_view key) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_string()) FailType(key, *node, "a string");
  return node->value<std::string>();
}

std::optional<std::string> StrictTable::Choice(std::string_view key,
                                               std::span<const std::string> allowed) {
  std::optional<std::string> value = String(key);
  if (!value) return value;
  if (std::find(allowed.begin(), allowed.end(), *value) != allowed.end()) return value;
  std::string list;
  for (const std::string& a : allowed) list += (list.empty() ? "\"" : ", \"") + a + "\"";
  Fail(key, fmt::format("expected one of {}, got \"{}\"", list, *value),
       DidYouMean(*value, allowed));
}

namespace {
template <typename ParseFn>
std::optional<double> UnitValue(StrictTable& t, const toml::node* node, std::string_view key,
                                std::string_view what, ParseFn parse) {
  if (node == nullptr) return std::nullopt;
  double value = 0;
  if (node->is_number()) {
    value = node->value<double>().value_or(0);
    // A bare duration or bandwidth is a guess at its unit (1270: seconds or
    // hours? 400: Gb/s or GB/s?); 0 is 0 in any unit. Sizes are bytes and
    // counts have no unit.
    if (value != 0 && (what == "duration" || what == "bandwidth")) {
      t.Fail(key, fmt::format("a bare number {:g} has no unit; write the {} with one, e.g. "
                              "{}",
                              value, what,
                              what == "duration"
                                  ? fmt::format("\"{:g}h\" or \"{:g}s\"", value, value)
                                  : fmt::format("\"{:g}GB/s\" or \"{:g}Gbps\"", value, value)));
    }
  } else if (node->is_string()) {
    try {
      value = parse(node->value<std::string>().value_or(""));
    } catch (const std::invalid_argument& e) {
      t.Fail(key, e.what());
    }
  } else {
    t.Fail(key, fmt::format("expected a {} (a number or a string with a unit), got {}", what,
                            TomlTypeName(*node)));
  }
  if (!(value >= 0)) t.Fail(key, fmt::format("expected a non-negative {}, got {}", what, value));
  // Finite and physical: nothing a job describes is larger (and the
  // arithmetic downstream stays far from overflow).
  const double max = what == "duration" ? 100 * 365.25 * 86400.0  // a century
                     : what == "size"   ? 1e21                    // a zettabyte
                     : what == "count"  ? 1e18                    // tokens of a million runs
                                        : 1e15;                    // a petabyte per second
  if (!(value <= max)) {
    t.Fail(key, fmt::format("expected a {} of at most {:g}, got {:g}", what, max, value));
  }
  return value;
}
}  // namespace

std::optional<double> StrictTable::Bytes(std::string_view key) {
  return UnitValue(*this, Lookup(key), key, "size", units::ParseBytes);
}
std::optional<double> StrictTable::Seconds(std::string_view key) {
  return UnitValue(*this, Lookup(key), key, "duration", units::ParseSeconds);
}
std::optional<double> StrictTable::Count(std::string_view key) {
  return UnitValue(*this, Lookup(key), key, "count", units::ParseCount);
}
std::optional<double> StrictTable::Bandwidth(std::string_view key) {
  return UnitValue(*this, Lookup(key), key, "bandwidth", units::ParseBandwidth);
}

std::optional<StrictTable> StrictTable::Table(std::string_view key) {
  const toml::node* node = Lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_table()) FailType(key, *node, "a table");
  return StrictTable(*node->as_table(), file_, KeyPath(key));
}

std::vector<StrictTable> StrictTable::TableArray(std::string_view key) {
  std::vector<StrictTable> out;
  const toml::node* node = Lookup(key);
  if (node == nullptr) return out;
  if (!node->is_array_of_tables())
    FailType(key, *node, "an array of tables ([[" + KeyPath(key) + "]])");
  size_t i = 0;
  for (const toml::node& element : *node->as_array()) {
    out.emplace_back(*element.as_table(), file_, fmt::format("{}[{}]", KeyPath(key), i++));
  }
  return out;
}

std::vector<std::string> StrictTable::StringArray(std::string_view key) {
  std::vector<std::string> out;
  const toml::node* node = Lookup(key);
  if (node == nullptr) return out;
  if (!node->is_array()) FailType(key, *node, "an array of strings");
  for (const toml::node& element : *node->as_array()) {
    if (!element.is_string()) FailType(key, element, "an array of strings");
    out.push_back(element.value<std::string>().value_or(""));
  }
  return out;
}

void StrictTable::Finish() const {
  for (const auto& [k, v] : *table_) {
    const std::string name(k.str());
    if (std::find(asked_.begin(), asked_.end(), name) != asked_.end()) continue;
    std::string hint = DidYouMean(name, asked_);
    if (hint.empty()) {
      std::string known;
      for (const std::string& a : asked_) known += (known.empty() ? "" : ", ") + a;
      hint = "(known keys here: " + known + ")";
    }
    throw SpecError(ToPos(file_, k.source()), KeyPath(name), "unknown key", hint);
  }
}

toml::table ParseTomlText(std::string_view text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    const std::string hint = text.find_first_not_of(" \t\r\n") != std::string_view::npos &&
                                     text[text.find_first_not_of(" \t\r\n")] == '{'
                                 ? " (this looks like JSON: job and cluster files are TOML, "
                                   "see examples/*.toml)"
                                 : "";
    throw SpecError(ToPos(name, e.source()), "",
                    "TOML syntax error: " + std::string(e.description()) + hint);
  }
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file for reading", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(fmt::format("{}: read failed", path));
  return text.str();
}

}  // namespace fmstack
