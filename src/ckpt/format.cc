#include "ckpt/format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "util/error.h"
#include "util/xxh3.h"

namespace fmstack::ckpt {
namespace {

struct DTypeInfo {
  DType type;
  const char* name;
  int64_t size;
};
constexpr DTypeInfo kDTypes[] = {{DType::kF32, "F32", 4}, {DType::kBF16, "BF16", 2},
                                 {DType::kF16, "F16", 2}, {DType::kI64, "I64", 8},
                                 {DType::kI32, "I32", 4}, {DType::kU8, "U8", 1}};

const DTypeInfo& Info(DType t) {
  for (const DTypeInfo& i : kDTypes)
    if (i.type == t) return i;
  return kDTypes[0];
}

// Elements of a shape; -1 when a dimension is negative or the product
// overflows (a corrupt or hostile header, never a real tensor).
int64_t Product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

// Shard files are named by the writer; one read back must be a plain name in
// the step directory, never a path.
bool PlainFileName(const std::string& name) {
  return !name.empty() && name.size() <= 255 && name[0] != '.' &&
         name.find_first_not_of(
             "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
             "0123456789._-") == std::string::npos;
}

// XXH3-64 of the manifest's canonical text without its own checksum.
std::string ManifestDigest(nlohmann::json j) {
  j.erase("xxh3");
  const std::string text = j.dump();
  return fmt::format("{:016x}", Xxh3(text.data(), text.size()));
}

std::string PieceName(const ShardPiece& p) {
  const int64_t n = Product(p.global_shape);
  if (p.begin == 0 && p.count == n) return p.tensor;
  return fmt::format("{}@{}+{}", p.tensor, p.begin, p.count);
}

}  // namespace

const char* DTypeName(DType t) {
  return Info(t).name;
}
int64_t DTypeSize(DType t) {
  return Info(t).size;
}

DType ParseDType(const std::string& name, const std::string& where) {
  for (const DTypeInfo& i : kDTypes)
    if (name == i.name) return i.type;
  throw Error(fmt::format("{}: unknown dtype \"{}\" (expected F32, BF16, F16, I64, I32 or U8)",
                          where, name));
}

int64_t TensorEntry::elements() const {
  return Product(shape);
}

nlohmann::json Manifest::ToJson() const {
  nlohmann::json j = {{"format", "fmstack-checkpoint"},
                      {"version", kFormatVersion},
                      {"fmstack_version", fmstack_version},
                      {"step", counters.step},
                      {"optimizer_step", counters.optimizer_step},
                      {"data_position", counters.data_position},
                      {"rng", {{"seed", counters.seed}, {"state", counters.rng}}},
                      {"layout", {{"world", layout.world}, {"zero_stage", layout.zero_stage}}},
                      {"model", model}};
  nlohmann::json& ts = j["tensors"] = nlohmann::json::object();
  for (const auto& [name, t] : tensors) {
    nlohmann::json pieces = nlohmann::json::array();
    for (const Piece& p : t.pieces) {
      pieces.push_back(
          {{"file", p.file}, {"begin", p.begin}, {"count", p.count}, {"offset", p.offset}});
    }
    ts[name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"pieces", pieces}};
  }
  nlohmann::json& fs = j["files"] = nlohmann::json::object();
  for (const auto& [name, f] : files) {
    fs[name] = {{"rank", f.rank},
                {"size", f.size},
                {"data_offset", f.data_offset},
                {"chunk_bytes", f.chunk_bytes},
                {"checksum", "xxh3-64"},
                {"checksums", f.checksums}};
  }
  // Checked before anything else is read: a flipped offset would otherwise
  // verify clean and load other bytes.
  j["xxh3"] = ManifestDigest(j);
  return j;
}

namespace {

TensorEntry TensorFromJson(const nlohmann::json& t, const std::string& where) {
  TensorEntry e;
  e.dtype = ParseDType(t.at("dtype").get<std::string>(), where);
  e.shape = t.at("shape").get<std::vector<int64_t>>();
  for (const nlohmann::json& p : t.at("pieces")) {
    e.pieces.push_back({p.at("file").get<std::string>(), p.at("begin").get<int64_t>(),
                        p.at("count").get<int64_t>(), p.at("offset").get<int64_t>()});
  }
  return e;
}

FileEntry FileFromJson(const nlohmann::json& f) {
  FileEntry e;
  e.rank = f.at("rank").get<int>();
  e.size = f.at("size").get<int64_t>();
  e.data_offset = f.at("data_offset").get<int64_t>();
  e.chunk_bytes = f.at("chunk_bytes").get<int64_t>();
  e.checksums = f.at("checksums").get<std::vector<uint64_t>>();
  return e;
}

}  // namespace

