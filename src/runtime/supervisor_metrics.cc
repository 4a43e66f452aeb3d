// The supervisor's Prometheus series (metrics/registry.h), served at
// /metrics by metrics::Exporter on `SuperviseOptions::metrics_listen`. The
// run directory gets what a Prometheus needs to scrape it:
// RUN_DIR/metrics/targets.json (file_sd) and RUN_DIR/metrics/token (0600,
// the bearer token; authorization.credentials_file).
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "comm/tcp_store.h"
#include "runtime/supervisor_impl.h"
#include "util/atomic_file.h"

namespace fmstack::runtime::internal {
namespace {

// Seconds, from a fast step to a slow recovery.
const std::vector<double> kSecondsBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                             1,     2.5,  5,     10,   30,  60,   300};

void WritePrivate(const std::string& path, const std::string& text) {
  std::filesystem::remove(path);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw Error(fmt::format("{}: cannot write: {}", path, why));
  }
  ::close(fd);
}

}  // namespace

void Supervisor::StartMetrics() {
  if (o_.metrics_listen.empty() || o_.metrics_listen == "off") return;
  const size_t colon = o_.metrics_listen.rfind(':');
  char* end = nullptr;
  const long port = colon == std::string::npos
                        ? -1
                        : std::strtol(o_.metrics_listen.c_str() + colon + 1, &end, 10);
  if (colon == std::string::npos || port < 0 || port > 65535 || *end != '\0')
    throw Error(fmt::format("--metrics-listen {}: expected HOST:PORT (PORT 0: any free one) or off",
                            o_.metrics_listen));
  const std::string host = o_.metrics_listen.substr(0, colon);
  registry_ = std::make_unique<metrics::Registry>();
  metrics::Registry& m = *registry_;
  m.Gauge("fmstack_step", "newest optimizer step completed by the group");
  m.Gauge("fmstack_steps_total_planned", "optimizer steps the run trains");
  m.Histogram("fmstack_step_seconds", "wall time of one optimizer step (the group's rank 0)",
              kSecondsBuckets);
  m.Gauge("fmstack_tokens_per_second", "tokens trained per second in the newest step");
  m.Gauge("fmstack_model_flops_per_second",
          "model FLOP/s of the newest step (6N + attention per token, x tokens/s)");
  m.Gauge("fmstack_mfu", "model FLOP/s over the group's peak (`fmstack run --peak-gflops`)");
  m.Gauge("fmstack_loss", "training loss of the newest step");
  m.Gauge("fmstack_grad_norm", "global gradient norm of the newest step, before clipping");
  m.Gauge("fmstack_learning_rate", "learning rate of the newest step");
  m.Gauge("fmstack_comm_exposed_seconds", "time the newest step waited for collectives");
  m.Histogram("fmstack_checkpoint_blocking_seconds", "the blocking part of a save",
              kSecondsBuckets);
  m.Histogram("fmstack_checkpoint_commit_seconds",
              "from a save's start to its step committed on a tier (local, shared, object)",
              kSecondsBuckets);
  m.Histogram("fmstack_checkpoint_restore_seconds",
              "a restore's duration, from a checkpoint or from peers' memory", kSecondsBuckets);
  m.Gauge("fmstack_checkpoint_last_step", "the newest step a save began for");
  m.Gauge("fmstack_checkpoint_last_timestamp_seconds", "Unix time of the newest save");
  m.Gauge("fmstack_checkpoint_interval_seconds", "time between the two newest saves");
  m.Gauge("fmstack_restarts", "automatic restarts so far (resilience.max_restarts budget)");
  m.Counter("fmstack_incidents_total", "faults detected, by kind, and elastic grows");
  // Every kind from 0, so that the first fault of a kind is an increase.
  for (int k = 0; k <= static_cast<int>(resilience::EventKind::kNodeUnhealthy); ++k)
    m.Add("fmstack_incidents_total",
          {{"kind", std::string(resilience::EventName(static_cast<resilience::EventKind>(k)))}}, 0);
  m.Add("fmstack_incidents_total", {{"kind", "grow"}}, 0);
  m.Histogram("fmstack_recovery_seconds", "detection to the first completed step after it",
              kSecondsBuckets);
  if (o_.health.enabled) {
    m.Gauge("fmstack_node_state",
            "1 for each node slot's state (allocated, idle, draining, "
            "drained, down)");
    m.Gauge("fmstack_health_check_failing", "1 for each failing check that asks for an action");
    m.Gauge("fmstack_health_agent_up", "whether the node's health agent runs");
  }
  m.Gauge("fmstack_goodput_seconds", "wall time by the goodput ledger's buckets");
  m.Gauge("fmstack_goodput_ratio", "productive share of the wall time so far");
  m.Gauge("fmstack_ranks_up", "worker processes alive");
  m.Gauge("fmstack_world_size", "data-parallel ranks training (smaller after an elastic shrink)");
  m.Gauge("fmstack_nodes_dropped", "nodes an elastic job trains without");
  m.Gauge("fmstack_spare_slots", "idle node slots ready to take a failed node's place");
  m.Gauge("fmstack_up", "1 while the supervisor runs");
  m.Set("fmstack_up", {}, 1);
  const std::string dir = o_.run_dir + "/metrics";
  std::filesystem::create_directories(dir);
  const std::string token = comm::NewStoreSecret();
  WritePrivate(dir + "/token", token);
  exporter_ = std::make_unique<metrics::Exporter>(m, host, static_cast<int>(port), token);
  WriteTargets();
  Note(
      fmt::format("metrics: http://{}:{}/metrics (bearer token in {}/token; Prometheus file_sd: "
                  "{}/targets.json)",
                  host, exporter_->port(), dir, dir));
}

