// runtime: the worker's side of a supervised run. A Worker sends heartbeats
// (the step and phase the caller last reported) from its own thread, so the
// supervisor can tell a worker that is busy from one that is stopped or
// hung, and collects the supervisor's commands for the training loop to act
// on at a step boundary. Outside `fmstack run` there is no channel and every
// call is a no-op.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace fmstack::runtime {

class Worker {
 public:
  // The channel named by FMSTACK_CONTROL_FD, or an inactive worker.
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
  // Commands received since the last call, oldest first.
  std::vector<nlohmann::json> TakeCommands();

 private:
  void Loop();

  int fd_ = -1;
  std::chrono::milliseconds interval_;
  std::mutex mu_;  // guards phase_, commands_ and writes to fd_
  std::string phase_ = "start";
  std::atomic<int64_t> step_{0};
  std::vector<nlohmann::json> commands_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fmstack::runtime
