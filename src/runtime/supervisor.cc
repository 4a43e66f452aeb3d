#include "runtime/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>

#include "cluster/netns.h"
#include "comm/tcp_store.h"
#include "runtime/control.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace fmstack::runtime {
namespace {

double Since(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Blocks SIGCHLD/SIGINT/SIGTERM for the supervisor's lifetime and reads them
// from a descriptor instead; the old mask comes back on destruction.
class SignalFd {
 public:
  SignalFd() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&set, s);
    sigprocmask(SIG_BLOCK, &set, &old_);
    fd_ = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd_ < 0) throw Error(fmt::format("signalfd: {}", std::strerror(errno)));
  }
  ~SignalFd() {
    ::close(fd_);
    sigprocmask(SIG_SETMASK, &old_, nullptr);
  }
  int fd() const { return fd_; }
  std::vector<int> Take() {
    std::vector<int> out;
    signalfd_siginfo info;
    while (::read(fd_, &info, sizeof info) == sizeof info)
      out.push_back(static_cast<int>(info.ssi_signo));
    return out;
  }

 private:
  int fd_ = -1;
  sigset_t old_;
};

// What carries a worker's bytes to the supervisor: stdout, stderr, control.
struct Stream {
  enum Kind { kOut, kErr, kControl } kind;
  int rank;
  int fd;
  std::string pending;  // a partial line (stdout/stderr)
  LineReader control;
};

// A fault seen during an attempt, before the decision.
struct Seen {
  resilience::RuntimeEvent event;
  std::string what;
};

std::optional<resilience::EventKind> ReportedKind(const std::string& kind) {
  using resilience::EventKind;
  if (kind == "non-finite") return EventKind::kNonFinite;
  if (kind == "silent-corruption") return EventKind::kSilentCorruption;
  if (kind == "checkpoint-failed") return EventKind::kCheckpointFailed;
  if (kind == "crash") return EventKind::kCrash;
  return std::nullopt;
}

class Supervisor {
 public:
  Supervisor(const SuperviseOptions& o, const EventFn& on_event, const LineFn& on_line,
             const NoteFn& on_note)
      : o_(o), on_event_(on_event), on_line_(on_line), on_note_(on_note) {}

  RunResult Run();

 private:
  void RunAttempt();
  void Spawn();
  void Poll();
  void Deliver(Stream& s, std::string_view data);
  void OnControl(int rank, const nlohmann::json& m);
  void OnStepEvent(int rank, const nlohmann::json& e);
  void Reap();
  void CheckHealth();
  void FireInjections();
  void Fire(const InjectRequest& r);
  void Detect(const Seen& seen);
  void KillAll(int sig);
  void SendAll(const nlohmann::json& command);
  void Note(const std::string& line) const {
    if (on_note_) on_note_(line);
  }
  void SaveState() const;
  void LoadState();
  void WriteInfo(const std::string& state) const;
  std::string Where(int rank) const {
    return fmt::format("rank {} (node {}, local rank {})", rank, rank / o_.layout.procs_per_node,
                       rank % o_.layout.procs_per_node);
  }

  const SuperviseOptions& o_;
  const EventFn& on_event_;
  const LineFn& on_line_;
  const NoteFn& on_note_;
  const Clock::time_point start_ = Clock::now();
  std::unique_ptr<SignalFd> signals_;
  std::unique_ptr<cluster::NodeNetwork> network_;
  std::unique_ptr<comm::TcpStoreServer> store_;
  cluster::LaunchEnv env_;
  RunResult result_;
  resilience::RunHistory history_;
  int64_t max_restore_step_ = -1;
  std::set<std::string> fired_;
  std::vector<InjectRequest> pending_;
  int64_t verified_step_ = 0;  // newest step whose replicas every rank checked equal

