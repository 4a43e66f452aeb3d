#include "cli/options.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "util/error.h"
#include "util/units.h"

namespace fmstack::cli {
namespace {

namespace fs = std::filesystem;

// 1048576 -> "1,048,576"; 0.001 -> "0.001": as people write numbers.
std::string Plain(double v) {
  if (std::fabs(v) >= 1e15 || v != std::floor(v)) return fmt::format("{:g}", v);
  std::string digits = fmt::format("{}", static_cast<long long>(std::fabs(v)));
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return (v < 0 ? "-" : "") + digits;
}

// The text as a finite number, or nullopt.
std::optional<double> Number(const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

CLI::Validator NumberCheck(std::string desc, std::string expected, std::function<bool(double)> ok) {
  return CLI::Validator(
      [expected = std::move(expected), ok = std::move(ok)](std::string& text) -> std::string {
        const std::optional<double> v = Number(text);
        return v && ok(*v) ? "" : fmt::format("expected {}, got '{}'", expected, text);
      },
      std::move(desc));
}

// Up to this many entries of a directory are compared for a suggestion.
constexpr int kMaxEntriesCompared = 10000;

// `path` with each missing component replaced by the closest name in its
// parent directory (case or a typo), when that names something that exists.
std::optional<fs::path> NearMiss(const fs::path& path) {
  fs::path fixed;
  bool changed = false;
  std::error_code ec;
  for (const fs::path& part : path) {
    const fs::path next = fixed / part;
    if (fs::exists(next, ec) || part == "/" || part == "." || part == "..") {
      fixed = next;
      continue;
    }
    std::vector<std::string> names;
    const fs::path dir = fixed.empty() ? fs::path(".") : fixed;
    for (fs::directory_iterator it(dir, ec), end;
         !ec && it != end && names.size() < kMaxEntriesCompared; it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    const std::optional<std::string> match = ClosestMatch(part.string(), names);
    if (!match) return std::nullopt;
    fixed /= *match;
    changed = true;
  }
  if (!changed || !fs::exists(fixed, ec)) return std::nullopt;
  return fixed;
}

CLI::Validator PathCheck(std::string desc, bool want_directory) {
  return CLI::Validator(
      [want_directory](std::string& text) -> std::string {
        const char* what = want_directory ? "directory" : "file";
        std::error_code ec;
        const fs::file_status st = fs::status(text, ec);
        if (want_directory ? fs::is_directory(st) : fs::exists(st) && !fs::is_directory(st)) {
          return "";
        }
        if (fs::exists(st)) {
          return fmt::format("'{}' is a {}, expected a {}", text,
                             fs::is_directory(st) ? "directory" : "file", what);
        }
        const std::optional<fs::path> near = NearMiss(text);
        return fmt::format("no {} '{}'{}", what, text,
                           near ? fmt::format(" (did you mean '{}'?)", near->string()) : "");
      },
      std::move(desc));
}

// The deepest subcommand the parse chose (the app itself when none).
const CLI::App& Chosen(const CLI::App& app) {
  const CLI::App* at = &app;
  for (;;) {
    const std::vector<const CLI::App*> subs = at->get_subcommands({});
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : subs) {
      if (sub->parsed()) next = sub;
    }
    if (next == nullptr) return *at;
    at = next;
  }
}

// "fmstack bench comm" for the bench comm subcommand.
std::string CommandPath(const CLI::App& app) {
  std::string path;
  for (const CLI::App* at = &app; at != nullptr; at = at->get_parent()) {
    path = (at->get_parent() == nullptr ? std::string("fmstack") : at->get_name()) +
           (path.empty() ? "" : " " + path);
  }
  return path;
}

}  // namespace

CLI::Validator Positive() {
  return NumberCheck("POSITIVE", "a number above 0", [](double v) { return v > 0; });
}
CLI::Validator NonNegative() {
  return NumberCheck("NONNEGATIVE", "a number of 0 or more", [](double v) { return v >= 0; });
}
CLI::Validator Between(double lo, double hi) {
  return NumberCheck(fmt::format("{} to {}", Plain(lo), Plain(hi)),
                     fmt::format("a number from {} to {}", Plain(lo), Plain(hi)),
                     [lo, hi](double v) { return v >= lo && v <= hi; });
}
CLI::Validator OneOf(std::vector<std::string> names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ",") + n;
  return CLI::Validator(
      [names](std::string& text) -> std::string {
        if (std::find(names.begin(), names.end(), text) != names.end()) return "";
        return fmt::format("no '{}' {}", text, DidYouMeanOrList(text, names, "one of"));
      },
      "{" + list + "}");
}
CLI::Validator ExistingFile() {
  return PathCheck("FILE", false);
}
CLI::Validator ExistingDirectory() {
  return PathCheck("DIR", true);
}

CLI::Validator Days(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        std::optional<double> days = Number(text);
        if (!days) {
          try {
            days = units::ParseSeconds(text) / units::kDay;
          } catch (const std::invalid_argument&) {
          }
        }
        if (!days || !(*days >= lo && *days <= hi)) {
          return fmt::format(
              "expected days from {} to {} (a number, or a duration such as 30d, 12h, 2w), got "
              "'{}'",
              Plain(lo), Plain(hi), text);
        }
        text = fmt::format("{}", *days);
        return "";
      },
      fmt::format("days {} to {}", Plain(lo), Plain(hi)));
}

CLI::Validator Size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          units::ParseBytes(text);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "SIZE");
}

std::optional<std::string> UnknownOption(const CLI::App& app, std::span<char* const> args) {
  const CLI::App* at = &app;
  for (const char* raw : args) {
    const std::string_view token(raw);
    if (token == "--") break;
    if (!token.starts_with("--")) {
      // A subcommand's name walks into it; anything else is a value.
      for (const CLI::App* sub : at->get_subcommands({})) {
        if (sub->get_name() == token) {
          at = sub;
          break;
        }
      }
      continue;
    }
    const std::string name(token.substr(0, token.find('=')));
    bool known = false;
    std::vector<std::string> names;
    for (const CLI::App* a = at; a != nullptr && !known; a = a->get_parent()) {
      for (const CLI::Option* opt : a->get_options({})) {
        for (const std::string& l : opt->get_lnames()) {
          known = known || "--" + l == name;
          if (a == at && l != "help") names.push_back("--" + l);
        }
      }
    }
    if (!known) {
      return fmt::format("{}: error: no option {} {}; `{} --help` lists them", CommandPath(*at),
                         name, DidYouMeanOrList(name, names, "options"), CommandPath(*at));
    }
  }
  return std::nullopt;
}

int ReportParseError(const CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
  const CLI::App& chosen = Chosen(app);
  std::cerr << fmt::format("{}: error: {}; `{} --help` lists the options\n", CommandPath(chosen),
                           e.what(), CommandPath(chosen));
  return kExitBadInput;
}

}  // namespace fmstack::cli
