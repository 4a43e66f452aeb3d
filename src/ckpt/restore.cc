#include "ckpt/restore.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "ckpt/choose.h"
#include "ckpt/stream_reader.h"
#include "util/error.h"
#include "util/xxh3.h"

namespace fmstack::ckpt {
namespace {

// Bytes [lo, hi) of a file's data region go to dest.
struct Need {
  int64_t lo = 0, hi = 0;
  std::byte* dest = nullptr;
};

// "tensor \"a\"" or "tensors \"a\", \"b\", \"c\" and 7 more".
std::string Join(const std::vector<std::string>& v) {
  if (v.empty()) return "no tensor";
  std::string out = v.size() == 1 ? "tensor " : "tensors ";
  for (size_t i = 0; i < std::min<size_t>(v.size(), 3); ++i) {
    out += (i == 0 ? "\"" : ", \"") + v[i] + "\"";
  }
  if (v.size() > 3) out += fmt::format(" and {} more", v.size() - 3);
  return out;
}

// `got` is the XXH3-64 of chunk `chunk`, which ends at data byte `hi`.
void CheckDigest(const Manifest& m, const std::string& file, const FileEntry& f, int64_t chunk,
                 uint64_t got, int64_t hi, const std::string& where) {
  if (got == f.checksums[static_cast<size_t>(chunk)]) return;
  const int64_t lo = chunk * f.chunk_bytes;
  throw Error(
      fmt::format("{}: checksum mismatch in chunk {} (data bytes {}..{}, {}): xxh3 {:016x}, "
                  "manifest says {:016x}",
                  where, chunk, lo, hi, Join(m.TensorsAt(file, lo, hi)), got,
                  f.checksums[static_cast<size_t>(chunk)]));
}

// The chunk-aligned [begin, end) spans of the data region that cover the
// needs (sorted by lo), merged where they touch, so each chunk is read once.
std::vector<std::pair<int64_t, int64_t>> PlanReads(const std::vector<Need>& needs,
                                                   const FileEntry& f) {
  std::vector<std::pair<int64_t, int64_t>> spans;
  const int64_t data_bytes = f.size - f.data_offset;
  for (const Need& n : needs) {
    const int64_t lo = n.lo / f.chunk_bytes * f.chunk_bytes;
    const int64_t hi =
        std::min(data_bytes, (n.hi + f.chunk_bytes - 1) / f.chunk_bytes * f.chunk_bytes);
    if (!spans.empty() && lo <= spans.back().second) {
      spans.back().second = std::max(spans.back().second, hi);
    } else {
      spans.emplace_back(lo, hi);
    }
  }
  return spans;
}

// Reads the shard's safetensors header and checks it against the manifest:
// restore and verify refuse exactly the same files.
void ReadAndCheckHeader(Tier& tier, int64_t step, const Manifest& m, const std::string& file) {
  const FileEntry& f = m.files.at(file);
  const std::string where = tier.Where(step, file);
  const std::unique_ptr<FileReader> reader = tier.OpenReader(step, file);
  std::vector<char> head(8);
  reader->Read(0, head);
  const int64_t header_bytes = SafetensorsHeaderBytes({head.data(), 8}, where);
  if (header_bytes > f.size)
    throw Error(fmt::format("{}: truncated in the safetensors header", where));
  head.resize(static_cast<size_t>(header_bytes));
  reader->Read(0, head);
  const SafetensorsIndex idx =
      ParseSafetensorsHeader({head.data(), head.size()}, where, f.size - f.data_offset);
  CheckShardHeader(idx, m, file, where);
}

// Remote tiers: pieces of 8 MiB, a ranged read each, in order. Local files:
// kLocalRestoreReaders chunks in flight, each through its worker's own reader, checked and
// scattered in 1 MiB pieces that stay in cache for their hash. Where the
// file system takes O_DIRECT, each worker reads 8 MiB at a time past the
// page cache into a buffer on huge pages (stream_reader.cc and
// posix_tier.cc have the figures), else 1 MiB pieces through the page
// cache. The whole aligned blocks of a read that land in one run of the
// targets' memory go straight into it, the rest through the buffer in the
// same request (NeedIndex::Place; docs/ckpt.md, "Padding"). Earlier, on an AMD EPYC VM, O_DIRECT
// with 1 MiB reads into 4 KiB pages ran erratically (0.8-2.1 GB/s) and was not used.
constexpr int64_t kRemotePieceBytes = int64_t{8} << 20;
constexpr int64_t kLocalPieceBytes = int64_t{1} << 20;

// Finds the needs that a range of the data region touches: needs are
// sorted by lo, and max_hi[i] is the largest hi among needs[0..i].
struct NeedIndex {
  const std::vector<Need>& needs;
  std::vector<int64_t> max_hi;
  // The bytes that one need alone wants, merged where both the file and
  // the memory run on (a trainer's tensors are views of a few flat
  // arrays): the placements reads may go straight into.
  std::vector<Need> runs;