void Supervisor::WriteTargets() const {
  if (!exporter_) return;
  // The supervisor first, then each node agent that serves (job "fmstack-node").
  nlohmann::json targets = nlohmann::json::array(
      {{{"targets", {fmt::format("{}:{}", exporter_->host(), exporter_->port())}},
        {"labels", {{"job", "fmstack"}, {"run", o_.job_name}}}}});
  for (int s = 0; s < static_cast<int>(agents_.size()); ++s) {
    if (agents_[s].endpoint.empty()) continue;
    targets.push_back(
        {{"targets", {agents_[s].endpoint}},
         {"labels", {{"job", "fmstack-node"}, {"run", o_.job_name}, {"node", SlotName(s)}}}});
  }
  const std::string text = targets.dump(1) + "\n";
  AtomicFileWriter w(o_.run_dir + "/metrics/targets.json");
  w.Write(text.data(), text.size());
  w.Commit();
}

void Supervisor::Publish() {
  if (!registry_) return;
  const auto now = Clock::now();
  if (now < next_publish_) return;
  next_publish_ = now + std::chrono::milliseconds(250);
  metrics::Registry& m = *registry_;
  result_.ledger.SetWall(wall_before_ + Since(start_, now));
  for (const std::string& b : metrics::Ledger::Buckets())
    m.Set("fmstack_goodput_seconds", {{"bucket", b}}, result_.ledger.Get(b));
  m.Set("fmstack_goodput_ratio", {}, result_.ledger.Goodput());
  m.Set("fmstack_restarts", {}, history_.restarts);
  m.Set("fmstack_ranks_up", {}, running_);
  m.Set("fmstack_world_size", {}, ActiveWorld());
  m.Set("fmstack_nodes_dropped", {}, o_.layout.nodes - ActiveNodes());
  m.Set("fmstack_spare_slots", {}, static_cast<double>(spares_.size()));
  if (monitor_) m.Set("fmstack_step", {}, static_cast<double>(monitor_->MaxStep()));
  PublishNodes();
}

void Supervisor::MetricsOnStep(const nlohmann::json& e) {
  if (!registry_) return;
  metrics::Registry& m = *registry_;
  const double step_s = e.value("step_s", 0.0);
  m.Observe("fmstack_step_seconds", {}, step_s);
  m.Set("fmstack_loss", {}, e.value("loss", 0.0));
  m.Set("fmstack_grad_norm", {}, e.value("grad_norm", 0.0));
  m.Set("fmstack_learning_rate", {}, e.value("lr", 0.0));
  m.Set("fmstack_comm_exposed_seconds", {}, e.value("comm_exposed_s", 0.0));
  m.Set("fmstack_steps_total_planned", {}, e.value("steps", 0.0));
  if (step_s > 0) {
    const double tok_s = e.value("tokens", 0.0) / step_s;
    const double flops = tok_s * e.value("flops_per_token", 0.0), peak = e.value("peak_flops", 0.0);
    m.Set("fmstack_tokens_per_second", {}, tok_s);
    if (flops > 0) m.Set("fmstack_model_flops_per_second", {}, flops);
    if (flops > 0 && peak > 0) m.Set("fmstack_mfu", {}, flops / peak);
  }
}

void Supervisor::MetricsOnCheckpoint(int64_t step, double blocking_seconds) {
  if (!registry_) return;
  registry_->Observe("fmstack_checkpoint_blocking_seconds", {}, blocking_seconds);
  registry_->Set("fmstack_checkpoint_last_step", {}, static_cast<double>(step));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (last_save_ > 0) registry_->Set("fmstack_checkpoint_interval_seconds", {}, now - last_save_);
  last_save_ = now;
  registry_->Set("fmstack_checkpoint_last_timestamp_seconds", {}, now);
}

void Supervisor::MetricsOnIncident(const std::string& kind) {
  if (registry_) registry_->Add("fmstack_incidents_total", {{"kind", kind}});
}

void Supervisor::MetricsOnRecovered(const std::string& kind, double seconds) {
  if (registry_) registry_->Observe("fmstack_recovery_seconds", {{"kind", kind}}, seconds);
}

void Supervisor::MetricsOnCommit(const std::string& tier, double seconds) {
  if (registry_) registry_->Observe("fmstack_checkpoint_commit_seconds", {{"tier", tier}}, seconds);
}

void Supervisor::MetricsOnRestore(const std::string& source, double seconds) {
  if (registry_)
    registry_->Observe("fmstack_checkpoint_restore_seconds",
                       {{"source", source == "peers" ? "peers" : "checkpoint"}}, seconds);
}

}  // namespace fmstack::runtime::internal
