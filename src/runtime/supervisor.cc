#include "runtime/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/supervisor_impl.h"
#include "runtime/worker.h"
#include "util/atomic_file.h"
#include "util/dir_lock.h"
#include "util/error.h"

namespace fmstack::runtime::internal {

RunResult Supervisor::Run() {
  std::filesystem::create_directories(o_.run_dir + "/logs");
  std::filesystem::create_directories(o_.run_dir + "/control");
  // Two runs in one directory would mix their checkpoints' shards.
  lock_ = std::make_unique<DirLock>(o_.run_dir, "run.lock", "`fmstack run`");
  signals_ = std::make_unique<SignalFd>();
  if (o_.netns) network_ = std::make_unique<cluster::NodeNetwork>(o_.layout.nodes + o_.spares);
  if (network_) env_.store_addr = network_->bridge_address();
  if (OnSlurm()) {
    if (o_.netns) throw Error("network namespaces (--netns) are for the local backend");
    if (static_cast<int>(o_.slurm.hosts.size()) < o_.layout.nodes + o_.spares)
      throw Error(fmt::format("job {} has {} node(s); the run needs {} and {} spare(s)",
                              o_.slurm.job_id, o_.slurm.hosts.size(), o_.layout.nodes, o_.spares));
    env_.store_addr = o_.slurm.master_addr;
  }
  for (int n = 0; n < o_.layout.nodes; ++n) slot_.push_back(n);
  dropped_.assign(static_cast<size_t>(o_.layout.nodes), false);
  for (int s = 0; s < o_.spares; ++s) spares_.push_back(o_.layout.nodes + s);
  // The store's secret: workers get it by environment (readable by this user
  // only), tools by a 0600 file in the run directory.
  const std::string secret = comm::NewStoreSecret();
  {
    const std::string path = o_.run_dir + "/store.secret";
    std::filesystem::remove(path);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, secret.data(), secret.size()) != static_cast<ssize_t>(secret.size()))
      throw Error(fmt::format("{}: cannot write the store secret: {}", path, std::strerror(errno)));
    ::close(fd);
  }
  store_ = std::make_unique<comm::TcpStoreServer>(
      env_.store_addr, 0, secret, [](const std::string& line) {
        const std::string text = "fmstack run: " + line + "\n";
        (void)!::write(2, text.data(), text.size());  // one write: whole lines under threads
      });

  env_.store_port = store_->port();
  env_.job_id = o_.job_id;
  env_.extra = o_.extra_env;
  env_.extra["FMSTACK_STORE_SECRET"] = secret;
  if (OnSlurm()) {
    listener_ = std::make_unique<ControlListener>(env_.store_addr, secret);
    env_.extra[kControlAddrEnv] = listener_->address();
  }
  env_.extra["FMSTACK_LOG_DIR"] = o_.run_dir + "/logs";
  // Orders the sample ledger's records across reruns and supervisor restarts.
  env_.extra["FMSTACK_RUN_STARTED"] =
      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count());
  if (o_.resume_supervisor) {
    LoadState();
    wall_before_ = result_.ledger.wall();
  } else {
    ContinueLedger();
    result_.ledger.attempts().push_back(
        {.started_unix = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count(),
         .at = wall_before_,
         .end = "running"});
  }
  if (OnSlurm() && o_.slurm.restart_count > slurm_requeues_) NoteRequeue();
  if (!o_.resume_supervisor) {
    // Requests left from an earlier run of this directory are not this run's.
    std::vector<std::string> errors;
    if (const size_t stale = TakeRequests(o_.run_dir, &errors).size() + errors.size(); stale > 0)
      Note(fmt::format("{} fault injection request(s) from before this run discarded", stale));
  }
  pending_ = o_.inject;
  for (size_t i = 0; i < pending_.size(); ++i) pending_[i].id = fmt::format("job-{}", i);
  std::erase_if(pending_, [&](const InjectRequest& r) { return fired_.contains(r.id); });
  StartMetrics();
  StartAgents();
  WriteInfo("running");

  for (;;) {
    RunAttempt();
    result_.ledger.SetWall(wall_before_ + Since(start_, Clock::now()));
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
      while (Clock::now() < until && !result_.interrupted) {
        pollfd p{signals_->fd(), POLLIN, 0};
        ::poll(&p, 1, 100);
        TakeSignals();
      }
      result_.ledger.Book("backoff", Since(begin, Clock::now()));
    }
    // A scheduler's stop during a recovery ends the run: it is never restarted.
    if (result_.interrupted) {
      result_.failure = "stopped by a signal during a recovery";
      break;
    }
    ++history_.restarts;
    ++env_.generation;
    SaveState();
  }
  result_.restarts = history_.restarts;
  if (!result_.interrupted) AwaitBurnins();
  WriteNodes();
  StopAgents();
  result_.seconds = Since(start_, Clock::now());
  result_.ledger.SetWall(wall_before_ + result_.seconds);
  SaveState();
  const char* state = result_.reexec        ? "restarting"
                      : result_.finished    ? "finished"
                      : result_.interrupted ? "stopped"
                                            : "failed";
  if (!result_.ledger.attempts().empty()) result_.ledger.attempts().back().end = state;
  WriteInfo(state);
  const std::string ledger = result_.ledger.ToJson().dump(1) + "\n";
  AtomicFileWriter w(o_.run_dir + "/goodput.json");
  w.Write(ledger.data(), ledger.size());
  w.Commit();
  return result_;
}