  // The current attempt.
  std::vector<cluster::WorkerProcess> workers_;
  std::vector<std::ofstream> logs_;
  std::vector<Stream> streams_;
  std::vector<int> control_fd_;  // by rank; -1 when closed
  std::vector<bool> alive_;
  int running_ = 0;
  Clock::time_point attempt_start_;
  std::unique_ptr<RankMonitor> monitor_;
  std::optional<resilience::Decision> decision_;
  std::optional<Seen> report_;  // a worker's own fault report, awaiting its exit
  Clock::time_point detected_at_, term_at_ = Clock::time_point::max(),
                                  kill_at_ = Clock::time_point::max();
  std::optional<Clock::time_point> fired_at_;  // the newest injection of this attempt
  std::optional<size_t> recovering_;           // incident awaiting its first step
  bool restored_ = false;                      // rank 0 reported its restore this attempt
  bool reexec_ = false;
  Clock::time_point next_scan_, next_link_check_;
};

void Supervisor::WriteInfo(const std::string& state) const {
  WriteRunInfo(o_.run_dir, {static_cast<int>(::getpid()), o_.layout.world(), o_.layout.nodes,
                            o_.layout.procs_per_node, o_.netns, o_.job_name, state});
}

void Supervisor::SaveState() const {
  nlohmann::json j;
  j["restarts"] = history_.restarts;
  j["last_nonfinite_step"] = history_.last_nonfinite_step;
  j["max_restore_step"] = max_restore_step_;
  j["fired"] = fired_;
  j["ledger"] = result_.ledger.ToJson();
  const std::string text = j.dump(1) + "\n";
  AtomicFileWriter w(o_.run_dir + "/supervisor.json");
  w.Write(text.data(), text.size());
  w.Commit();
}

void Supervisor::LoadState() {
  const std::string path = o_.run_dir + "/supervisor.json";
  std::ifstream in(path);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    Note(fmt::format("supervisor: {} unreadable; the restarted supervisor starts a fresh ledger",
                     path));
    return;
  }
  history_.restarts = j.value("restarts", 0);
  history_.last_nonfinite_step = j.value("last_nonfinite_step", int64_t{-1});
  max_restore_step_ = j.value("max_restore_step", int64_t{-1});
  for (const std::string& id : j.value("fired", std::vector<std::string>{})) fired_.insert(id);
  try {
    result_.ledger = metrics::Ledger::FromJson(j.value("ledger", nlohmann::json::object()));
  } catch (const std::exception& e) {
    Note(fmt::format("supervisor: the ledger in {} is malformed ({}); starting a fresh one", path,
                     e.what()));
  }
  // The incident that restarted the supervisor recovers in this attempt.
  if (!result_.ledger.incidents().empty() &&
      result_.ledger.incidents().back().recovery_seconds < 0) {
    recovering_ = result_.ledger.incidents().size() - 1;
    detected_at_ = start_;  // the exec in between is a few milliseconds
  }
  // The wall time of the supervisor before the restart is the ledger's so far.
}