  explicit NeedIndex(const std::vector<Need>& n) : needs(n) {
    int64_t m = 0;
    for (size_t k = 0; k < needs.size(); ++k) {
      // No earlier need reaches past m, no later one starts before the next's lo.
      const int64_t lo = std::max(needs[k].lo, m);
      const int64_t hi =
          k + 1 < needs.size() ? std::min(needs[k].hi, needs[k + 1].lo) : needs[k].hi;
      max_hi.push_back(m = std::max(m, needs[k].hi));
      if (hi <= lo || needs[k].dest == nullptr) continue;
      std::byte* const dest = needs[k].dest + (lo - needs[k].lo);
      if (!runs.empty() && runs.back().hi == lo &&
          runs.back().dest + (lo - runs.back().lo) == dest) {
        runs.back().hi = hi;
      } else {
        runs.push_back({lo, hi, dest});
      }
    }
  }
  size_t First(int64_t pos) const {  // the first need that may reach past pos
    return static_cast<size_t>(std::upper_bound(max_hi.begin(), max_hi.end(), pos) -
                               max_hi.begin());
  }
  // Copies into each need what the bytes at data offset `pos` hold of it;
  // bytes already read into place (see Place) stay where they are.
  void Scatter(int64_t pos, std::span<const char> bytes) const {
    const int64_t end = pos + static_cast<int64_t>(bytes.size());
    for (size_t k = First(pos); k < needs.size() && needs[k].lo < end; ++k) {
      const int64_t lo = std::max(needs[k].lo, pos), hi = std::min(needs[k].hi, end);
      if (hi <= lo || needs[k].dest == nullptr) continue;
      std::byte* const to = needs[k].dest + (lo - needs[k].lo);
      const char* const from = bytes.data() + (lo - pos);
      if (static_cast<const void*>(to) != from) std::memcpy(to, from, static_cast<size_t>(hi - lo));
    }
  }
  // Where the bytes from `pos` can be read straight to (a byte wanted twice
  // goes through the buffer and is copied to both), for how many bytes.
  Placement Place(int64_t pos, int64_t max_bytes) const {
    const auto r = std::upper_bound(runs.begin(), runs.end(), pos,
                                    [](int64_t p, const Need& run) { return p < run.hi; });
    if (r == runs.end()) return {nullptr, max_bytes};
    if (r->lo > pos) return {nullptr, std::min(max_bytes, r->lo - pos)};
    return {reinterpret_cast<char*>(r->dest + (pos - r->lo)), std::min(max_bytes, r->hi - pos)};
  }
};

// The spans cut at chunk boundaries: one checksum covers each.
std::vector<std::pair<int64_t, int64_t>> SplitChunks(
    const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t chunk_bytes) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [begin, end] : spans) {
    for (int64_t p = begin; p < end;) {
      const int64_t e = std::min(end, (p / chunk_bytes + 1) * chunk_bytes);
      out.emplace_back(p, e);
      p = e;
    }
  }
  return out;
}