void Supervisor::Spawn() {
  const int world = o_.layout.world();
  control_fd_.assign(static_cast<size_t>(world), -1);
  logs_.clear();
  logs_.resize(static_cast<size_t>(world));
  streams_.clear();
  workers_.assign(static_cast<size_t>(world), {});
  alive_.assign(static_cast<size_t>(world), false);
  result_.exits.assign(static_cast<size_t>(world), {});
  running_ = 0;
  std::vector<int> all;  // the nodes an elastic job dropped stay out
  for (int r = 0; r < world; ++r) {
    if (!Dropped(r)) all.push_back(r);
  }
  const bool first = history_.restarts == 0 && !o_.resume_supervisor;
  SpawnRanks(all, first ? "" : fmt::format("---- restart {} ----", history_.restarts));
}

void Supervisor::SpawnRanks(const std::vector<int>& ranks, const std::string& banner) {
  const int world = o_.layout.world();
  std::vector<int> child_ends(static_cast<size_t>(world), -1);
  spawn_gen_.resize(static_cast<size_t>(world), -1);
  // Slurm's workers dial the supervisor instead (AcceptControl).
  for (const int r : OnSlurm() ? std::vector<int>{} : ranks) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      for (const int fd : child_ends) ::close(fd);
      throw Error(fmt::format("socketpair for rank {}: {}", r, std::strerror(errno)));
    }
    control_fd_[r] = sv[0];
    child_ends[r] = sv[1];
  }
  env_.extra["FMSTACK_RESTART_COUNT"] = std::to_string(history_.restarts);
  env_.restart_count = history_.restarts;
  env_.max_restarts = o_.policy.max_restarts;
  env_.extra["FMSTACK_RUN_DIR"] = o_.run_dir;
  if (network_) {
    env_.node_netns.clear();
    env_.node_host.clear();
    for (int n = 0; n < o_.layout.nodes; ++n) {
      env_.node_netns.push_back(network_->namespace_paths().at(static_cast<size_t>(slot_[n])));
      env_.node_host.push_back(network_->node_addresses().at(static_cast<size_t>(slot_[n])));
    }
  }
  if (OnSlurm()) {
    env_.node_prefix.clear();
    env_.node_host.clear();
    for (int n = 0; n < o_.layout.nodes; ++n) {
      const cluster::SlurmHost& host = o_.slurm.hosts.at(static_cast<size_t>(slot_[n]));
      env_.node_prefix.push_back(
          cluster::SrunPrefix(o_.slurm, host, fmt::format("{}.node{}", o_.job_name, n)));
      env_.node_host.push_back(host.addr);
    }
  }
  // The program's MASTER_ADDR is the host of its rank 0 (the first node still
  // in the group); MASTER_PORT is free when chosen, once per generation so
  // that replacements find their group's.
  int first = 0;
  while (first < o_.layout.nodes - 1 && dropped_[first]) ++first;
  env_.master_addr = env_.node_host.empty() ? env_.store_addr : env_.node_host[first];
  if (program_port_generation_ != env_.generation) {
    env_.master_port = cluster::FreeTcpPort(env_.store_addr);
    program_port_generation_ = env_.generation;
  }
  if (max_restore_step_ >= 0) {
    env_.extra["FMSTACK_RESTORE_MAX_STEP"] = std::to_string(max_restore_step_);
  } else {
    env_.extra.erase("FMSTACK_RESTORE_MAX_STEP");
  }
  std::vector<cluster::WorkerProcess> started;
  try {
    if (ActiveNodes() == o_.layout.nodes) {
      started = cluster::SpawnWorkers(o_.layout, env_, o_.argv, child_ends, ranks);
    } else {
      // An elastic job short of nodes: each rank gets its place in the group.
      const cluster::LaunchEnv base = env_;
      for (const int r : ranks) {
        cluster::LaunchEnv e = base;
        const int group = GroupRank(r);
        e.extra["RANK"] = std::to_string(group);
        e.extra["WORLD_SIZE"] = std::to_string(ActiveWorld());
        e.extra["NODE_RANK"] = e.extra["GROUP_RANK"] =
            std::to_string(group / o_.layout.procs_per_node);
        e.extra["FMSTACK_NODES"] = e.extra["GROUP_WORLD_SIZE"] = std::to_string(ActiveNodes());
        for (cluster::WorkerProcess& w :
             cluster::SpawnWorkers(o_.layout, e, o_.argv, child_ends, {r}))
          started.push_back(w);
      }
    }
  } catch (...) {
    for (const cluster::WorkerProcess& w : started) ::kill(w.pid, SIGKILL);
    for (const int r : ranks) {
      ::close(child_ends[r]);
      ::close(control_fd_[r]);
      control_fd_[r] = -1;
    }
    throw;
  }
  for (const int fd : child_ends) {
    if (fd >= 0) ::close(fd);
  }
  for (const auto& w : started) {
    // Every start appends, so a rank's log tells its whole story: each
    // attempt of the run (a rerun of the directory) and each restart in it.
    std::ofstream& log = logs_[w.rank];
    if (!log.is_open())
      log.open(fmt::format("{}/logs/rank{}.log", o_.run_dir, w.rank), std::ios::app);
    if (attempt_marked_.insert(w.rank).second) {
      log << fmt::format("---- attempt {} of this run directory ----\n",
                         std::max<size_t>(1, result_.ledger.attempts().size()));
    }
    if (!banner.empty()) log << banner << "\n";
    workers_[w.rank] = w;
    streams_.push_back({Stream::kOut, w.rank, w.out_fd, {}, {}});
    streams_.push_back({Stream::kErr, w.rank, w.err_fd, {}, {}});
    if (control_fd_[w.rank] >= 0)
      streams_.push_back({Stream::kControl, w.rank, control_fd_[w.rank], {}, {}});
    spawn_gen_[w.rank] = env_.generation;
    alive_[w.rank] = true;
    result_.exits[w.rank] = {};
    ++running_;
  }
  for (size_t s = 0; s < agents_.size(); ++s) SendPids(static_cast<int>(s));
  WriteNodes();
}

