#include "train/train_state.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::train {
namespace {

constexpr char kMagic[8] = {'F', 'M', 'S', 'T', 'A', 'T', 'E', '1'};
constexpr const char* kArrays[] = {"params", "m", "v"};

int64_t Padded(int64_t n) {
  return (n + 63) / 64 * 64;
}

workload::TransformerShape ShapeFromJson(const nlohmann::json& j) {
  workload::TransformerShape s;  // GPT-2 style: the defaults of every other field
  s.name = j.at("name").get<std::string>();
  s.layers = j.at("layers").get<int64_t>();
  s.hidden = j.at("hidden").get<int64_t>();
  s.heads = s.kv_heads = j.at("heads").get<int64_t>();
  s.ffn_hidden = j.at("ffn_hidden").get<int64_t>();
  s.vocab = j.at("vocab").get<int64_t>();
  s.seq_len = j.at("seq_len").get<int64_t>();
  return s;
}

struct RawHeader {
  nlohmann::json json;
  int64_t data_offset = 0;
};

RawHeader ReadRaw(std::ifstream& f, const std::string& path) {
  char magic[8];
  uint64_t length = 0;
  if (!f.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 ||
      !f.read(reinterpret_cast<char*>(&length), 8) || length > (1u << 20)) {
    throw Error(fmt::format("{}: not a train state file (expected magic \"FMSTATE1\")", path));
  }
  std::string text(length, '\0');
  if (!f.read(text.data(), static_cast<std::streamsize>(length))) {
    throw Error(fmt::format("{}: truncated header", path));
  }
  RawHeader h;
  try {
    h.json = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: header is not valid JSON: {}", path, e.what()));
  }
  h.data_offset = Padded(16 + static_cast<int64_t>(length));
  return h;
}

TrainStateHeader Decode(const nlohmann::json& j, const std::string& path) {
  try {
    if (j.at("format") != "fmstack-trainstate" || j.at("version") != 1) {
      throw Error("unsupported format or version");
    }
    TrainStateHeader h;
    h.shape = ShapeFromJson(j.at("model"));
    h.counters.step = j.at("step").get<int64_t>();
    h.counters.tokens = j.at("tokens").get<int64_t>();
    h.counters.seed = j.at("seed").get<uint64_t>();
    h.counters.rng = j.at("rng").get<uint64_t>();
    h.data_dir = j.at("data_dir").get<std::string>();
    h.count = j.at("count").get<int64_t>();
    return h;
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: bad header: {}", path, e.what()));
  }
}

}  // namespace

nlohmann::json ShapeJson(const workload::TransformerShape& s) {
  return {{"name", s.name},      {"layers", s.layers},         {"hidden", s.hidden},
          {"heads", s.heads},    {"ffn_hidden", s.ffn_hidden}, {"vocab", s.vocab},
          {"seq_len", s.seq_len}};
}

uint64_t HashFloats(std::span<const float> data) {
  return XXH3_64bits(data.data(), data.size_bytes());
}

void SaveTrainState(const std::string& path, const workload::TransformerShape& shape,
                    const TrainState& state, const std::string& data_dir) {
  const std::span<const float> arrays[] = {state.params, state.m, state.v};
  nlohmann::json j = {{"format", "fmstack-trainstate"},  {"version", 1},
                      {"model", ShapeJson(shape)},       {"step", state.counters.step},
                      {"tokens", state.counters.tokens}, {"seed", state.counters.seed},
                      {"rng", state.counters.rng},       {"data_dir", data_dir},
                      {"count", state.params.size()}};
  for (int i = 0; i < 3; ++i) j["xxh3"][kArrays[i]] = HashFloats(arrays[i]);
  const std::string text = j.dump();
  const uint64_t length = text.size();
  AtomicFileWriter w(path);
  w.Write(kMagic, 8);
  w.Write(&length, 8);
  w.Write(text.data(), text.size());
  const std::string pad(Padded(16 + static_cast<int64_t>(length)) - 16 - length, '\0');
  w.Write(pad.data(), pad.size());
  for (const auto& a : arrays) w.Write(a.data(), a.size_bytes());
  w.Commit();
}

TrainStateHeader ReadTrainStateHeader(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the train state", path));
  return Decode(ReadRaw(f, path).json, path);
}

TrainStateHeader LoadTrainState(const std::string& path, const workload::TransformerShape& shape,
                                TrainState& state) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the train state", path));
  const RawHeader raw = ReadRaw(f, path);
  TrainStateHeader h = Decode(raw.json, path);
  const workload::TransformerShape& s = h.shape;
  if (s.layers != shape.layers || s.hidden != shape.hidden || s.heads != shape.heads ||
      s.ffn_hidden != shape.ffn_hidden || s.vocab != shape.vocab || s.seq_len != shape.seq_len) {
    throw Error(fmt::format(
        "{}: saved for model {} ({}L {}h {}heads vocab {} seq {}), but the job trains {} "
        "({}L {}h {}heads vocab {} seq {})",
        path, s.name, s.layers, s.hidden, s.heads, s.vocab, s.seq_len, shape.name, shape.layers,
        shape.hidden, shape.heads, shape.vocab, shape.seq_len));
  }
  if (h.count != static_cast<int64_t>(state.params.size())) {
    throw Error(fmt::format("{}: holds {} parameters, the model has {}", path, h.count,
                            state.params.size()));
  }
  f.seekg(raw.data_offset);
  std::span<float> arrays[] = {state.params, state.m, state.v};
  for (int i = 0; i < 3; ++i) {
    f.read(reinterpret_cast<char*>(arrays[i].data()),
           static_cast<std::streamsize>(arrays[i].size_bytes()));
    if (static_cast<size_t>(f.gcount()) != arrays[i].size_bytes()) {
      throw Error(fmt::format("{}: truncated in array \"{}\"", path, kArrays[i]));
    }
    if (HashFloats(arrays[i]) != raw.json.at("xxh3").at(kArrays[i]).get<uint64_t>()) {
      throw Error(fmt::format("{}: checksum mismatch in array \"{}\": the file is corrupt", path,
                              kArrays[i]));
    }
  }
  state.counters = h.counters;
  return h;
}

}  // namespace fmstack::train
