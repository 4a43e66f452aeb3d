// serve: the API server in front of an Engine. One event loop (Boost.Asio)
// carries every connection; the protocols are Boost.Beast's:
//   HTTP/1.1  POST /v1/completions (JSON, or server-sent events with
//             "stream": true), GET /v1/models, GET /health, GET /metrics
//   WebSocket GET /v1/stream upgraded: one persistent bidirectional session
//             (append input, generate, cancel; tokens as they are made;
//             ping every ping_interval, a peer two pongs late is dropped)
// Limits: a body limit, a deadline for a request to arrive once its first
// byte has, an idle deadline, a connection cap, a bounded engine queue (429
// with Retry-After). Without an API key the server binds loopback only; with
// one, every route but /health needs "Authorization: Bearer KEY".
//
// Thread-safety: Run on one thread; Shutdown from any thread or a signal.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "serve/api.h"
#include "serve/engine.h"

namespace fmstack::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (port() tells which)
  std::string api_key;   // empty: no authentication (loopback only)
  std::string model_name = "fmstack";
  int64_t max_body_bytes = 1 << 20;
  std::chrono::milliseconds request_timeout{10000};  // first byte to whole request
  std::chrono::milliseconds idle_timeout{60000};     // a connection with no request
  int64_t max_connections = 4096;
  std::chrono::milliseconds ping_interval{60000};  // WebSocket pings
  std::chrono::milliseconds drain_timeout{30000};  // in-flight work on SIGTERM
};

class Server {
 public:
  // Binds and listens. Throws Error naming the address when it cannot, or
  // when a non-loopback address has no API key.
  Server(Engine& engine, Encoder encode, std::function<std::string(int32_t)> piece,
         ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  // Serves until Shutdown (or SIGTERM/SIGINT with handle_signals): then
  // stops accepting, answers new requests 503, lets in-flight generations
  // finish up to drain_timeout, cancels the rest, and returns.
  void Run(bool handle_signals);
  void Shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fmstack::serve