void Supervisor::RunAttempt() {
  decision_.reset();
  report_.reset();
  fired_at_.reset();
  restored_ = false;
  rejoin_.reset();
  term_at_ = kill_at_ = Clock::time_point::max();
  attempt_start_ = relaunch_at_ = Clock::now();
  monitor_ = std::make_unique<RankMonitor>(o_.layout.world(), o_.monitor, attempt_start_);
  for (int r = 0; r < o_.layout.world(); ++r) {
    if (Dropped(r)) monitor_->Retire(r);
  }
  Spawn();
  Clock::time_point drain_until = Clock::time_point::max();
  while (running_ > 0 || !streams_.empty()) {
    Poll();
    Reap();
    const auto now = Clock::now();
    if (rejoin_) AdvanceRejoin();
    RepairNodes();
    TendAgents();
    MaybeGrow();
    Publish();
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
                  std::all_of(result_.exits.begin(), result_.exits.end(), [&](const RankExit& e) {
                    return Dropped(e.rank) || (e.signal == 0 && e.exit_code == 0);
                  });
  if (decision_ && (decision_->verb == resilience::Verb::kSaveAndStop ||
                    decision_->verb == resilience::Verb::kSaveAndRestart)) {
    Note(result_.saved ? "every rank saved the current step and stopped"
                       : "the emergency checkpoint did not complete: the newest committed one "
                         "stays in charge");
    if (!result_.saved && decision_->verb == resilience::Verb::kSaveAndStop) BookStopLoss();
  }
  // A fault recorded after the decision's kill (a survivor's report) is noise.
  if (decision_ && network_) {
    for (int n = 0; n < o_.layout.nodes; ++n) {
      if (!dropped_[n] && !network_->LinkUp(slot_[n])) {
        Note(fmt::format("node {}: link restored (the node is rebooted in place)", n));
        network_->SetLink(slot_[n], true);
      }
    }
  }
}

void Supervisor::Poll() {
  std::vector<pollfd> fds{{signals_->fd(), POLLIN, 0}};
  for (const Stream& s : streams_) fds.push_back({s.fd, POLLIN, 0});
  for (const AgentProc& a : agents_) fds.push_back({a.fd, POLLIN, 0});  // -1: ignored
  if (listener_) {
    for (const int fd : listener_->fds()) fds.push_back({fd, POLLIN, 0});
  }
  ::poll(fds.data(), fds.size(), 100);
  TakeSignals();
  char buf[65536];
  PollAgents(std::span(fds).subspan(1 + streams_.size(), agents_.size()));
  for (size_t i = 1; i < 1 + streams_.size(); ++i) {
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
  if (listener_) AcceptControl();
}

void Supervisor::DrainControl(int rank) {
  char buf[65536];
  for (Stream& s : streams_) {
    if (s.kind != Stream::kControl || s.rank != rank || s.fd < 0) continue;
    // A worker sends its report, then exits: what it sent is in the socket
    // buffer when the exit is seen. Bounded: a rank cannot keep us here.
    for (int reads = 0; reads < 64; ++reads) {
      pollfd p{s.fd, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0 || (p.revents & POLLIN) == 0) break;
      const ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n <= 0) break;  // the end, or an error: Poll closes it
      Deliver(s, std::string_view(buf, static_cast<size_t>(n)));
    }
  }
}

void Supervisor::AcceptControl() {
  std::vector<std::string> refused;
  for (const ControlListener::Joined& j : listener_->Advance(&refused)) {
    const bool waited = j.slot >= 0 && static_cast<size_t>(j.slot) < alive_.size() &&
                        alive_[j.slot] && control_fd_[j.slot] < 0 &&
                        spawn_gen_[j.slot] == j.generation;
    if (!waited) {
      // A worker of an earlier generation (its srun was killed, it was not):
      // closing the connection ends it.
      Note(
          fmt::format("control connection for rank {} of generation {} closed: no such worker "
                      "waits for one (now generation {})",
                      j.slot, j.generation, env_.generation));
      ::close(j.fd);
      continue;
    }
    control_fd_[j.slot] = j.fd;
    streams_.push_back({Stream::kControl, j.slot, j.fd, {}, {}});
  }
  for (const std::string& r : refused) Note(r);
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
      const std::optional<nlohmann::json> m = ParseLine(line);
      if (!m) continue;
      // A field of the wrong type (a step that is a string) is the sender's
      // error: said and dropped, never the end of the supervisor.
      try {
        OnControl(s.rank, *m);
      } catch (const nlohmann::json::exception& e) {
        Note(fmt::format("{}: control message {} has a field of the wrong type ({}); ignored",
                         Where(s.rank), line.substr(0, 120), e.what()));
      }
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
  if (rank != Lead()) return;
  result_.ledger.Step(step, step_s);
  MetricsOnStep(e);
  if (!decision_) history_.futile_restarts = 0;
  if (recovering_ && !decision_ && restored_) {
    metrics::Incident& i = result_.ledger.incidents()[*recovering_];
    i.recovery_seconds = Since(detected_at_, Clock::now());
    Note(fmt::format("recovered from {} in {:.2f} s: step {} done", i.kind, i.recovery_seconds,
                     step));
    MetricsOnRecovered(i.kind, i.recovery_seconds);
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
  if (ev == "collective-failed") {
    OnCollectiveFailed(rank, m);
    return;
  }
  if (ev == "step") {  // a program on libfmstack: its steps come by channel, not stdout
    OnStepEvent(rank, m);
    return;
  }
  if (ev == "restore" && rank == Lead() && !restored_) {
    restored_ = true;
    const int64_t step = m.value("step", int64_t{0});
    committed_step_ = step;
    const double seconds = m.value("seconds", 0.0);
    result_.ledger.Book("restore", seconds);
    if (history_.restarts > 0 || o_.resume_supervisor) {
      // From the decision (or the supervisor's start) to the restore: relaunch.
      const double since = Since(relaunch_at_, now) - seconds;
      result_.ledger.Book("restart", since);
    }
    // The limit after a silent corruption holds for the restore it caused:
    // what is saved from here on comes from the clean trajectory (keeping
    // it would refuse every newer checkpoint at the next restart).
    if (max_restore_step_ >= 0) {
      max_restore_step_ = -1;
      SaveState();
    }
    // A fresh start reports step 0 restored: nothing was, and the
    // restore-time histogram counts only real restores.
    if (step > 0 || m.value("source", "") == "peers")
      MetricsOnRestore(m.value("source", "checkpoint"), seconds);
    if (!result_.ledger.attempts().empty() && result_.ledger.attempts().back().from_step < 0)
      result_.ledger.attempts().back().from_step = step;
    const int64_t lost = result_.ledger.RollBack(step);
    if (recovering_) result_.ledger.incidents()[*recovering_].lost_steps += lost;
    if (lost > 0) Note(fmt::format("restored step {}: {} step(s) to train again", step, lost));
    if (m.value("source", "") == "peers")
      Note(fmt::format("checkpointless: step {} restored from peer memory in {:.3f} s: {}", step,
                       seconds, m.value("what", "")));
    return;
  }
  if (ev == "signal" && m["sig"].is_number_integer()) {
    // A worker got a termination signal (the scheduler's, perhaps before
    // ours): the same stop, coordinated here.
    const int sig = m["sig"].get<int>();
    if (IsCoordinatedSignal(sig))
      OnTermination(sig, false, fmt::format("SIG{} to {}", sigabbrev_np(sig), Where(rank)));
    return;
  }
  if (ev == "commit" && m["tier"].is_string() && m["tier"].get<std::string>().size() < 64) {
    if (m["step"].is_number_integer())
      committed_step_ = std::max(committed_step_, m["step"].get<int64_t>());
    MetricsOnCommit(m["tier"].get<std::string>(), m.value("seconds", 0.0));
    return;
  }
  if (ev == "ckpt" && rank == Lead() && !decision_) {
    result_.ledger.Book("checkpoint", m.value("blocking_s", 0.0));
    MetricsOnCheckpoint(m.value("step", int64_t{0}), m.value("blocking_s", 0.0));
    return;
  }
  if (ev == "fault") {
    const std::optional<resilience::EventKind> kind = ReportedKind(m.value("kind", ""));
    if (!kind) return;
    Seen seen{{.kind = *kind,
               .rank = m.value("rank", rank),
               .step = m.value("step", monitor_->MaxStep()),
               .verified_step = m.value("verified_step", verified_step_)},
              m.value("what", "a fault"),
              m.value("gen", int64_t{-1})};
    if (seen.event.rank < 0 || seen.event.rank >= o_.layout.world()) seen.event.rank = rank;
    if (*kind == resilience::EventKind::kNonFinite ||
        *kind == resilience::EventKind::kSilentCorruption) {
      Detect(seen);  // every rank sees these at once: no need to wait for an exit
    } else if (!report_) {
      report_ = seen;  // acted on when the reporting rank exits
    }
  }
}

}  // namespace fmstack::runtime::internal

namespace fmstack::runtime {

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
  internal::Supervisor s(options, on_event, on_line, on_note);
  return s.Run();
}

}  // namespace fmstack::runtime