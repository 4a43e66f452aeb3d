#include "ckpt/format.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include "util/error.h"

namespace fmstack::ckpt {
namespace {

Manifest TwoRankManifest() {
  Manifest m;
  m.counters = {12, 12, 4096, 1, 2};
  m.layout = {2, 1};
  m.files["rank-00000.safetensors"] = {0, 4096 + 24, 4096, 4096, {1}};
  m.files["rank-00001.safetensors"] = {1, 4096 + 16, 4096, 4096, {2}};
  m.tensors["w"] = {DType::kF32,
                    {2, 5},
                    {{"rank-00000.safetensors", 0, 6, 0}, {"rank-00001.safetensors", 6, 4, 0}}};
  return m;
}

TEST(FormatTest, ManifestRoundTripsThroughJson) {
  const Manifest m = TwoRankManifest();
  const Manifest back = Manifest::FromJson(m.ToJson(), "manifest.json");
  EXPECT_EQ(back.ToJson(), m.ToJson());
  EXPECT_EQ(back.tensors.at("w").pieces[1].begin, 6);
  EXPECT_EQ(back.TensorsAt("rank-00001.safetensors", 0, 8), std::vector<std::string>{"w"});
}

TEST(FormatTest, GapsOverlapsAndBadChecksumCountsAreRefused) {
  Manifest m = TwoRankManifest();
  m.tensors["w"].pieces[1].begin = 7;
  EXPECT_THROW(m.Validate("m"), Error);
  m = TwoRankManifest();
  m.tensors["w"].pieces[1].count = 5;  // runs past the file and the tensor
  EXPECT_THROW(m.Validate("m"), Error);
  m = TwoRankManifest();
  m.files["rank-00000.safetensors"].checksums.push_back(3);
  EXPECT_THROW(m.Validate("m"), Error);
  nlohmann::json j = TwoRankManifest().ToJson();
  j["tensors"]["w"]["dtype"] = "F33";
  // The manifest's own checksum catches the change first ...
  try {
    Manifest::FromJson(j, "dir/manifest.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/manifest.json: manifest checksum mismatch"),
              std::string::npos)
        << e.what();
  }
  // ... and a manifest written that way on purpose is still refused by name.
  j.erase("xxh3");
  const std::string text = j.dump();
  j["xxh3"] = fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
  try {
    Manifest::FromJson(j, "dir/manifest.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dir/manifest.json: tensor \"w\": unknown dtype \"F33\""),
              std::string::npos)
        << e.what();
  }
  // One flipped offset: a valid-looking manifest that would load other bytes.
  nlohmann::json k = TwoRankManifest().ToJson();
  k["tensors"]["w"]["pieces"][1]["offset"] =
      k["tensors"]["w"]["pieces"][1]["offset"].get<int64_t>() ^ 4;
  EXPECT_THROW(Manifest::FromJson(k, "m"), Error);
  nlohmann::json old = TwoRankManifest().ToJson();
  old.erase("xxh3");
  try {
    Manifest::FromJson(old, "m");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no manifest checksum"), std::string::npos) << e.what();
  }
}

TEST(FormatTest, HostileSafetensorsHeadersAreRefused) {
  auto header = [](const std::string& json) {
    std::string out(8, '\0');
    const uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return out + json;
  };
  EXPECT_NO_THROW(ParseSafetensorsHeader(
      header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), "f", 8));
  for (
      const char* bad : {
          R"({"a":{"dtype":"F31","shape":[2],"data_offsets":[0,8]}})",    // dtype
          R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",    // size
          R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,-8]}})",  // negative
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",   // past the data
          R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      }) {
    EXPECT_THROW(ParseSafetensorsHeader(header(bad), "f", 8), Error) << bad;
  }
}

TEST(FormatTest, SafetensorsHeaderIsAlignedAndParses) {
  const std::string h =
      SafetensorsHeader({{"a", DType::kBF16, {2, 3}, 0, 6}, {"b", DType::kF32, {10}, 4, 3}});
  EXPECT_EQ(h.size() % 4096, 0u);
  const SafetensorsIndex idx = ParseSafetensorsHeader(h, "x");
  EXPECT_EQ(idx.data_offset, static_cast<int64_t>(h.size()));
  EXPECT_EQ(idx.entries.at("a").end, 12);
  EXPECT_EQ(idx.entries.at("b@4+3").shape, std::vector<int64_t>{3});
  EXPECT_EQ(idx.entries.at("b@4+3").begin, 12);
  EXPECT_EQ(idx.metadata.at("writer"), "fmstack");
}

TEST(FormatTest, StepNames) {
  EXPECT_EQ(StepDirName(1200), "step-00001200");
  EXPECT_EQ(ParseStepDirName("step-00001200"), 1200);
  EXPECT_FALSE(ParseStepDirName("step-12a").has_value());
  EXPECT_FALSE(ParseStepDirName("latest").has_value());
  EXPECT_EQ(RankFileName(3), "rank-00003.safetensors");
}

}  // namespace
}  // namespace fmstack::ckpt

#include "ckpt/choose.h"

namespace fmstack::ckpt {
namespace {

TEST(ChooseRestore, NewestCommittedValidReachableFromTheFastestTier) {
  const std::vector<CheckpointCopy> copies = {
      {.step = 100, .tier = 0, .committed = true},
      {.step = 100, .tier = 1, .committed = true},
      {.step = 200, .tier = 0, .committed = true, .reachable = false},  // replaced node's disk
      {.step = 200, .tier = 1, .committed = true},
      {.step = 300, .tier = 0, .committed = false},                 // still draining
      {.step = 250, .tier = 1, .committed = true, .valid = false},  // after the corruption
  };
  const std::optional<size_t> pick = ChooseRestore(copies);
  ASSERT_TRUE(pick);
  EXPECT_EQ(*pick, 3u);
  EXPECT_FALSE(ChooseRestore(std::vector<CheckpointCopy>{{.committed = false}}));
}

}  // namespace
}  // namespace fmstack::ckpt
