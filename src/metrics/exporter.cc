#include "metrics/exporter.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/crypto.h>

#include <cstdint>
#include <map>
#include <optional>
#include <thread>

#include "util/beast.h"
#include "util/error.h"

namespace fmstack::metrics {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

void CloseOnExec(int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace

class Connection;

struct Exporter::Impl {
  Impl(const Registry& r, std::string t, ExporterOptions o)
      : registry(r), token("Bearer " + std::move(t)), options(o) {}

  void Accept();
  void Admit(tcp::socket socket);
  void Forget(uint64_t id) { open.erase(id); }
  bool Authorized(std::string_view header) const {
    return header.size() == token.size() &&
           CRYPTO_memcmp(header.data(), token.data(), token.size()) == 0;
  }

  const Registry& registry;
  const std::string token;  // "Bearer TOKEN"
  const ExporterOptions options;
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  // Open connections by age (ids increase): the io thread's only.
  std::map<uint64_t, std::weak_ptr<Connection>> open;
  uint64_t next_id = 0;
  std::thread thread;
};

// One client: requests read under a deadline, answered, and either kept
// (an authenticated keep-alive) or closed.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(Exporter::Impl& ex, tcp::socket socket, uint64_t id)
      : ex_(ex), stream_(std::move(socket)), id_(id) {}

  bool authenticated() const { return authenticated_; }
  void Start() { Read(); }
  void Close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  void Read() {
    parser_.emplace();
    parser_->header_limit(8192);
    parser_->body_limit(0);  // a scrape is a GET
    stream_.expires_after(authenticated_ ? ex_.options.idle_timeout : ex_.options.request_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->End();
                       self->Answer(self->parser_->release());
                     });
  }

  void Answer(const http::request<http::empty_body>& req) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(req.version());
    res->set(http::field::server, "fmstack");
    const beast::string_view auth = req[http::field::authorization];
    const bool ok = ex_.Authorized(std::string_view(auth.data(), auth.size()));
    if (!ok) {
      res->result(http::status::unauthorized);
      res->set(http::field::www_authenticate, "Bearer");
      res->set(http::field::content_type, "text/plain");
      res->body() = "401: a bearer token is required (RUN_DIR/metrics/token)\n";
    } else if (req.target() != "/metrics") {
      res->result(http::status::not_found);
      res->set(http::field::content_type, "text/plain");
      res->body() = "404: only /metrics is served\n";
    } else if (req.method() != http::verb::get && req.method() != http::verb::head) {
      res->result(http::status::method_not_allowed);
      res->set(http::field::allow, "GET, HEAD");
    } else {
      res->result(http::status::ok);
      res->set(http::field::content_type, Registry::kContentType);
      if (req.method() == http::verb::get) res->body() = ex_.registry.Exposition();
    }
    authenticated_ = authenticated_ || ok;
    // Only a client with the token keeps its connection.
    res->keep_alive(ok && req.keep_alive());
    res->prepare_payload();
    stream_.expires_after(ex_.options.request_timeout);  // a client that does not read is dropped
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec || !res->keep_alive()) return self->End();
                        self->Read();
                      });
  }

  void End() {
    Close();
    ex_.Forget(id_);
  }

  Exporter::Impl& ex_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{8192};
  std::optional<http::request_parser<http::empty_body>> parser_;
  const uint64_t id_;
  bool authenticated_ = false;
};

void Exporter::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // stopping
    if (!ec) Admit(std::move(socket));
    Accept();  // a failed accept (EMFILE, a reset) does not stop the service
  });
}

void Exporter::Impl::Admit(tcp::socket socket) {
  CloseOnExec(socket.native_handle());  // workers forked later must not hold it
  if (static_cast<int>(open.size()) >= options.max_connections) {
    // Full: the oldest client that has not shown the token makes room.
    for (auto it = open.begin(); it != open.end(); ++it) {
      const std::shared_ptr<Connection> c = it->second.lock();
      if (c && c->authenticated()) continue;
      if (c) c->Close();  // its pending read ends and it forgets itself
      open.erase(it);
      break;
    }
    if (static_cast<int>(open.size()) >= options.max_connections) {
      beast::error_code ignored;
      socket.close(ignored);
      return;
    }
  }
  const uint64_t id = next_id++;
  auto c = std::make_shared<Connection>(*this, std::move(socket), id);
  open.emplace(id, c);
  c->Start();
}

Exporter::Exporter(const Registry& registry, const std::string& host, int port, std::string token,
                   ExporterOptions options)
    : host_(host) {
  if (token.size() < 16) throw Error("metrics: the scrape token is too short (16 bytes at least)");
  if (options.max_connections < 1) throw Error("metrics: max_connections must be at least 1");
  impl_ = std::make_unique<Impl>(registry, std::move(token), options);
  beast::error_code ec;
  const asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec) throw Error(fmt::format("metrics: '{}' is not an IP address", host));
  const tcp::endpoint want(addr, static_cast<uint16_t>(port));
  tcp::acceptor& a = impl_->acceptor;
  a.open(want.protocol(), ec);
  if (!ec) {
    CloseOnExec(a.native_handle());
    // Not SO_REUSEPORT: another process of this user could bind beside us.
    a.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) a.bind(want, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec)
    throw Error(
        fmt::format("metrics: cannot listen on {}:{}: {} (in use, or not this host's address)",
                    host, port, ec.message()));
  port_ = a.local_endpoint().port();
  impl_->Accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

Exporter::~Exporter() {
  // On the io thread: nothing it touches is shared with this one.
  asio::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
    for (auto& [id, weak] : impl->open) {
      if (const std::shared_ptr<Connection> c = weak.lock()) c->Close();
    }
    impl->open.clear();
    impl->io.stop();  // pending handlers are dropped with the io_context
  });
  impl_->thread.join();
}

}  // namespace fmstack::metrics