// Reads the chunks of `file` that `needs` touch, verifies them, scatters.
int64_t ReadFile(Tier& tier, int64_t step, const Manifest& m, const std::string& file,
                 std::vector<Need> needs) {
  const FileEntry& f = m.files.at(file);
  const std::string where = tier.Where(step, file);
  const std::optional<int64_t> size = tier.Size(step, file);
  if (!size) throw Error(fmt::format("{}: missing", where));
  if (*size != f.size) {
    throw Error(fmt::format(
        "{}: {} bytes, the manifest says {} (truncated or replaced; {})", where, *size, f.size,
        Join(m.TensorsAt(file, std::max<int64_t>(0, *size - f.data_offset), f.size))));
  }
  ReadAndCheckHeader(tier, step, m, file);
  std::sort(needs.begin(), needs.end(), [](const Need& a, const Need& b) { return a.lo < b.lo; });
  const std::vector<std::pair<int64_t, int64_t>> spans = PlanReads(needs, f);
  const NeedIndex index(needs);
  const int64_t data_bytes = f.size - f.data_offset;
  // One piece of a chunk, in order within it: hash it (into the chunk's
  // state), check the digest at the chunk's end, scatter it.
  const auto take = [&](Xxh3Stream& hash, int64_t pos, std::span<const char> bytes) {
    const int64_t end = pos + static_cast<int64_t>(bytes.size());
    if (pos % f.chunk_bytes == 0) hash.Reset();
    hash.Update(bytes.data(), bytes.size());
    if (end % f.chunk_bytes == 0 || end == data_bytes)
      CheckDigest(m, file, f, pos / f.chunk_bytes, hash.Digest(), end, where);
    index.Scatter(pos, bytes);
  };
  int64_t read = 0;
  for (const auto& [lo, hi] : spans) read += hi - lo;
  if (tier.local_reads()) {
    std::vector<Xxh3Stream> hashes(kLocalRestoreReaders);
    ReadChunksInParallel(
        tier, step, file, f.data_offset, SplitChunks(spans, f.chunk_bytes), kLocalRestoreReaders,
        kLocalPieceBytes,
        [&](int worker, int64_t pos, std::span<const char> bytes) {
          take(hashes[static_cast<size_t>(worker)], pos, bytes);
        },
        [&](int64_t pos, int64_t n) { return index.Place(pos, n); });
  } else {
    Xxh3Stream hash;
    StreamSpans(
        tier, step, file, f.data_offset, spans, f.chunk_bytes,
        [&](int64_t pos, std::span<const char> bytes) { take(hash, pos, bytes); },
        kRemotePieceBytes);
  }
  return read;
}

}  // namespace

Manifest ReadManifest(Tier& tier, int64_t step) {
  const std::string where = tier.Where(step, kManifestName);
  // Every rank parses it whole: a size past what any state needs is refused
  // before it is read (64 MiB holds the checksums of 16 TB of state in
  // 8 MiB chunks).
  if (const std::optional<int64_t> size = tier.Size(step, kManifestName);
      size && *size > kMaxManifestBytes) {
    throw Error(fmt::format("{}: {} bytes, more than a manifest may hold ({} bytes): not read",
                            where, *size, kMaxManifestBytes));
  }
  const std::optional<std::string> text = tier.ReadSmall(step, kManifestName);
  if (!text)
    throw Error(fmt::format("{}: missing (the copy is committed but has no manifest)", where));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(*text);
  } catch (const std::exception& e) {
    throw Error(fmt::format("{}: not valid JSON: {}", where, e.what()));
  }
  Manifest m = Manifest::FromJson(j, where);
  if (m.counters.step != step) {
    throw Error(fmt::format("{}: says step {}, but lives in {}", where, m.counters.step,
                            StepDirName(step)));
  }
  return m;
}

