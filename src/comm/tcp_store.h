// comm: the rendezvous key-value store. The supervisor (fmstack run) serves it
// over TCP; every rank connects as a client. Gloo rendezvous goes through it
// (TcpStore implements gloo's Store interface), and so do the supervisor's
// failure reports, so a survivor can name the rank that died.
//
// Every connection proves it holds the run's secret before it may ask
// anything, in its first message: a nonce, the time, and HMAC-SHA256(secret,
// "client" | nonce | time); the server refuses a time more than 5 minutes
// off and a nonce it has seen, and proves itself back with HMAC(secret,
// "server" | nonce | time); the secret never crosses the wire. Because a
// rank's proof is usually in the socket when the server accepts it, a rank
// is admitted at once; connections still without a proof are few and
// short-lived (at most max_unauthenticated, the oldest evicted by a newer
// one, each given handshake_timeout), so a local process without the secret
// that floods the port cannot keep the run's ranks out. A client whose
// connection is dropped before its proof was read tries again until its
// deadline, and its error then says which of capacity, deadline or secret
// it met. The server never blocks on one client (non-blocking sockets, a
// bounded output buffer per connection) and bounds what it holds: key and
// value sizes and the total, each refused with a clear error at the client.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/communicator.h"

namespace fmstack::comm {

struct StoreLimits {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = 64 << 20;
  size_t max_total_bytes = 512 << 20;  // keys + values held
  size_t max_connections = 4096;       // authenticated
  size_t max_unauthenticated = 128;    // waiting for their proof
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(2)};
};

// 32 random bytes, hex: a run's store secret.
std::string NewStoreSecret();

// Serves the store on host:port (port 0 picks a free one) from one thread.
class TcpStoreServer {
 public:
  using Log = std::function<void(const std::string&)>;
  // `secret` must be non-empty; refused connections are described to `log`.
  TcpStoreServer(const std::string& host, uint16_t port, std::string secret, Log log = {},
                 StoreLimits limits = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }
  // Sets a key from the serving process itself (e.g. a failure report).
  void Set(const std::string& key, const std::string& value);
  bool Has(const std::string& key) const;

 private:
  struct State;
  void Serve();

  uint16_t port_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

// A client connection. Thread-safe; requests are served one at a time.
class TcpStore : public gloo::rendezvous::Store {
 public:
  // Retries the connection until `connect_timeout` so that ranks may start
  // before the server is listening, then authenticates with `secret`.
  TcpStore(const std::string& host, uint16_t port, const std::string& secret,
           std::chrono::milliseconds connect_timeout = std::chrono::seconds(30));
  ~TcpStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until the key exists or the timeout (default 30 s) passes.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  void Set(const std::string& key, const std::string& value);
  std::string Get(const std::string& key, std::chrono::milliseconds timeout);
  // The value if the key exists within `timeout` (0 = just look), else nullopt.
  std::optional<std::string> TryGet(const std::string& key, std::chrono::milliseconds timeout);
  // Atomically adds delta to the integer at key (absent = 0); returns the sum.
  int64_t Add(const std::string& key, int64_t delta);

 private:
  std::string Request(const std::string& payload, std::chrono::milliseconds timeout,
                      bool* timed_out);
  // The store dropped the connection before it answered (tried again).
  class Dropped : public std::runtime_error {
   public:
    using std::runtime_error::runtime_error;
  };
  void Handshake(const std::string& secret, std::chrono::steady_clock::time_point deadline);
  std::string ReadFrame(std::chrono::steady_clock::time_point deadline);

  std::string address_;
  int fd_ = -1;
  std::mutex mu_;
  std::chrono::milliseconds timeout_{std::chrono::seconds(30)};
};

// Well-known keys the supervisor writes and the ranks read.
inline std::string FailureKey(int64_t generation) {
  return "fmstack/failed/gen" + std::to_string(generation);
}

// The rank the supervisor reported dead for `generation` and why, from
// "<rank> <reason>" under FailureKey; {-1, ""} when none is reported within
// `wait`, {-1, why} when the store cannot be reached.
std::pair<int, std::string> ReportedFailure(TcpStore& store, int64_t generation,
                                            std::chrono::milliseconds wait);

// The error a collective `op` of group `group` throws after its transport
// failed with `transport_error`: it names the rank the supervisor reported
// dead (waiting up to 1.5 s for the report), since a dead peer and every
// survivor that gave up before this rank look alike on the wire.
CommError CollectiveFailure(TcpStore& store, int64_t generation, const char* op, int job_rank,
                            const std::string& group, const std::string& transport,
                            const std::string& transport_error);

}  // namespace fmstack::comm
