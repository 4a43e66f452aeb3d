// The C API's checkpoint half: fmstack_tensor arrays checked and turned into
// the engine's slices and targets. Every exception stops at this boundary
// and becomes the handle's error text.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capi/copy_error.h"
#include "capi/fmstack.h"
#include "ckpt/engine.h"
#include "util/error.h"

struct fmstack_ckpt {
  int rank = 0, world = 1;
  std::string error;
  std::mutex log_mu;  // the engine logs from its threads
  std::vector<std::string> log;
  std::unique_ptr<fmstack::ckpt::Engine> engine;  // last: stops before the log goes
};

namespace {

using fmstack::Error;
using fmstack::capi::CopyError;
namespace ckpt = fmstack::ckpt;

constexpr int kMaxDims = 8;
constexpr size_t kMaxName = 1024;

ckpt::DType DTypeOf(int32_t code, const std::string& tensor) {
  switch (code) {
    case FMSTACK_F32:
      return ckpt::DType::kF32;
    case FMSTACK_BF16:
      return ckpt::DType::kBF16;
    case FMSTACK_F16:
      return ckpt::DType::kF16;
    case FMSTACK_I64:
      return ckpt::DType::kI64;
    case FMSTACK_I32:
      return ckpt::DType::kI32;
    case FMSTACK_U8:
      return ckpt::DType::kU8;
    default:
      throw Error(fmt::format("tensor '{}': dtype code {} is not one of F32 BF16 F16 I64 I32 U8",
                              tensor, code));
  }
}

struct Checked {
  std::string name;
  ckpt::DType dtype;
  std::vector<int64_t> shape;
  int64_t begin = 0, elements = 0;
};

// Bounds every field before the engine sees it: a wrong count or pointer
// from a binding must be an error, not a read past a buffer.
Checked Check(const fmstack_tensor& t, size_t index) {
  if (t.name == nullptr || t.name[0] == '\0' || std::strlen(t.name) > kMaxName)
    throw Error(
        fmt::format("tensor #{}: name is empty, missing or longer than {}", index, kMaxName));
  Checked c{.name = t.name, .dtype = DTypeOf(t.dtype, t.name), .shape = {}};
  if (t.ndim < 0 || t.ndim > kMaxDims || (t.ndim > 0 && t.shape == nullptr))
    throw Error(fmt::format("tensor '{}': {} dimensions (expected 0..{} with a shape)", c.name,
                            t.ndim, kMaxDims));
  int64_t total = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0 || (t.shape[d] > 0 && total > (int64_t{1} << 50) / t.shape[d]))
      throw Error(fmt::format("tensor '{}': dimension {} is {}", c.name, d, t.shape[d]));
    total *= t.shape[d];
    c.shape.push_back(t.shape[d]);
  }
  const int64_t size = ckpt::DTypeSize(c.dtype);
  if (t.nbytes < 0 || t.nbytes % size != 0 || (t.nbytes > 0 && t.data == nullptr))
    throw Error(fmt::format("tensor '{}': {} bytes is not a whole number of {} elements", c.name,
                            t.nbytes, ckpt::DTypeName(c.dtype)));
  c.begin = t.begin;
  c.elements = t.nbytes / size;
  if (t.begin < 0 || t.begin + c.elements > total)
    throw Error(fmt::format("tensor '{}': elements [{}, {}) are outside its {} elements", c.name,
                            t.begin, t.begin + c.elements, total));
  return c;
}

template <typename Fn>
int Guard(fmstack_ckpt* h, Fn&& fn) {
  if (h == nullptr) return -1;
  try {
    h->error.clear();
    return fn();
  } catch (const std::exception& e) {
    h->error = e.what();
  } catch (...) {
    h->error = "unknown error";
  }
  return -1;
}

}  // namespace