Manifest Manifest::FromJson(const nlohmann::json& j, const std::string& where) {
  Manifest m;
  try {
    if (!j.is_object() || j.value("format", "") != "fmstack-checkpoint") {
      throw Error("\"format\" is not \"fmstack-checkpoint\"");
    }
    if (!j.contains("xxh3") || !j["xxh3"].is_string()) {
      throw Error("no manifest checksum (\"xxh3\"): written by an older fmstack or damaged");
    }
    const std::string digest = ManifestDigest(j);
    if (j["xxh3"].get<std::string>() != digest) {
      throw Error(fmt::format("manifest checksum mismatch: xxh3 {}, the manifest says {}", digest,
                              j["xxh3"].get<std::string>()));
    }
    if (j.at("version").get<int>() > kFormatVersion) {
      throw Error(fmt::format("format version {} is newer than this fmstack reads ({})",
                              j.at("version").get<int>(), kFormatVersion));
    }
    m.fmstack_version = j.value("fmstack_version", "");
    m.counters.step = j.at("step").get<int64_t>();
    m.counters.optimizer_step = j.at("optimizer_step").get<int64_t>();
    m.counters.data_position = j.at("data_position").get<int64_t>();
    m.counters.seed = j.at("rng").at("seed").get<uint64_t>();
    m.counters.rng = j.at("rng").at("state").get<uint64_t>();
    m.layout.world = j.at("layout").at("world").get<int>();
    m.layout.zero_stage = j.at("layout").at("zero_stage").get<int>();
    m.model = j.value("model", nlohmann::json::object());
    for (const auto& [name, t] : j.at("tensors").items()) {
      m.tensors[name] = TensorFromJson(t, fmt::format("{}: tensor \"{}\"", where, name));
    }
    for (const auto& [name, f] : j.at("files").items()) {
      if (!PlainFileName(name))
        throw Error(fmt::format("file name \"{}\" is not a plain name", name));
      m.files[name] = FileFromJson(f);
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a valid manifest: {}", where, e.what()));
  }
  m.Validate(where);
  return m;
}

void Manifest::Validate(const std::string& where) const {
  for (const auto& [name, t] : tensors) {
    if (t.elements() < 0) {
      throw Error(
          fmt::format("{}: tensor \"{}\": shape has a negative or overflowing size", where, name));
    }
    int64_t next = 0;
    for (const Piece& p : t.pieces) {
      if (p.begin != next) {
        throw Error(fmt::format("{}: tensor \"{}\": pieces {} at element {} (expected {}): {}",
                                where, name, p.begin < next ? "overlap" : "leave a gap", p.begin,
                                next, p.file));
      }
      next = p.begin + p.count;
      const auto f = files.find(p.file);
      if (f == files.end()) {
        throw Error(
            fmt::format("{}: tensor \"{}\" points at file \"{}\", which the manifest "
                        "does not list",
                        where, name, p.file));
      }
      int64_t bytes = 0, end = 0;
      if (p.offset < 0 || p.count < 0 ||
          __builtin_mul_overflow(p.count, DTypeSize(t.dtype), &bytes) ||
          __builtin_add_overflow(f->second.data_offset + p.offset, bytes, &end) ||
          end > f->second.size) {
        throw Error(
            fmt::format("{}: tensor \"{}\" piece at element {} ends at byte {} of {}, "
                        "which holds {} bytes",
                        where, name, p.begin, end, p.file, f->second.size));
      }
    }
    if (next != t.elements()) {
      throw Error(fmt::format("{}: tensor \"{}\": pieces cover {} of {} elements", where, name,
                              next, t.elements()));
    }
  }
  for (const auto& [name, f] : files) {
    if (f.size < 0 || f.data_offset < 8 || f.data_offset > f.size) {
      throw Error(fmt::format("{}: file \"{}\": data offset {} outside its {} bytes", where, name,
                              f.data_offset, f.size));
    }
    const int64_t data = f.size - f.data_offset;
    const int64_t chunks = f.chunk_bytes > 0 ? (data + f.chunk_bytes - 1) / f.chunk_bytes : -1;
    if (f.chunk_bytes <= 0 || f.chunk_bytes > kMaxChunkBytes ||
        chunks != static_cast<int64_t>(f.checksums.size())) {
      throw Error(fmt::format("{}: file \"{}\": {} checksums for {} data bytes in chunks of {}",
                              where, name, f.checksums.size(), data, f.chunk_bytes));
    }
  }
}

std::vector<std::string> Manifest::TensorsAt(const std::string& file, int64_t lo,
                                             int64_t hi) const {
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) {
    for (const Piece& p : t.pieces) {
      const int64_t end = p.offset + p.count * DTypeSize(t.dtype);
      if (p.file == file && p.offset < hi && end > lo) {
        names.push_back(name);
        break;
      }
    }
  }
  return names;
}

