// metrics: serves a Registry at /metrics over HTTP/1.1 (Boost.Beast), for
// Prometheus to scrape. Every request must carry "Authorization: Bearer
// TOKEN" (Prometheus: authorization.credentials_file); others get 401 and
// their connection is closed. The listening address is the caller's
// (loopback by default in `fmstack run`).
//
// What a client without the token can hold is bounded, so that slow or idle
// connections cannot starve the scrapes (a false "run gone" alert): a
// request must arrive whole within `request_timeout` of the connection (or
// of the previous response); at most `max_connections` are open, and a new
// one evicts the oldest that has not yet made an authenticated request.
// Requests are GETs of at most 8 KiB of headers, no body.
//
// Thread-safety: one thread of its own serves every connection; the
// Registry is read from it (Registry is thread-safe). Construction binds
// and listens before the thread starts, and destruction stops it and joins
// it within `request_timeout` whatever the clients do: start and stop do
// not race.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "metrics/registry.h"

namespace fmstack::metrics {

struct ExporterOptions {
  int max_connections = 64;
  std::chrono::milliseconds request_timeout{2000};  // a whole request, and a response's write
  std::chrono::milliseconds idle_timeout{60000};    // an authenticated keep-alive between scrapes
};

class Exporter {
 public:
  // Binds host:port (port 0: any free one) and serves on a thread of its
  // own. Throws Error naming the address when it cannot bind.
  Exporter(const Registry& registry, const std::string& host, int port, std::string token,
           ExporterOptions options = {});
  ~Exporter();  // stops serving, closes every connection and joins the thread
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  struct Impl;

 private:
  std::string host_;
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fmstack::metrics
