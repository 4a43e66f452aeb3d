// runtime: the control channel over TCP, for workers that are not the
// supervisor's children (the Slurm backend: srun starts them on other
// hosts). A worker dials FMSTACK_CONTROL_ADDR and both sides prove that
// they hold the run's secret: the supervisor sends a nonce, the worker
// answers with its launch slot, its generation, a nonce of its own and
// HMAC-SHA256(secret, "client" | server nonce | client nonce | slot | gen),
// the supervisor answers with its own proof. After that the connection
// carries the same JSON lines as the local socketpair.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace fmstack::runtime {

inline constexpr const char* kControlAddrEnv = "FMSTACK_CONTROL_ADDR";

// The worker's side: connects to HOST:PORT and completes the handshake
// within `deadline`. Returns the connected descriptor; throws Error naming
// the address and what failed (refused, timed out, wrong secret).
int DialControl(const std::string& address, const std::string& secret, int slot, int64_t generation,
                std::chrono::milliseconds deadline);

// The supervisor's side: listens on HOST:0 and takes connections through
// their handshakes without blocking (each gets kHandshakeSeconds).
class ControlListener {
 public:
  static constexpr double kHandshakeSeconds = 5;
  ControlListener(const std::string& host, std::string secret);
  ~ControlListener();
  ControlListener(const ControlListener&) = delete;
  ControlListener& operator=(const ControlListener&) = delete;

  std::string address() const { return address_; }  // HOST:PORT
  // Descriptors to poll for input: the listener, then connections mid-handshake.
  std::vector<int> fds() const;
  struct Joined {
    int slot = -1;
    int64_t generation = 0;
    int fd = -1;  // the caller owns it
  };
  // Accepts and advances handshakes; returns the connections that completed.
  // Refusals (bad proof, malformed hello, deadline) are closed and described
  // in *refused.
  std::vector<Joined> Advance(std::vector<std::string>* refused);

 private:
  struct Pending {
    int fd;
    std::string nonce, peer, buffer;
    std::chrono::steady_clock::time_point deadline;
  };
  int fd_ = -1;
  std::string secret_, address_;
  std::vector<Pending> pending_;
};

}  // namespace fmstack::runtime