RunResult Supervisor::Run() {
  std::filesystem::create_directories(o_.run_dir + "/logs");
  std::filesystem::create_directories(o_.run_dir + "/control");
  signals_ = std::make_unique<SignalFd>();
  if (o_.netns) network_ = std::make_unique<cluster::NodeNetwork>(o_.layout.nodes);
  if (network_) {
    env_.master_addr = network_->bridge_address();
    env_.node_netns = network_->namespace_paths();
    env_.node_host = network_->node_addresses();
  }
  store_ = std::make_unique<comm::TcpStoreServer>(env_.master_addr, 0);
  env_.master_port = store_->port();
  env_.job_id = o_.job_id;
  env_.extra = o_.extra_env;
  env_.extra["FMSTACK_LOG_DIR"] = o_.run_dir + "/logs";
  double wall_before = 0;
  if (o_.resume_supervisor) {
    LoadState();
    wall_before = result_.ledger.wall();
  }
  pending_ = o_.inject;
  for (size_t i = 0; i < pending_.size(); ++i) pending_[i].id = fmt::format("job-{}", i);
  std::erase_if(pending_, [&](const InjectRequest& r) { return fired_.contains(r.id); });
  WriteInfo("running");

  for (;;) {
    RunAttempt();
    result_.ledger.SetWall(wall_before + Since(start_, Clock::now()));
    if (reexec_) {
      result_.reexec = true;
      break;
    }
    if (!decision_) {  // every worker exited 0 on its own
      result_.finished = true;
      break;
    }
    const resilience::Verb verb = decision_->verb;
    if (verb == resilience::Verb::kStop || verb == resilience::Verb::kSaveAndStop) break;
    // A save that did not complete in time leaves the newest checkpoint in charge.
    if (decision_->backoff_seconds > 0) {
      Note(fmt::format("restarting in {:.1f} s", decision_->backoff_seconds));
      const auto until = Clock::now() + std::chrono::milliseconds(
                                            static_cast<int64_t>(decision_->backoff_seconds * 1e3));
      const auto begin = Clock::now();
      bool interrupted = false;
      while (Clock::now() < until && !interrupted) {
        pollfd p{signals_->fd(), POLLIN, 0};
        ::poll(&p, 1, 100);
        for (int sig : signals_->Take()) {
          if (sig == SIGCHLD) continue;
          interrupted = true;
          result_.interrupted = true;
          result_.signal = sig;
        }
      }
      result_.ledger.Book("backoff", Since(begin, Clock::now()));
      if (interrupted) {
        result_.failure = "interrupted while waiting to restart";
        break;
      }
    }
    ++history_.restarts;
    ++env_.generation;
    SaveState();
  }
  result_.restarts = history_.restarts;
  result_.seconds = Since(start_, Clock::now());
  result_.ledger.SetWall(wall_before + result_.seconds);
  SaveState();
  WriteInfo(result_.reexec        ? "restarting"
            : result_.finished    ? "finished"
            : result_.interrupted ? "stopped"
                                  : "failed");
  const std::string ledger = result_.ledger.ToJson().dump(1) + "\n";
  AtomicFileWriter w(o_.run_dir + "/goodput.json");
  w.Write(ledger.data(), ledger.size());
  w.Commit();
  return result_;
}