extern "C" {

int fmstack_c_api_version(void) {
  return FMSTACK_C_API_VERSION;
}

fmstack_ckpt* fmstack_ckpt_open(const fmstack_ckpt_options* o, char* err, size_t err_len) {
  try {
    if (o == nullptr || o->dir == nullptr || o->dir[0] == '\0')
      throw Error("fmstack_ckpt_open: options.dir is required");
    if (o->world < 1 || o->rank < 0 || o->rank >= o->world)
      throw Error(fmt::format("fmstack_ckpt_open: rank {} of world {} (expected 0 <= rank < world)",
                              o->rank, o->world));
    std::vector<std::unique_ptr<ckpt::Tier>> tiers;
    tiers.push_back(ckpt::MakePosixTier("local", o->dir));
    if (o->shared_dir != nullptr && o->shared_dir[0] != '\0')
      tiers.push_back(ckpt::MakePosixTier("shared", o->shared_dir));
    ckpt::EngineOptions eo;
    eo.rank = o->rank;
    eo.world = o->world;
    eo.keep = o->keep > 0 ? o->keep : 3;
    eo.pool_bytes = std::max<int64_t>(0, o->pool_bytes);
    if (o->commit_timeout_seconds > 0) eo.commit_timeout_seconds = o->commit_timeout_seconds;
    // Under `fmstack run` the run is the job; otherwise every writer of this
    // directory is one job, and rank 0's lock keeps two processes apart.
    const char* run_dir = std::getenv("FMSTACK_RUN_DIR");
    const std::string id = run_dir != nullptr && run_dir[0] != '\0'
                               ? std::string(run_dir)
                               : std::filesystem::absolute(o->dir).lexically_normal().string();
    eo.owner =
        ckpt::TierOwner{id, run_dir != nullptr && run_dir[0] != '\0'
                                ? fmt::format("the run in {}", id)
                                : fmt::format("the programs on libfmstack that save into {}", id)};
    auto h = std::make_unique<fmstack_ckpt>();
    h->rank = o->rank;
    h->world = o->world;
    eo.log = [p = h.get()](const std::string& line) {
      const std::lock_guard lock(p->log_mu);
      if (p->log.size() < 64) p->log.push_back(line);
    };
    h->engine = std::make_unique<ckpt::Engine>(std::move(tiers), std::move(eo));
    return h.release();
  } catch (const std::exception& e) {
    CopyError(e.what(), err, err_len);
  }
  return nullptr;
}

void fmstack_ckpt_close(fmstack_ckpt* h) {
  std::unique_ptr<fmstack_ckpt> owned(h);
}

const char* fmstack_ckpt_error(const fmstack_ckpt* h) {
  return h == nullptr ? "no checkpoint handle" : h->error.c_str();
}

namespace {

int SaveSnapshot(fmstack_ckpt* h, int64_t step, const fmstack_tensor* tensors, size_t n,
                 const char* meta_json, double* blocking_seconds, bool live) {
  return Guard(h, [&] {
    if (step < 0) throw Error(fmt::format("save: step {} is negative", step));
    if (n > 0 && tensors == nullptr) throw Error("save: tensors is NULL");
    ckpt::Snapshot snap;
    snap.counters.step = step;
    snap.layout.world = h->world;
    snap.live = live;
    if (meta_json != nullptr) {
      snap.model = nlohmann::json::parse(meta_json, nullptr, false);
      if (snap.model.is_discarded()) throw Error("save: meta_json is not valid JSON");
    }
    for (size_t i = 0; i < n; ++i) {
      const Checked c = Check(tensors[i], i);
      snap.slices.push_back({c.name,
                             c.dtype,
                             c.shape,
                             c.begin,
                             {static_cast<const std::byte*>(tensors[i].data),
                              static_cast<size_t>(tensors[i].nbytes)}});
    }
    const ckpt::SaveTiming t = h->engine->Save(snap);
    if (blocking_seconds != nullptr) *blocking_seconds = t.blocking_seconds;
    return 0;
  });
}

}  // namespace

int fmstack_ckpt_save(fmstack_ckpt* h, int64_t step, const fmstack_tensor* tensors, size_t n,
                      const char* meta_json, double* blocking_seconds) {
  return SaveSnapshot(h, step, tensors, n, meta_json, blocking_seconds, false);
}

int fmstack_ckpt_save_live(fmstack_ckpt* h, int64_t step, const fmstack_tensor* tensors, size_t n,
                           const char* meta_json, double* blocking_seconds) {
  return SaveSnapshot(h, step, tensors, n, meta_json, blocking_seconds, true);
}

int fmstack_ckpt_release(fmstack_ckpt* h, double* seconds) {
  return Guard(h, [&] {
    const double s = h->engine->Release();
    if (seconds != nullptr) *seconds = s;
    return 0;
  });
}

int fmstack_ckpt_wait(fmstack_ckpt* h) {
  return Guard(h, [&] {
    h->engine->Wait(0);
    return 0;
  });
}

int fmstack_ckpt_latest(fmstack_ckpt* h, int64_t* step) {
  return Guard(h, [&] {
    const std::optional<int64_t> s = h->engine->Latest();
    if (!s) return 0;
    if (step != nullptr) *step = *s;
    return 1;
  });
}

int64_t fmstack_ckpt_manifest(fmstack_ckpt* h, int64_t step, char* out, size_t len) {
  int64_t size = -1;
  Guard(h, [&] {
    std::vector<ckpt::Tier*> tiers = h->engine->tiers();
    std::string problems;
    for (ckpt::Tier* tier : tiers) {
      try {
        const ckpt::Manifest m = ckpt::ReadManifest(*tier, step);
        nlohmann::json j{{"step", m.counters.step}, {"world", m.layout.world}, {"meta", m.model}};
        j["tensors"] = nlohmann::json::object();
        for (const auto& [name, e] : m.tensors)
          j["tensors"][name] = {{"dtype", ckpt::DTypeName(e.dtype)}, {"shape", e.shape}};
        const std::string text = j.dump();
        if (out != nullptr && len > text.size()) std::memcpy(out, text.c_str(), text.size() + 1);
        size = static_cast<int64_t>(text.size());
        return 0;
      } catch (const Error& e) {
        problems += fmt::format("{}{}", problems.empty() ? "" : "; ", e.what());
      }
    }
    throw Error(fmt::format("step {}: no readable manifest ({})", step, problems));
  });
  return size;
}

int fmstack_ckpt_restore(fmstack_ckpt* h, int64_t max_step, const fmstack_tensor* targets, size_t n,
                         int64_t* step) {
  return Guard(h, [&] {
    if (n > 0 && targets == nullptr) throw Error("restore: targets is NULL");
    std::vector<ckpt::TensorTarget> t;
    for (size_t i = 0; i < n; ++i) {
      const Checked c = Check(targets[i], i);
      t.push_back(
          {c.name,
           c.dtype,
           c.begin,
           {static_cast<std::byte*>(targets[i].data), static_cast<size_t>(targets[i].nbytes)}});
    }
    {
      const std::lock_guard lock(h->log_mu);
      h->log.clear();
    }
    const std::optional<ckpt::RestoreResult> r =
        h->engine->Restore(t, max_step >= 0 ? std::optional<int64_t>(max_step) : std::nullopt);
    if (!r) {
      // Copies that exist but cannot serve these targets are an error, not "none".
      const std::lock_guard lock(h->log_mu);
      if (h->log.empty()) return 0;
      std::string why;
      for (const std::string& line : h->log) why += "\n  " + line;
      throw Error("restore: no copy could be used:" + why);
    }
    if (step != nullptr) *step = r->step;
    return 1;
  });
}

}  // extern "C"
