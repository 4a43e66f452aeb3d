// runtime: the worker's side of a supervised run. A Worker sends heartbeats
// (the step and phase the caller last reported) from its own thread, so the
// supervisor can tell a worker that is busy from one that is stopped or
// hung, and collects the supervisor's commands for the training loop to act
// on at a step boundary. Outside `fmstack run` there is no channel and every
// call is a no-op.
#pragma once

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "runtime/control.h"

namespace fmstack::runtime {

// The termination signals a coordinating worker reports instead of dying of
// them (Worker::CoordinateSignals); the supervisor takes a report of one of
// these as the scheduler's stop.
inline constexpr int kCoordinatedSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
inline bool IsCoordinatedSignal(int sig) {
  for (const int s : kCoordinatedSignals)
    if (s == sig) return true;
  return false;
}

class Worker {
 public:
  // The channel named by FMSTACK_CONTROL_FD, or a TCP connection to
  // FMSTACK_CONTROL_ADDR (a worker on another host; throws Error when it
  // cannot be made), or an inactive worker.
  static std::unique_ptr<Worker> FromEnv(std::chrono::milliseconds heartbeat_interval);
  Worker(int fd, std::chrono::milliseconds heartbeat_interval);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  bool active() const { return fd_ >= 0; }
  // What the worker is doing now; sent with every heartbeat.
  void Progress(int64_t step, std::string_view phase);
  // An event for the supervisor (a fault report, a result).
  void Send(nlohmann::json event);
  // Commands received since the last call, oldest first; those with an
  // OnArrival hook stay for WaitCommand.
  std::vector<nlohmann::json> TakeCommands();
  // Waits up to `timeout` for a command named `cmd` and takes it (older
  // commands of other names stay queued); nullopt on timeout or when the
  // channel is closed or inactive.
  std::optional<nlohmann::json> WaitCommand(std::string_view cmd,
                                            std::chrono::milliseconds timeout);
  // Calls `fn` on the worker's own thread as soon as a command named `cmd`
  // arrives (it is queued as well), while the training thread may be
  // blocked: for what must interrupt it, such as aborting a collective.
  // An empty `fn` removes the hook.
  void OnArrival(std::string cmd, std::function<void(const nlohmann::json&)> fn);
  // From here SIGTERM, SIGINT, SIGHUP and SIGUSR1 no longer end the process:
  // each is reported to the supervisor ({"ev": "signal"}), which coordinates
  // the stop (an emergency checkpoint, then a "stop" command at a step
  // boundary). Schedulers signal every process of a job at once, and a
  // worker that died of it would lose the step the save is for. After the
  // supervisor's "terminate" command the next such signal ends the process
  // as before. The previous handlers come back on destruction. Call at most
  // once; a no-op when inactive. The handlers are process-wide: one
  // coordinating Worker per process.
  void CoordinateSignals();

 private:
  void Loop();
  void Close();         // the channel ended: no command will come
  void OnSignals();     // the self-pipe has signal numbers: report, or end on "terminate"
  bool ReadCommands();  // one read of the channel; false when it ended

  int fd_ = -1;
  std::atomic<bool> lifeline_{false};  // the process ends when the channel does
  std::chrono::milliseconds interval_;
  std::mutex mu_;  // guards phase_, commands_ and writes to fd_
  std::string phase_ = "start";
  std::atomic<int64_t> step_{0};
  std::vector<nlohmann::json> commands_;
  std::condition_variable arrived_;
  std::map<std::string, std::function<void(const nlohmann::json&)>, std::less<>> hooks_;
  bool closed_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> terminate_{false};  // the supervisor's "terminate" arrived
  int signal_pipe_[2] = {-1, -1};       // CoordinateSignals: handler -> Loop
  std::atomic<int> signal_read_{-1};    // signal_pipe_[0], once it exists
  std::set<int> reported_;              // signals already said on stderr (Loop's thread)
  LineReader reader_;                   // Loop's thread
  std::vector<std::pair<int, struct sigaction>> saved_handlers_;
  std::thread thread_;
};

}  // namespace fmstack::runtime