nlohmann::json RankIndexJson(const std::string& file, const FileEntry& entry,
                             const std::map<std::string, TensorEntry>& pieces) {
  Manifest m;
  m.files[file] = entry;
  m.tensors = pieces;
  nlohmann::json j = m.ToJson();
  return {{"file", file}, {"files", j["files"]}, {"tensors", j["tensors"]}};
}

void MergeRankIndex(const nlohmann::json& index, const std::string& where, Manifest& into) {
  try {
    for (const auto& [name, f] : index.at("files").items()) into.files[name] = FileFromJson(f);
    for (const auto& [name, t] : index.at("tensors").items()) {
      TensorEntry part = TensorFromJson(t, fmt::format("{}: tensor \"{}\"", where, name));
      auto [it, fresh] = into.tensors.try_emplace(name, part);
      if (fresh) continue;
      if (it->second.shape != part.shape || it->second.dtype != part.dtype) {
        throw Error(
            fmt::format("tensor \"{}\" has another shape or dtype than on other ranks", name));
      }
      auto& pieces = it->second.pieces;
      pieces.insert(pieces.end(), part.pieces.begin(), part.pieces.end());
      std::sort(pieces.begin(), pieces.end(),
                [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not a valid rank index: {}", where, e.what()));
  }
}

std::string PadTensorName(int64_t n) {
  return fmt::format("{}{}", kPadTensorPrefix, n);
}

bool IsPadTensorName(std::string_view name) {
  return name.starts_with(kPadTensorPrefix);
}

std::string SafetensorsHeader(const std::vector<ShardPiece>& pieces) {
  nlohmann::json h = nlohmann::json::object();
  int64_t offset = 0;
  for (const ShardPiece& p : pieces) {
    const int64_t bytes = p.count * DTypeSize(p.dtype);
    const bool whole = p.begin == 0 && p.count == Product(p.global_shape);
    h[PieceName(p)] = {{"dtype", DTypeName(p.dtype)},
                       {"shape", whole ? p.global_shape : std::vector<int64_t>{p.count}},
                       {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  h["__metadata__"] = {{"format", "pt"}, {"writer", "fmstack"}};
  std::string text = h.dump();
  const auto align = static_cast<size_t>(kShardAlign);
  const size_t total = (8 + text.size() + align - 1) / align * align;
  text.resize(total - 8, ' ');
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

int64_t SafetensorsHeaderBytes(std::string_view first8, const std::string& where) {
  if (first8.size() < 8) throw Error(fmt::format("{}: shorter than a safetensors header", where));
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<uint8_t>(first8[i])) << (8 * i);
  if (n > (100u << 20)) {
    throw Error(
        fmt::format("{}: safetensors header claims {} bytes: not a safetensors file", where, n));
  }
  return 8 + static_cast<int64_t>(n);
}

SafetensorsIndex ParseSafetensorsHeader(std::string_view prefix, const std::string& where,
                                        int64_t data_bytes) {
  const int64_t total = SafetensorsHeaderBytes(prefix, where);
  if (static_cast<int64_t>(prefix.size()) < total) {
    throw Error(fmt::format("{}: truncated in the safetensors header", where));
  }
  SafetensorsIndex idx;
  idx.data_offset = total;
  try {
    const nlohmann::json h =
        nlohmann::json::parse(prefix.substr(8, static_cast<size_t>(total - 8)));
    for (const auto& [name, e] : h.items()) {
      if (name == "__metadata__") {
        idx.metadata = e.get<std::map<std::string, std::string>>();
        continue;
      }
      SafetensorsEntry s;
      s.dtype = ParseDType(e.at("dtype").get<std::string>(), where);
      s.shape = e.at("shape").get<std::vector<int64_t>>();
      s.begin = e.at("data_offsets").at(0).get<int64_t>();
      s.end = e.at("data_offsets").at(1).get<int64_t>();
      const int64_t n = Product(s.shape);
      int64_t bytes = 0;
      if (n < 0 || __builtin_mul_overflow(n, DTypeSize(s.dtype), &bytes) || s.begin < 0 ||
          s.end - s.begin != bytes) {
        throw Error(fmt::format("\"{}\": data_offsets [{}, {}) do not match its shape and dtype",
                                name, s.begin, s.end));
      }
      if (data_bytes >= 0 && s.end > data_bytes) {
        throw Error(fmt::format("\"{}\": data_offsets end at {}, past the {} data bytes", name,
                                s.end, data_bytes));
      }
      idx.entries[name] = s;
    }
    // No two tensors may share bytes.
    std::vector<std::pair<int64_t, std::string>> starts;
    for (const auto& [name, e] : idx.entries) starts.emplace_back(e.begin, name);
    std::sort(starts.begin(), starts.end());
    for (size_t i = 1; i < starts.size(); ++i) {
      const SafetensorsEntry& prev = idx.entries.at(starts[i - 1].second);
      if (starts[i].first < prev.end && idx.entries.at(starts[i].second).end > starts[i].first) {
        throw Error(
            fmt::format("\"{}\" and \"{}\" overlap", starts[i - 1].second, starts[i].second));
      }
    }
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: safetensors header is not valid: {}", where, e.what()));
  }
  return idx;
}

void CheckShardHeader(const SafetensorsIndex& header, const Manifest& m, const std::string& file,
                      const std::string& where) {
  const FileEntry& f = m.files.at(file);
  if (header.data_offset != f.data_offset) {
    throw Error(fmt::format("{}: data starts at byte {}, the manifest says {}", where,
                            header.data_offset, f.data_offset));
  }
  for (const auto& [name, t] : m.tensors) {
    for (const Piece& p : t.pieces) {
      if (p.file != file) continue;
      const std::string key = PieceName({name, t.dtype, t.shape, p.begin, p.count});
      const auto it = header.entries.find(key);
      const int64_t end = p.offset + p.count * DTypeSize(t.dtype);
      if (it == header.entries.end() || it->second.dtype != t.dtype ||
          it->second.begin != p.offset || it->second.end != end) {
        throw Error(fmt::format(
            "{}: the safetensors header {} \"{}\" as the manifest does ({} bytes {}..{})", where,
            it == header.entries.end() ? "lacks" : "does not describe", key, DTypeName(t.dtype),
            p.offset, end));
      }
    }
  }
}

std::string StepDirName(int64_t step) {
  return fmt::format("step-{:08d}", step);
}

std::optional<int64_t> ParseStepDirName(const std::string& name) {
  // 18 digits at most: every such number is an int64_t (a longer one would
  // wrap and name another step).
  if (name.size() < 6 || name.size() > 5 + 18 || name.rfind("step-", 0) != 0) return std::nullopt;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    v = v * 10 + (name[i] - '0');
  }
  return v;
}

std::string RankFileName(int rank) {
  return fmt::format("rank-{:05d}.safetensors", rank);
}
bool IsRankFileName(std::string_view name) {
  constexpr std::string_view kPrefix = "rank-", kSuffix = ".safetensors";
  if (name.size() > 64 || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
}
std::string RankIndexName(int rank) {
  return fmt::format("rank-{:05d}.index.json", rank);
}
bool IsEngineFileName(std::string_view name) {
  if (name.ends_with(".tmp")) name.remove_suffix(4);  // an atomic write's, in flight
  if (name == kManifestName || name == kCommittedName || IsRankFileName(name)) return true;
  constexpr std::string_view kPrefix = "rank-", kSuffix = ".index.json";
  if (name.size() > 64 || !name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return false;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  return !digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos;
}

}  // namespace fmstack::ckpt
