// The supervisor's termination contract (docs/resilience.md, "Stopping a
// run"). Schedulers stop a job in many ways: Slurm signals every process of
// the job at once (time limit, scancel, preemption) and warns first when
// asked (--signal=B:USR1@N); systemd signals the whole control group; GNU
// timeout signals its child, then the child's process group; Kubernetes
// signals PID 1. Whatever the order and however often the signals come,
// one stop happens: the workers save the current step within a deadline
// (resilience.stop_deadline, notice_deadline for SIGUSR1) and the run ends
// as stopped, never as a crash, and is never restarted. Only SIGQUIT, or a
// second Ctrl-C at the terminal, aborts the save.
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>

#include "runtime/supervisor_impl.h"

namespace fmstack::runtime::internal {
namespace {

std::string SignalName(int sig) {
  const char* name = sigabbrev_np(sig);
  return name != nullptr ? fmt::format("SIG{}", name) : fmt::format("signal {}", sig);
}

}  // namespace

void Supervisor::TakeSignals() {
  for (const SignalInfo& s : signals_->Take()) {
    if (s.signo == SIGCHLD) continue;
    const bool terminal = s.code == SI_KERNEL;
    const std::string from = terminal    ? "from the terminal"
                             : s.pid > 0 ? fmt::format("from pid {}", s.pid)
                                         : std::string("");
    OnTermination(s.signo, terminal,
                  fmt::format("{}{}{}", SignalName(s.signo), from.empty() ? "" : " ", from));
  }
}

void Supervisor::OnTermination(int sig, bool from_terminal, const std::string& source) {
  if (sig == SIGHUP && o_.keep_on_hangup) {
    if (repeats_noted_.insert(sig).second)
      Note(fmt::format("{}: the run goes on (resilience.on_hangup = \"ignore\")", source));
    return;
  }
  const bool abort = sig == SIGQUIT || (from_terminal && sig == SIGINT && result_.interrupted);
  if (result_.interrupted && !abort) {
    // timeout(1) signals its child and then the group; Slurm and systemd
    // signal every process: the same stop, seen again.
    if (repeats_noted_.insert(sig).second)
      Note(
          fmt::format("{}: the stop is already under way ({:.0f} s to save); SIGQUIT, or Ctrl-C "
                      "twice at the terminal, aborts it",
                      source, stop_deadline_));
    return;
  }
  const bool first = !result_.interrupted;
  if (first) {
    result_.interrupted = true;
    result_.signal = sig;
    stop_deadline_ = sig == SIGUSR1 ? o_.notice_deadline : o_.stop_deadline;
  }
  if (first && running_ > 0 && !decision_) {
    Note(fmt::format("{}: saving the current step (within {:.0f} s), then stopping{}", source,
                     stop_deadline_, sig == SIGQUIT ? "" : " (SIGQUIT aborts)"));
    Detect({{.kind = resilience::EventKind::kSignal, .step = monitor_->MaxStep()}, source});
  } else if (first && rejoin_) {
    AbandonRejoin(fmt::format("{} during the rejoin", source));  // kills: nothing to save
  } else if (first && decision_ && (decision_->verb == resilience::Verb::kRestart)) {
    Note(
        fmt::format("{} during a recovery: no restart; a rerun resumes from the newest committed "
                    "checkpoint",
                    source));
    KillAll(SIGKILL);
  } else if (first && decision_) {
    Note(fmt::format("{}: no restart after the save under way", source));
  } else if (first) {
    Note(fmt::format("{}: no restart", source));
  }
  if (abort) {
    Note(
        fmt::format("{}: aborting: every worker is killed now; the newest committed checkpoint "
                    "is where a rerun resumes",
                    source));
    KillAll(SIGKILL);
  }
}

void Supervisor::BookStopLoss() {
  if (!stop_incident_ || *stop_incident_ >= result_.ledger.incidents().size()) return;
  metrics::Incident& inc = result_.ledger.incidents()[*stop_incident_];
  const int64_t reached = monitor_ ? monitor_->MaxStep() : 0;
  inc.lost_steps = std::max<int64_t>(0, reached - std::max<int64_t>(0, committed_step_));
  if (inc.lost_steps > 0)
    Note(fmt::format("steps {}..{} were not saved: a rerun trains them again",
                     std::max<int64_t>(0, committed_step_) + 1, reached));
}

}  // namespace fmstack::runtime::internal
