#include "data/pipeline_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace fmstack::data {
namespace {

namespace fs = std::filesystem;

struct Job {
  fs::path dir = fs::temp_directory_path() / ("spec_test." + std::to_string(::getpid()));
  Job() {
    fs::create_directories(dir / "in");
    std::ofstream(dir / "in" / "a.jsonl") << "";
  }
  ~Job() { fs::remove_all(dir); }
  std::string Write(const std::string& body) const {
    std::ofstream(dir / "job.toml") << body;
    return (dir / "job.toml").string();
  }
};

std::string Error(const Job& j, const std::string& body) {
  try {
    LoadPipelineSpec(j.Write(body));
  } catch (const fmstack::Error& e) {
    return e.what();
  }
  return "accepted";
}

const std::string kHead = "[data.pipeline]\ninputs = [\"in/*.jsonl\"]\n";

TEST(PipelineSpec, StagesInOrderWithTheirKeys) {
  Job j;
  const PipelineSpec s = LoadPipelineSpec(j.Write(kHead + R"(workers = 3
[[data.pipeline.stage]]
kind = "declared-language"
keep = ["ja"]
[[data.pipeline.stage]]
kind = "extract"
[[data.pipeline.stage]]
kind = "footer"
last_lines = 3
[[data.pipeline.stage]]
kind = "quality"
min_chars = 10
min_hiragana = -1
[[data.pipeline.stage]]
kind = "minhash-dedup"
preset = "fineweb"
[[data.pipeline.stage]]
kind = "tokenize"
vocab = 512
)"));
  ASSERT_EQ(s.stages.size(), 6u);
  EXPECT_EQ(s.Find("footer")->last_lines, 3);
  EXPECT_EQ(s.Find("footer")->phrases.size(), 5u);
  EXPECT_EQ(s.workers, 3);
  EXPECT_EQ(s.inputs.size(), 1u);
  EXPECT_EQ(s.out, (j.dir / "corpus").string());
  EXPECT_EQ(s.Find("quality")->quality.min_chars, 10);
  EXPECT_EQ(s.Find("quality")->quality.min_hiragana, -1);
  EXPECT_EQ(s.Find("minhash-dedup")->minhash.bands, 14);
  EXPECT_EQ(s.Find("tokenize")->vocab, 512);
}

TEST(PipelineSpec, MistakesAreNamedWithTheirPlace) {
  Job j;
  auto stage = [](const std::string& body) { return "[[data.pipeline.stage]]\n" + body + "\n"; };
  EXPECT_NE(Error(j, kHead + stage("kind = \"extract\"") + stage("kind = \"dedupe\"")).find("kind"),
            std::string::npos);
  EXPECT_NE(
      Error(j, kHead + stage("kind = \"extract\"") + stage("kind = \"quality\"\nmin_char = 3"))
          .find("min_char"),
      std::string::npos);
  EXPECT_NE(Error(j, kHead + stage("kind = \"quality\"") + stage("kind = \"extract\""))
                .find("before \"extract\""),
            std::string::npos);
  EXPECT_NE(Error(j, kHead + stage("kind = \"extract\"") + stage("kind = \"tokenize\"") +
                         stage("kind = \"exact-dedup\""))
                .find("after \"tokenize\""),
            std::string::npos);
  EXPECT_NE(Error(j, kHead + stage("kind = \"extract\"") + stage("kind = \"language\"\nkeep = []"))
                .find("empty list"),
            std::string::npos);
  EXPECT_NE(Error(j, kHead).find("no \"extract\" stage"), std::string::npos);
  EXPECT_NE(Error(j, "[data.pipeline]\ninputs = [\"in/none*.warc\"]\n").find("no such file"),
            std::string::npos);
  EXPECT_NE(Error(j, "name = \"x\"\n").find("not a corpus pipeline job"), std::string::npos);
  EXPECT_NE(Error(j, kHead + stage("kind = \"extract\"") +
                         stage("kind = \"minhash-dedup\"\nbands = 100\nrows = 100"))
                .find("4096"),
            std::string::npos);
}

}  // namespace
}  // namespace fmstack::data