Manifest ReadCopy(Tier& tier, int64_t step, std::span<const TensorTarget> targets,
                  int64_t* bytes_read) {
  Manifest m = ReadManifest(tier, step);
  std::map<std::string, std::vector<Need>> by_file;
  for (const TensorTarget& t : targets) {
    const auto it = m.tensors.find(t.name);
    if (it == m.tensors.end()) {
      throw Error(fmt::format("{}: has no tensor \"{}\"", tier.Where(step, kManifestName), t.name));
    }
    const TensorEntry& e = it->second;
    const int64_t es = DTypeSize(e.dtype);
    const int64_t count = static_cast<int64_t>(t.out.size()) / DTypeSize(t.dtype);
    if (e.dtype != t.dtype || t.begin < 0 || t.begin + count > e.elements()) {
      throw Error(
          fmt::format("{}: tensor \"{}\" is {} with {} elements; the job wants {} elements {}..{}",
                      tier.Where(step, kManifestName), t.name, DTypeName(e.dtype), e.elements(),
                      DTypeName(t.dtype), t.begin, t.begin + count));
    }
    for (const Piece& p : e.pieces) {
      const int64_t lo = std::max(p.begin, t.begin),
                    hi = std::min(p.begin + p.count, t.begin + count);
      if (hi <= lo) continue;
      by_file[p.file].push_back({p.offset + (lo - p.begin) * es, p.offset + (hi - p.begin) * es,
                                 t.out.data() + (lo - t.begin) * es});
    }
  }
  int64_t read = 0;
  for (auto& [file, needs] : by_file) read += ReadFile(tier, step, m, file, std::move(needs));
  if (bytes_read) *bytes_read = read;
  return m;
}

std::optional<RestoreResult> Restore(std::span<Tier* const> tiers,
                                     std::span<const TensorTarget> targets, const Log& log,
                                     std::optional<int64_t> max_step) {
  std::vector<CheckpointCopy> copies;
  std::vector<std::string> rejected;
  auto reject = [&](const std::string& line) {
    rejected.push_back(line);
    if (log) log(line);
  };
  for (size_t t = 0; t < tiers.size(); ++t) {
    std::vector<StepListing> listing;
    try {
      listing = tiers[t]->List();
    } catch (const std::exception& e) {
      reject(
          fmt::format("checkpoint: tier {} unreachable, skipped: {}", tiers[t]->name(), e.what()));
      continue;
    }
    for (const StepListing& s : listing) {
      if (max_step && s.step > *max_step) continue;
      copies.push_back({s.step, static_cast<int>(t), s.committed, true, true});
    }
  }
  const auto start = std::chrono::steady_clock::now();
  // Report incomplete copies newer than what will be chosen: a crash mid-save.
  while (const std::optional<size_t> pick = ChooseRestore(copies)) {
    CheckpointCopy& c = copies[*pick];
    for (CheckpointCopy& o : copies) {
      if (o.committed || !o.valid || o.step <= c.step) continue;
      reject(fmt::format("checkpoint: rejected {} on {}: no COMMITTED marker (an interrupted save)",
                         StepDirName(o.step), tiers[static_cast<size_t>(o.tier)]->name()));
      o.valid = false;  // reported once
    }
    Tier& tier = *tiers[static_cast<size_t>(c.tier)];
    try {
      RestoreResult r;
      r.manifest = ReadCopy(tier, c.step, targets, &r.bytes_read);
      r.step = c.step;
      r.tier = c.tier;
      r.tier_name = tier.name();
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      r.rejected = std::move(rejected);
      return r;
    } catch (const std::exception& e) {
      reject(fmt::format("checkpoint: rejected {} on {}: {}", StepDirName(c.step), tier.name(),
                         e.what()));
      c.valid = false;
    }
  }
  return std::nullopt;
}

std::vector<std::string> VerifyCopy(Tier& tier, int64_t step) {
  std::vector<std::string> problems;
  Manifest m;
  try {
    m = ReadManifest(tier, step);
  } catch (const std::exception& e) {
    return {e.what()};
  }
  for (const auto& [file, f] : m.files) {
    try {
      // No destination: every chunk is read and checked (and the header
      // against the manifest, as restore does), nothing kept.
      if (f.size > f.data_offset) {
        ReadFile(tier, step, m, file, {{0, f.size - f.data_offset, nullptr}});
      } else {
        ReadAndCheckHeader(tier, step, m, file);
      }
    } catch (const std::exception& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

std::vector<std::byte> ReadTensor(Tier& tier, int64_t step, const Manifest& m,
                                  const std::string& name) {
  const TensorEntry& e = m.tensors.at(name);
  std::vector<std::byte> out(static_cast<size_t>(e.elements() * DTypeSize(e.dtype)));
  const TensorTarget t{name, e.dtype, 0, out};
  ReadCopy(tier, step, std::span(&t, 1));
  return out;
}

}  // namespace fmstack::ckpt
