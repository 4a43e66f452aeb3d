// metrics: serves a Registry at /metrics over HTTP (cpp-httplib), for
// Prometheus to scrape. Every request must carry "Authorization: Bearer
// TOKEN" (Prometheus: authorization.credentials_file); others get 401. The
// listening address is the caller's (loopback by default in `fmstack run`);
// reads and writes time out, and requests are small and bounded.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "metrics/registry.h"

namespace httplib {
class Server;
}

namespace fmstack::metrics {

class Exporter {
 public:
  // Binds host:port (port 0: any free one) and serves on a thread of its
  // own. Throws Error naming the address when it cannot bind.
  Exporter(const Registry& registry, const std::string& host, int port, std::string token);
  ~Exporter();  // stops serving and joins the thread
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  const Registry& registry_;
  std::string host_, token_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace fmstack::metrics
