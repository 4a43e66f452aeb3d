#include "train/train_state.h"

#include "util/xxh3.h"

namespace fmstack::train {

nlohmann::json ShapeJson(const workload::TransformerShape& s) {
  return {{"name", s.name},      {"layers", s.layers},         {"hidden", s.hidden},
          {"heads", s.heads},    {"ffn_hidden", s.ffn_hidden}, {"vocab", s.vocab},
          {"seq_len", s.seq_len}};
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

uint64_t HashFloats(std::span<const float> data) {
  return Xxh3(data);
}

}  // namespace fmstack::train
