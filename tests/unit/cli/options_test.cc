// cli/options: the command-line errors name the option, what was expected
// and what was given, with a did-you-mean where one is close.
#include "cli/options.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fmstack::cli {
namespace {

// The validator's message for `text`, "" when it passes; `text` as it leaves.
std::string Check(const CLI::Validator& v, std::string& text) {
  return v(text);
}
std::string Check(const CLI::Validator& v, std::string&& text) {
  return v(text);
}

TEST(Options, NumbersSayWhatWasExpectedInPlainNumbers) {
  EXPECT_EQ(Check(Positive(), "3"), "");
  EXPECT_EQ(Check(Positive(), "0"), "expected a number above 0, got '0'");
  EXPECT_EQ(Check(Positive(), "abc"), "expected a number above 0, got 'abc'");
  EXPECT_EQ(Check(Positive(), "inf"), "expected a number above 0, got 'inf'");
  EXPECT_EQ(Check(NonNegative(), "0"), "");
  EXPECT_EQ(Check(NonNegative(), "-1"), "expected a number of 0 or more, got '-1'");
  EXPECT_EQ(Check(Between(1, 1 << 20), "2000000"),
            "expected a number from 1 to 1,048,576, got '2000000'");
  EXPECT_EQ(Check(Between(0.01, 1), "0.5"), "");
  EXPECT_EQ(Check(Between(0.01, 1), "2"), "expected a number from 0.01 to 1, got '2'");
}

TEST(Options, NamesGetADidYouMeanOrTheList) {
  const CLI::Validator formats = OneOf({"table", "json", "markdown"});
  EXPECT_EQ(Check(formats, "json"), "");
  EXPECT_EQ(Check(formats, "tabel"), "no 'tabel' (did you mean 'table'?)");
  EXPECT_EQ(Check(formats, "xml"), "no 'xml' (one of: table, json, markdown)");
}

TEST(Options, DaysTakeANumberOrADuration) {
  const CLI::Validator days = Days(0.001, 36500);
  std::string text = "30d";
  EXPECT_EQ(Check(days, text), "");
  EXPECT_EQ(text, "30");
  text = "2w";
  EXPECT_EQ(Check(days, text), "");
  EXPECT_EQ(text, "14");
  text = "12";
  EXPECT_EQ(Check(days, text), "");
  EXPECT_EQ(text, "12");
  EXPECT_EQ(Check(days, "30x"),
            "expected days from 0.001 to 36,500 (a number, or a duration such as 30d, 12h, 2w), "
            "got '30x'");
  EXPECT_NE(Check(days, "200y"), "");
}

TEST(Options, SizesKeepBinaryAndDecimalPrefixesApart) {
  EXPECT_EQ(Check(Size(), "64KiB"), "");
  EXPECT_EQ(Check(Size(), "64K"), "");
  EXPECT_NE(Check(Size(), "64Q").find("unknown unit"), std::string::npos);
}

TEST(Options, AMissingFileSuggestsItsNearMiss) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("options_test_" + std::to_string(getpid()));
  fs::create_directories(dir / "examples");
  std::ofstream(dir / "examples" / "job.toml") << "x";
  const std::string base = dir.string();
  EXPECT_EQ(Check(ExistingFile(), base + "/examples/job.toml"), "");
  EXPECT_EQ(
      Check(ExistingFile(), base + "/Examples/Job.toml"),
      "no file '" + base + "/Examples/Job.toml' (did you mean '" + base + "/examples/job.toml'?)");
  EXPECT_EQ(
      Check(ExistingFile(), base + "/examples/jbo.toml"),
      "no file '" + base + "/examples/jbo.toml' (did you mean '" + base + "/examples/job.toml'?)");
  EXPECT_EQ(Check(ExistingFile(), base + "/examples/zzzzzzzz.toml"),
            "no file '" + base + "/examples/zzzzzzzz.toml'");
  EXPECT_EQ(Check(ExistingFile(), base + "/examples"),
            "'" + base + "/examples' is a directory, expected a file");
  EXPECT_EQ(Check(ExistingDirectory(), base + "/examples"), "");
  EXPECT_EQ(Check(ExistingDirectory(), base + "/examples/job.toml"),
            "'" + base + "/examples/job.toml' is a file, expected a directory");
  fs::remove_all(dir);
}

// argv without the program name.
std::vector<char*> Args(std::vector<std::string>& words) {
  std::vector<char*> out;
  for (std::string& w : words) out.push_back(w.data());
  return out;
}

TEST(Options, AnUnknownOptionIsNamedWithItsCommandAndANearMiss) {
  CLI::App app{"t"};
  CLI::App* run = app.add_subcommand("run", "r");
  int steps = 0;
  run->add_option("--steps", steps, "s");
  CLI::App* ckpt = app.add_subcommand("ckpt", "c");
  CLI::App* verify = ckpt->add_subcommand("verify", "v");
  int step = 0;
  verify->add_option("--step", step, "s");

  std::vector<std::string> ok = {"run", "--steps", "3", "--", "prog", "--anything"};
  EXPECT_EQ(UnknownOption(app, Args(ok)), std::nullopt);
  std::vector<std::string> eq = {"run", "--steps=3"};
  EXPECT_EQ(UnknownOption(app, Args(eq)), std::nullopt);
  std::vector<std::string> typo = {"run", "--step", "3"};
  EXPECT_EQ(UnknownOption(app, Args(typo)).value_or(""),
            "fmstack run: error: no option --step (did you mean '--steps'?); `fmstack run "
            "--help` lists them");
  std::vector<std::string> nested = {"ckpt", "verify", "--stpe", "3"};
  EXPECT_EQ(UnknownOption(app, Args(nested)).value_or(""),
            "fmstack ckpt verify: error: no option --stpe (did you mean '--step'?); `fmstack "
            "ckpt verify --help` lists them");
  std::vector<std::string> far = {"ckpt", "verify", "--xyzzy"};
  EXPECT_EQ(UnknownOption(app, Args(far)).value_or(""),
            "fmstack ckpt verify: error: no option --xyzzy (options: --step); `fmstack ckpt "
            "verify --help` lists them");
}

}  // namespace
}  // namespace fmstack::cli
