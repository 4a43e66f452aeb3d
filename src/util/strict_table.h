// Strict reading of a TOML table: typed getters that raise SpecError naming
// file:line:column, the dotted key and what was expected; Finish() rejects any
// key nobody asked for, with a "did you mean" from the keys that were asked.
// This is how "no spec value is silently ignored" is enforced.
//
// Not thread-safe. Lifetime: must not outlive the toml::table it reads.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/error.h"

namespace fmstack {

class StrictTable {
 public:
  // `file` names the source for messages; `path` is the dotted key of this
  // table ("" for the document root).
  StrictTable(const toml::table& table, std::string file, std::string path);

  bool Has(std::string_view key);  // also marks the key as known
  bool Contains(std::string_view key) const { return table_->contains(key); }
  // The raw node (nullptr when absent), for keys that accept several types.
  const toml::node* Peek(std::string_view key) { return Lookup(key); }

  // Each getter returns nullopt when the key is absent, and throws SpecError
  // when present with the wrong type or out of range.
  std::optional<int64_t> Int(std::string_view key,
                             int64_t min = std::numeric_limits<int64_t>::min(),
                             int64_t max = std::numeric_limits<int64_t>::max());
  std::optional<double> Number(std::string_view key,
                               double min = -std::numeric_limits<double>::infinity(),
                               double max = std::numeric_limits<double>::infinity());
  std::optional<bool> Bool(std::string_view key);
  std::optional<std::string> String(std::string_view key);
  std::optional<std::string> Choice(std::string_view key, std::span<const std::string> allowed);
  // A number (in the base unit) or a string with a unit: "420GB", "15m", "3GB/s".
  std::optional<double> Bytes(std::string_view key);
  std::optional<double> Seconds(std::string_view key);
  std::optional<double> Bandwidth(std::string_view key);
  // A number or a string with a decimal suffix: "15T", "2.5B" (units::ParseCount).
  std::optional<double> Count(std::string_view key);
  std::optional<StrictTable> Table(std::string_view key);
  std::vector<StrictTable> TableArray(std::string_view key);
  std::vector<std::string> StringArray(std::string_view key);

  // Throws SpecError at the position of `key` (or of this table when absent).
  [[noreturn]] void Fail(std::string_view key, const std::string& problem,
                         const std::string& hint = {}) const;
  SourcePos PosOf(std::string_view key) const;
  SourcePos Pos() const;
  std::string KeyPath(std::string_view key) const;
  const std::string& file() const { return file_; }

  // Throws SpecError for the first key in the table that no getter asked for.
  void Finish() const;

 private:
  const toml::node* Lookup(std::string_view key);
  [[noreturn]] void FailType(std::string_view key, const toml::node& node,
                             std::string_view expected) const;

  const toml::table* table_;
  std::string file_;
  std::string path_;
  std::vector<std::string> asked_;
};

// The whole file; throws Error naming the path when it cannot be read.
std::string ReadTextFile(const std::string& path);

// Parses a TOML document; a syntax error becomes a SpecError with file:line:col.
toml::table ParseTomlText(std::string_view text, const std::string& name);

// "integer", "string", "table" ... for messages.
std::string_view TomlTypeName(const toml::node& node);

}  // namespace fmstack
