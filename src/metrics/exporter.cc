#include "metrics/exporter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <httplib.h>
#include <openssl/crypto.h>
#include <sys/socket.h>

#include "util/error.h"

namespace fmstack::metrics {

Exporter::Exporter(const Registry& registry, const std::string& host, int port, std::string token)
    : registry_(registry), host_(host), token_(std::move(token)) {
  if (token_.size() < 16) throw Error("metrics: the scrape token is too short (16 bytes at least)");
  server_ = std::make_unique<httplib::Server>();
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  server_->set_payload_max_length(4096);  // a scrape is a GET: nothing to upload
  // Not httplib's SO_REUSEPORT (another process of this user could bind the
  // port beside us and read the token); and the workers, forked later, must
  // not inherit the listening socket.
  server_->set_socket_options([](int sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  server_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string want = "Bearer " + token_;
    const std::string got = req.get_header_value("Authorization");
    if (got.size() != want.size() || CRYPTO_memcmp(got.data(), want.data(), got.size()) != 0) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("401: a bearer token is required (RUN_DIR/metrics/token)\n", "text/plain");
      return;
    }
    res.set_content(registry_.Exposition(), Registry::kContentType);
  });
  port_ = port == 0 ? server_->bind_to_any_port(host_)
                    : (server_->bind_to_port(host_, port) ? port : -1);
  if (port_ <= 0) {
    throw Error(fmt::format("metrics: cannot listen on {}:{} (in use, or not this host's address)",
                            host_, port));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

Exporter::~Exporter() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace fmstack::metrics
