// serve: the bidirectional stream over HTTP/2, as a gRPC service
// (src/serve/proto/stream.proto, fmstack.serve.v1.Generation/Stream): the
// same session the WebSocket route offers, for clients that speak gRPC.
// HTTP/2 keepalive pings go out every ping_interval; a peer that leaves
// them unanswered for two intervals is dropped and its generation
// cancelled. With an API key, calls need "authorization: Bearer KEY"
// metadata.
//
// Thread-safety: gRPC's own threads serve the calls; Shutdown from any one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "serve/api.h"
#include "serve/engine.h"

namespace fmstack::serve {

struct GrpcOptions {
  std::string host = "127.0.0.1";
  int port = 8001;  // 0: any free port
  std::string api_key;
  std::chrono::milliseconds ping_interval{60000};
  int64_t max_message_bytes = 1 << 20;
  int64_t max_streams = 256;  // calls at once; more are refused RESOURCE_EXHAUSTED
};

class GrpcServer {
 public:
  // Starts listening. Throws Error naming the address when it cannot.
  GrpcServer(Engine& engine, Encoder encode, std::function<std::string(int32_t)> piece,
             GrpcOptions options);
  ~GrpcServer();
  int port() const;
  // Stops accepting calls; cancels the ones still open after `grace`.
  void Shutdown(std::chrono::milliseconds grace);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fmstack::serve