void Supervisor::Spawn() {
  const int world = o_.layout.world();
  std::vector<int> child_ends(static_cast<size_t>(world), -1);
  control_fd_.assign(static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw Error(fmt::format("socketpair for rank {}: {}", r, std::strerror(errno)));
    control_fd_[r] = sv[0];
    child_ends[r] = sv[1];
  }
  env_.extra["FMSTACK_RESTART_COUNT"] = std::to_string(history_.restarts);
  env_.extra["TORCHELASTIC_RESTART_COUNT"] = std::to_string(history_.restarts);
  env_.extra["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(o_.policy.max_restarts);
  env_.extra["FMSTACK_RUN_DIR"] = o_.run_dir;
  if (max_restore_step_ >= 0) {
    env_.extra["FMSTACK_RESTORE_MAX_STEP"] = std::to_string(max_restore_step_);
  } else {
    env_.extra.erase("FMSTACK_RESTORE_MAX_STEP");
  }
  try {
    workers_ = cluster::SpawnWorkers(o_.layout, env_, o_.argv, child_ends);
  } catch (...) {
    for (int fd : child_ends) ::close(fd);
    for (int fd : control_fd_) ::close(fd);
    throw;
  }
  for (int fd : child_ends) ::close(fd);
  const bool first = history_.restarts == 0 && !o_.resume_supervisor;
  logs_.clear();
  logs_.resize(static_cast<size_t>(world));
  streams_.clear();
  for (const auto& w : workers_) {
    // A restarted attempt appends, so a rank's log tells its whole story.
    logs_[w.rank].open(fmt::format("{}/logs/rank{}.log", o_.run_dir, w.rank),
                       first ? std::ios::trunc : std::ios::app);
    if (!first) logs_[w.rank] << fmt::format("---- restart {} ----\n", history_.restarts);
    streams_.push_back({Stream::kOut, w.rank, w.out_fd, {}, {}});
    streams_.push_back({Stream::kErr, w.rank, w.err_fd, {}, {}});
    streams_.push_back({Stream::kControl, w.rank, control_fd_[w.rank], {}, {}});
  }
  alive_.assign(static_cast<size_t>(world), true);
  result_.exits.assign(static_cast<size_t>(world), {});
  running_ = world;
}

void Supervisor::RunAttempt() {
  decision_.reset();
  report_.reset();
  fired_at_.reset();
  restored_ = false;
  term_at_ = kill_at_ = Clock::time_point::max();
  attempt_start_ = Clock::now();
  monitor_ = std::make_unique<RankMonitor>(o_.layout.world(), o_.monitor, attempt_start_);
  Spawn();
  Clock::time_point drain_until = Clock::time_point::max();
  while (running_ > 0 || !streams_.empty()) {
    Poll();
    Reap();
    const auto now = Clock::now();
    if (running_ > 0) {
      CheckHealth();
      FireInjections();
    }
    if (running_ > 0 && now >= term_at_) {
      KillAll(SIGTERM);
      term_at_ = Clock::time_point::max();
    }
    if (running_ > 0 && now >= kill_at_) {
      if (!decision_ || decision_->verb != resilience::Verb::kStop)
        Note("the workers did not stop in time: killing them");
      KillAll(SIGKILL);
      kill_at_ = Clock::time_point::max();
    }
    // Workers are gone but something they started may still hold a pipe
    // open: drain for a moment, then stop listening.
    if (running_ == 0 && drain_until == Clock::time_point::max())
      drain_until = now + std::chrono::milliseconds(500);
    if (now >= drain_until) break;
  }
  for (const Stream& s : streams_) ::close(s.fd);
  streams_.clear();
  result_.saved = decision_ &&
                  (decision_->verb == resilience::Verb::kSaveAndStop ||
                   decision_->verb == resilience::Verb::kSaveAndRestart) &&
                  std::all_of(result_.exits.begin(), result_.exits.end(),
                              [](const RankExit& e) { return e.signal == 0 && e.exit_code == 0; });
  if (decision_ && (decision_->verb == resilience::Verb::kSaveAndStop ||
                    decision_->verb == resilience::Verb::kSaveAndRestart)) {
    Note(result_.saved ? "every rank saved the current step and stopped"
                       : "the emergency checkpoint did not complete: the newest committed one "
                         "stays in charge");
  }
  // A fault recorded after the decision's kill (a survivor's report) is noise.
  if (decision_ && network_) {
    for (int n = 0; n < o_.layout.nodes; ++n) {
      if (!network_->LinkUp(n)) {
        Note(fmt::format("node {}: link restored (the node is replaced)", n));
        network_->SetLink(n, true);
      }
    }
  }
}

void Supervisor::Poll() {
  std::vector<pollfd> fds{{signals_->fd(), POLLIN, 0}};
  for (const Stream& s : streams_) fds.push_back({s.fd, POLLIN, 0});
  ::poll(fds.data(), fds.size(), 100);
  for (int sig : signals_->Take()) {
    if (sig == SIGCHLD) continue;
    if (!result_.interrupted) {
      result_.interrupted = true;
      result_.signal = sig;
      Note(fmt::format("SIG{} received: saving the current step, then stopping (again to abort)",
                       sigabbrev_np(sig)));
      Detect({{.kind = resilience::EventKind::kSignal, .step = monitor_->MaxStep()},
              fmt::format("SIG{}", sigabbrev_np(sig))});
    } else {
      Note("second signal: stopping every worker now");
      KillAll(SIGKILL);
    }
  }
  char buf[65536];
  for (size_t i = 1; i < fds.size(); ++i) {
    if (fds[i].revents == 0) continue;
    Stream& s = streams_[i - 1];
    const ssize_t n = ::read(s.fd, buf, sizeof buf);
    if (n > 0) {
      Deliver(s, std::string_view(buf, static_cast<size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      if (s.kind != Stream::kControl && !s.pending.empty()) Deliver(s, "\n");
      ::close(s.fd);
      if (s.kind == Stream::kControl) control_fd_[s.rank] = -1;
      s.fd = -1;
    }
  }
  std::erase_if(streams_, [](const Stream& s) { return s.fd < 0; });
}

void Supervisor::Deliver(Stream& s, std::string_view data) {
  if (s.kind == Stream::kControl) {
    std::vector<std::string> lines;
    try {
      lines = s.control.Feed(data.data(), data.size());
    } catch (const std::exception& e) {
      Note(fmt::format("{}: {}; its control channel is closed", Where(s.rank), e.what()));
      ::shutdown(s.fd, SHUT_RDWR);
      return;
    }
    for (const std::string& line : lines) {
      if (std::optional<nlohmann::json> m = ParseLine(line)) OnControl(s.rank, *m);
    }
    return;
  }
  s.pending.append(data);
  size_t nl;
  std::ofstream& log = logs_[s.rank];
  while ((nl = s.pending.find('\n')) != std::string::npos) {
    const std::string line = s.pending.substr(0, nl);
    s.pending.erase(0, nl + 1);
    log << line << '\n';
    if (s.kind == Stream::kOut && line.starts_with(kEventPrefix)) {
      const std::string text = line.substr(std::strlen(kEventPrefix));
      const nlohmann::json e = nlohmann::json::parse(text, nullptr, false);
      if (e.is_object() && e.value("ev", "") == "step") OnStepEvent(s.rank, e);
      if (on_event_) on_event_(s.rank, text);
    } else if (on_line_) {
      on_line_(s.rank, s.kind == Stream::kErr, line);
    }
  }
  if (s.pending.size() > kMaxControlLine) {  // a line without end: log it in pieces
    log << s.pending << '\n';
    s.pending.clear();
  }
  log.flush();
}

void Supervisor::OnStepEvent(int rank, const nlohmann::json& e) {
  const int64_t step = e.value("step", int64_t{0});
  const double step_s = e.value("step_s", 0.0);
  monitor_->OnStep(rank, step, step_s - e.value("comm_exposed_s", 0.0));
  if (e.contains("verified"))
    verified_step_ = std::max(verified_step_, e.value("verified", int64_t{0}));
  if (rank != 0) return;
  result_.ledger.Step(step, step_s);
  if (recovering_ && !decision_ && restored_) {
    metrics::Incident& i = result_.ledger.incidents()[*recovering_];
    i.recovery_seconds = Since(detected_at_, Clock::now());
    Note(fmt::format("recovered from {} in {:.2f} s: step {} done", i.kind, i.recovery_seconds,
                     step));
    recovering_.reset();
    SaveState();
  }
}

void Supervisor::OnControl(int rank, const nlohmann::json& m) {
  const std::string ev = m.value("ev", "");
  const auto now = Clock::now();
  if (ev == "hb") {
    if (!m["step"].is_number_integer() || !m["phase"].is_string()) return;
    monitor_->OnHeartbeat(rank, m["step"].get<int64_t>(), m["phase"].get<std::string>(), now);
    return;
  }
  if (ev == "restore" && rank == 0 && !restored_) {
    restored_ = true;
    const int64_t step = m.value("step", int64_t{0});
    const double seconds = m.value("seconds", 0.0);
    result_.ledger.Book("restore", seconds);
    if (history_.restarts > 0 || o_.resume_supervisor) {
      // From the decision (or the supervisor's start) to the restore: relaunch.
      const double since = Since(attempt_start_, now) - seconds;
      result_.ledger.Book("restart", since);
    }
    const int64_t lost = result_.ledger.RollBack(step);
    if (recovering_) result_.ledger.incidents()[*recovering_].lost_steps += lost;
    if (lost > 0) Note(fmt::format("restored step {}: {} step(s) to train again", step, lost));
    return;
  }
  if (ev == "ckpt" && rank == 0 && !decision_) {
    result_.ledger.Book("checkpoint", m.value("blocking_s", 0.0));
    return;
  }
  if (ev == "fault") {
    const std::optional<resilience::EventKind> kind = ReportedKind(m.value("kind", ""));
    if (!kind) return;
    Seen seen{{.kind = *kind,
               .rank = m.value("rank", rank),
               .step = m.value("step", monitor_->MaxStep()),
               .verified_step = m.value("verified_step", verified_step_)},
              m.value("what", "a fault")};
    if (seen.event.rank < 0 || seen.event.rank >= o_.layout.world()) seen.event.rank = rank;
    if (*kind == resilience::EventKind::kNonFinite ||
        *kind == resilience::EventKind::kSilentCorruption) {
      Detect(seen);  // every rank sees these at once: no need to wait for an exit
    } else if (!report_) {
      report_ = seen;  // acted on when the reporting rank exits
    }
  }
}

void Supervisor::Reap() {
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (const auto& w : workers_) {
      if (w.pid != pid) continue;
      RankExit& x = result_.exits[w.rank];
      x = {};
      x.rank = w.rank;
      x.seconds = Since(attempt_start_, Clock::now());
      if (WIFSIGNALED(status)) x.signal = WTERMSIG(status);
      if (WIFEXITED(status)) x.exit_code = WEXITSTATUS(status);
      alive_[w.rank] = false;
      monitor_->OnExit(w.rank);
      --running_;
      const bool failed = x.signal != 0 || x.exit_code != 0;
      if (!failed || decision_ || reexec_) continue;
      // The first failure decides. A worker that reported why it stops is
      // believed; otherwise the exit itself is the fault. A node whose link
      // is down explains its ranks' and their peers' failures.
      if (report_ && x.exit_code == kFaultExitCode) {
        Detect(*report_);
        continue;
      }
      if (network_) {
        for (int n = 0; n < o_.layout.nodes; ++n) {
          if (network_->LinkUp(n)) continue;
          Detect({{.kind = resilience::EventKind::kNodeLost,
                   .rank = n * o_.layout.procs_per_node,
                   .step = monitor_->MaxStep()},
                  fmt::format("node {} lost its network link ({} {})", n, Where(w.rank),
                              ExitReason(x))});
          break;
        }
        if (decision_) continue;
      }
      store_->Set(comm::FailureKey(env_.generation), fmt::format("{} {}", w.rank, ExitReason(x)));
      Detect({{.kind = resilience::EventKind::kCrash, .rank = w.rank, .step = monitor_->MaxStep()},
              DescribeExit(x, o_.layout)});
    }
  }
}

void Supervisor::CheckHealth() {
  if (decision_) return;
  const auto now = Clock::now();
  if (network_ && now >= next_link_check_) {
    // A node's NIC: its link state, once a second (the survivors' collectives
    // would only notice at their timeout).
    next_link_check_ = now + std::chrono::seconds(1);
    for (int n = 0; n < o_.layout.nodes; ++n) {
      if (network_->LinkUp(n)) continue;
      Detect({{.kind = resilience::EventKind::kNodeLost,
               .rank = n * o_.layout.procs_per_node,
               .step = monitor_->MaxStep()},
              fmt::format("node {} lost its network link (interface eth0 is down)", n)});
      return;
    }
  }
  if (const std::optional<SilentRank> h = monitor_->Hung(now)) {
    Detect({{.kind = resilience::EventKind::kHang, .rank = h->rank, .step = monitor_->MaxStep()},
            fmt::format("{} hung: no heartbeat for {:.1f} s (timeout {:.0f} s), last at step {} "
                        "in phase {}",
                        Where(h->rank), h->silent_seconds, o_.monitor.heartbeat_timeout, h->step,
                        h->phase)});
    return;
  }
  if (const std::optional<int> r = monitor_->Straggler()) {
    Detect({{.kind = resilience::EventKind::kStraggler, .rank = *r, .step = monitor_->MaxStep()},
            fmt::format("{} is a straggler: computing more than {:.1f}x its peers' median for {} "
                        "steps in a row",
                        Where(*r), o_.monitor.straggler_factor, o_.monitor.straggler_steps)});
  }
}

void Supervisor::FireInjections() {
  const auto now = Clock::now();
  if (now >= next_scan_) {
    next_scan_ = now + std::chrono::milliseconds(200);
    std::vector<std::string> errors;
    for (InjectRequest& r : TakeRequests(o_.run_dir, &errors)) {
      if (fired_.contains(r.id)) continue;
      Note(fmt::format("fault injection: {} on rank {} after step {} requested", r.kind, r.rank,
                       r.at_step));
      pending_.push_back(std::move(r));
    }
    for (const std::string& e : errors) Note(e);
  }
  if (decision_) return;
  for (size_t i = 0; i < pending_.size();) {
    const InjectRequest& r = pending_[i];
    if (r.rank < 0 || r.rank >= o_.layout.world()) {
      Note(fmt::format("fault injection {}: rank {} does not exist (ranks 0..{}); ignored", r.kind,
                       r.rank, o_.layout.world() - 1));
      pending_.erase(pending_.begin() + static_cast<long>(i));
      continue;
    }
    if (monitor_->StepOf(r.rank) < r.at_step) {
      ++i;
      continue;
    }
    const InjectRequest fire = r;
    pending_.erase(pending_.begin() + static_cast<long>(i));
    fired_.insert(fire.id);
    SaveState();  // before acting: a supervisor-restart must not fire it again
    Fire(fire);
    if (decision_ || reexec_) return;
  }
}

void Supervisor::Fire(const InjectRequest& r) {
  fired_at_ = Clock::now();
  const cluster::WorkerProcess& w = workers_.at(static_cast<size_t>(r.rank));
  Note(fmt::format("fault injection: {} on {} at step {}", r.kind, Where(r.rank),
                   monitor_->StepOf(r.rank)));
  if (r.kind == "crash") {
    ::kill(w.pid, SIGKILL);
  } else if (r.kind == "hang") {
    ::kill(w.pid, SIGSTOP);
  } else if (r.kind == "corrupt-checkpoint") {
    try {
      Note("fault injection: flipped a byte of " + CorruptNewestShard(o_.checkpoint_dir, r.rank));
    } catch (const std::exception& e) {
      Note(fmt::format("fault injection corrupt-checkpoint: {}", e.what()));
    }
    ::kill(w.pid, SIGKILL);  // the restart must read the checkpoint back
  } else if (r.kind == "network-cut") {
    if (!network_) {
      Note("fault injection network-cut: the run has no network namespaces; ignored");
      return;
    }
    network_->SetLink(r.rank / o_.layout.procs_per_node, false);
  } else if (r.kind == "notice") {
    Detect({{.kind = resilience::EventKind::kNotice, .rank = r.rank, .step = monitor_->MaxStep()},
            fmt::format("termination notice for node {} ({:.0f} s to save)",
                        r.rank / o_.layout.procs_per_node, o_.notice_deadline)});
  } else if (r.kind == "supervisor-restart") {
    Note("supervisor-restart: stopping every worker and starting the supervisor again");
    result_.ledger.incidents().push_back(
        {.kind = "supervisor-restart",
         .step = monitor_->MaxStep(),
         .at = Since(start_, Clock::now()),
         .decision = "restart: the new supervisor resumes from the newest checkpoint",
         .what = "fault injection: the supervisor restarts"});
    ++history_.restarts;
    reexec_ = true;
    KillAll(SIGKILL);
  } else if (IsWorkerKind(r.kind)) {
    if (control_fd_[r.rank] < 0 ||
        !SendLine(control_fd_[r.rank], {{"cmd", "inject"}, {"kind", r.kind}})) {
      Note(fmt::format("fault injection {}: {} has no control channel; ignored", r.kind,
                       Where(r.rank)));
    }
  } else {
    Note(fmt::format("fault injection: unknown kind \"{}\"; ignored", r.kind));
  }
}

void Supervisor::Detect(const Seen& seen) {
  if (decision_) return;
  detected_at_ = Clock::now();
  const int dp = o_.layout.world();
  resilience::Decision d = resilience::Decide(
      o_.policy, {.dp_full = dp, .dp_active = dp, .spares_ready = 0}, history_, seen.event);
  if (seen.event.kind == resilience::EventKind::kNonFinite)
    history_.last_nonfinite_step = seen.event.step;
  // What the runtime cannot do yet, it says, and restores from a checkpoint.
  if (d.verb == resilience::Verb::kRestart && d.action.restore != resilience::Restore::kCheckpoint)
    d.reason += "; peers and shrinking are not in the runtime yet: restoring a checkpoint";
  if (d.max_restore_step >= 0) max_restore_step_ = d.max_restore_step;
  decision_ = d;
  metrics::Incident inc;
  inc.kind = std::string(resilience::EventName(seen.event.kind));
  inc.rank = seen.event.rank;
  inc.step = seen.event.step;
  inc.at = Since(start_, detected_at_);
  inc.what = seen.what;
  inc.decision = fmt::format("{}: {}", resilience::VerbName(d.verb), d.reason);
  if (fired_at_) {
    inc.detect_seconds = Since(*fired_at_, detected_at_);
    result_.ledger.Book("detection", inc.detect_seconds);
  }
  Note(fmt::format(
      "fault: {}{}", seen.what,
      inc.detect_seconds >= 0 ? fmt::format(" (detected in {:.2f} s)", inc.detect_seconds) : ""));
  Note(fmt::format("decision: {}: {}", resilience::VerbName(d.verb), d.reason));
  result_.ledger.incidents().push_back(inc);
  if (d.verb == resilience::Verb::kRestart || d.verb == resilience::Verb::kSaveAndRestart)
    recovering_ = result_.ledger.incidents().size() - 1;
  switch (d.verb) {
    case resilience::Verb::kStop: {
      result_.failure = fmt::format("{}; {}", seen.what, d.reason);
      result_.failed_rank = seen.event.rank;
      // The run ends: the survivors get the grace period to notice the
      // failure the store reports and to say whom they lost, in their logs.
      const auto grace = std::chrono::milliseconds(static_cast<int64_t>(o_.grace_seconds * 1000));
      term_at_ = Clock::now() + grace;
      kill_at_ = term_at_ + grace;
      if (seen.event.kind == resilience::EventKind::kHang) KillAll(SIGKILL);
      break;
    }
    case resilience::Verb::kRestart:
      KillAll(SIGKILL);
      break;
    case resilience::Verb::kSaveAndRestart:
    case resilience::Verb::kSaveAndStop:
      SendAll({{"cmd", "stop"}, {"reason", inc.kind}, {"deadline_s", o_.notice_deadline}});
      kill_at_ =
          Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(o_.notice_deadline * 1e3));
      break;
  }
  SaveState();
}

void Supervisor::KillAll(int sig) {
  for (const auto& w : workers_) {
    if (alive_[w.rank]) ::kill(w.pid, sig);
  }
}

void Supervisor::SendAll(const nlohmann::json& command) {
  for (size_t r = 0; r < control_fd_.size(); ++r) {
    if (control_fd_[r] >= 0 && alive_[r]) SendLine(control_fd_[r], command);
  }
}

}  // namespace

std::string ExitReason(const RankExit& e) {
  if (e.signal != 0) {
    const char* name = sigabbrev_np(e.signal);
    return fmt::format("was killed by SIG{}", name != nullptr ? name : std::to_string(e.signal));
  }
  return fmt::format("exited with status {}", e.exit_code);
}

std::string DescribeExit(const RankExit& e, const cluster::LocalLayout& layout) {
  return fmt::format("rank {} (node {}, local rank {}) {}", e.rank, e.rank / layout.procs_per_node,
                     e.rank % layout.procs_per_node, ExitReason(e));
}

RunResult Supervise(const SuperviseOptions& options, const EventFn& on_event, const LineFn& on_line,
                    const NoteFn& on_note) {
  Supervisor s(options, on_event, on_line, on_note);
  return s.Run();
}

}  // namespace fmstack::runtime
