// cli/options: one style for command-line errors, as the job file's errors
// read: the option, what was expected, what was given, and a fix or the
// names to pick from. The validators replace CLI11's, whose messages print
// ranges up to 1.8e308 and files without a suggestion.
//
// Exit status, the same for every command (docs/cli.md "Exit status"):
//   0   done;
//   1   the work ran and its result is a failure (a run that gave up, a
//       checkpoint that fails verification, a burn-in check, a bench request);
//   2   bad input: an option, a job or cluster file, a missing file, a
//       configuration the pre-flight check refuses; nothing was started;
//   3   an internal error (a bug; the message says what failed);
//   75  a worker that stops for its supervisor to recover (under `run` only);
//   128+N  a run stopped by signal N after its emergency checkpoint.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fmstack::cli {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInternal = 3;

// A number above 0 / at least 0 / from lo to hi (inclusive), shown as
// people write numbers ("1 to 1,048,576").
CLI::Validator Positive();
CLI::Validator NonNegative();
CLI::Validator Between(double lo, double hi);
// One of `names`; a typo gets a did-you-mean, anything else the list.
CLI::Validator OneOf(std::vector<std::string> names);
// A file / a directory that exists; a near miss in the same directory (a
// different case, a typo) is suggested.
CLI::Validator ExistingFile();
CLI::Validator ExistingDirectory();
// A number of days, or a duration with a unit ("30d", "12h", "2w"), which it
// turns into days; from lo to hi days. A transform: add it with ->transform.
CLI::Validator Days(double lo, double hi);

// The first option in `args` (argv without the program name) that the
// chosen command does not have, as an error message with a did-you-mean or
// the options to pick from; nullopt when every option is known. Walks into
// subcommands by name and stops at "--".
std::optional<std::string> UnknownOption(const CLI::App& app, std::span<char* const> args);

// A size: binary prefixes are binary, decimal ones decimal ("64KiB" is
// 65,536 bytes, "64K" and "64KB" 64,000; a bare number is bytes).
CLI::Validator Size();

// Prints CLI11's parse error in fmstack's style and returns the exit status
// (0 for --help and --version, kExitBadInput otherwise).
int ReportParseError(const CLI::App& app, const CLI::ParseError& e);

}  // namespace fmstack::cli
