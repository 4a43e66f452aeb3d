// The C API's run half: a runtime::Worker behind a handle, and the marks the
// supervisor turns into goodput (the same events fmstack's trainer sends).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "capi/copy_error.h"
#include "capi/fmstack.h"
#include "runtime/worker.h"

struct fmstack_worker {
  std::unique_ptr<fmstack::runtime::Worker> worker;
};

extern "C" {

fmstack_worker* fmstack_worker_open(int32_t heartbeat_ms, char* err, size_t err_len) {
  try {
    const int32_t ms = std::clamp<int32_t>(heartbeat_ms <= 0 ? 1000 : heartbeat_ms, 10, 60000);
    auto h = std::make_unique<fmstack_worker>();
    h->worker = fmstack::runtime::Worker::FromEnv(std::chrono::milliseconds(ms));
    return h.release();
  } catch (const std::exception& e) {
    fmstack::capi::CopyError(e.what(), err, err_len);
  }
  return nullptr;
}

void fmstack_worker_close(fmstack_worker* h) {
  std::unique_ptr<fmstack_worker> owned(h);
}

int fmstack_worker_active(const fmstack_worker* h) {
  return h != nullptr && h->worker->active() ? 1 : 0;
}

void fmstack_worker_progress(fmstack_worker* h, int64_t step, const char* phase) {
  if (h == nullptr) return;
  const std::string p = phase == nullptr ? "" : std::string(phase).substr(0, 64);
  h->worker->Progress(step, p);
}

void fmstack_worker_step(fmstack_worker* h, int64_t step, double seconds, int64_t tokens) {
  if (h == nullptr || !h->worker->active()) return;
  h->worker->Progress(step, "step");
  h->worker->Send({{"ev", "step"}, {"step", step}, {"step_s", seconds}, {"tokens", tokens}});
}

void fmstack_worker_checkpoint(fmstack_worker* h, int64_t step, double blocking_seconds) {
  if (h == nullptr || !h->worker->active()) return;
  h->worker->Send({{"ev", "ckpt"}, {"step", step}, {"blocking_s", blocking_seconds}});
}

void fmstack_worker_restored(fmstack_worker* h, int64_t step, double seconds) {
  if (h == nullptr || !h->worker->active()) return;
  h->worker->Send(
      {{"ev", "restore"}, {"step", step}, {"seconds", seconds}, {"source", "checkpoint"}});
}

}  // extern "C"
