// The API server: the accept loop, drain, and the HTTP sessions.
#include "serve/server.h"

#include <fmt/format.h>

#include <chrono>

#include "serve/server_impl.h"

namespace fmstack::serve {

Server::Impl::Impl(Engine& e, Encoder enc, std::function<std::string(int32_t)> p, ServerOptions opt)
    : engine(e), encode(std::move(enc)), piece(std::move(p)), o(std::move(opt)) {
  registry.Gauge("fmstack_serve_connections", "Open client connections");
  registry.Counter("fmstack_serve_http_responses_total", "HTTP responses, by status code");
  registry.Counter("fmstack_serve_refused_connections_total",
                   "Connections closed at once: the connection cap was reached or draining");
}

bool Server::Impl::Authorized(const Request& req) const {
  if (o.api_key.empty()) return true;
  const auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  const std::string want = "Bearer " + o.api_key;
  const std::string_view got(it->value().data(), it->value().size());
  if (got.size() != want.size()) return false;
  unsigned char diff = 0;  // every byte compared: the time says nothing of the key
  for (size_t i = 0; i < want.size(); ++i) diff |= static_cast<unsigned char>(got[i] ^ want[i]);
  return diff == 0;
}

void Server::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      // Out of descriptors or the like: keep accepting after a pause.
      drain_timer.expires_after(std::chrono::milliseconds(50));
      drain_timer.async_wait([this](beast::error_code) {
        if (!draining) Accept();
      });
      return;
    }
    if (connections >= o.max_connections) {
      registry.Add("fmstack_serve_refused_connections_total", {});
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<HttpSession>(*this, std::move(socket))->Start();
    }
    Accept();
  });
}

void Server::Impl::Drain() {
  if (draining) return;
  draining = true;
  beast::error_code ignored;
  acceptor.close(ignored);
  const auto deadline = std::chrono::steady_clock::now() + o.drain_timeout;
  auto tick = std::make_shared<std::function<void()>>();
  *tick = [this, deadline, tick] {
    const EngineStats st = engine.stats();
    if (st.running + st.waiting == 0 && in_flight.empty()) {
      ioc.stop();
      return;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int64_t id : in_flight) engine.Cancel(id);
      if (std::chrono::steady_clock::now() >= deadline + std::chrono::seconds(2)) {
        ioc.stop();
        return;
      }
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([tick](beast::error_code) { (*tick)(); });
  };
  (*tick)();
}

Server::Server(Engine& engine, Encoder encode, std::function<std::string(int32_t)> piece,
               ServerOptions options)
    : impl_(
          std::make_unique<Impl>(engine, std::move(encode), std::move(piece), std::move(options))) {
  Impl& s = *impl_;
  beast::error_code ec;
  const net::ip::address addr = net::ip::make_address(s.o.host, ec);
  if (ec) throw Error(fmt::format("serve.host \"{}\" is not an IP address", s.o.host));
  if (!addr.is_loopback() && s.o.api_key.empty())
    throw Error(
        fmt::format("serve.host {} is not a loopback address: set serve.api_key_file (a "
                    "0600 file holding the bearer token) to listen there",
                    s.o.host));
  const tcp::endpoint ep(addr, s.o.port);
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(fmt::format("serve: cannot listen on {}:{}: {}", s.o.host, s.o.port, ec.message()));
}

Server::~Server() = default;

uint16_t Server::port() const {
  return impl_->acceptor.local_endpoint().port();
}

void Server::Run(bool handle_signals) {
  Impl& s = *impl_;
  if (handle_signals) {
    s.signals.add(SIGTERM);
    s.signals.add(SIGINT);
    s.signals.async_wait([&s](beast::error_code ec, int) {
      if (!ec) s.Drain();
    });
  }
  s.Accept();
  s.ioc.run();
}

void Server::Shutdown() {
  net::post(impl_->ioc, [this] { impl_->Drain(); });
}

// ---- HTTP ------------------------------------------------------------------

HttpSession::HttpSession(Server::Impl& s, tcp::socket socket) : s_(s), stream_(std::move(socket)) {
  s_.registry.Set("fmstack_serve_connections", {}, static_cast<double>(++s_.connections));
}

HttpSession::~HttpSession() {
  s_.registry.Set("fmstack_serve_connections", {}, static_cast<double>(--s_.connections));
  if (engine_id_ >= 0) s_.in_flight.erase(engine_id_);
}

void HttpSession::Close() {
  closed_ = true;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

// Waits for a request's first byte under the idle deadline, then reads it
// whole under the request deadline (a client sending a byte a second is cut).
void HttpSession::Read() {
  if (buf_.size() > 0) return ReadRequest();
  stream_.expires_after(s_.o.idle_timeout);
  stream_.async_read_some(buf_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (ec) return self->Close();
                            self->buf_.commit(n);
                            self->ReadRequest();
                          });
}

void HttpSession::ReadRequest() {
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(s_.o.max_body_bytes));
  parser_->header_limit(16 * 1024);
  stream_.expires_after(s_.o.request_timeout);
  http::async_read(
      stream_, buf_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRequest(ec); });
}

void HttpSession::OnRequest(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    keep_alive_ = false;
    return SendError(http::status::payload_too_large,
                     fmt::format("the body exceeds serve.max_body ({} bytes)", s_.o.max_body_bytes),
                     "invalid_request_error", "body");
  }
  if (ec == http::error::header_limit) {
    keep_alive_ = false;
    return SendError(http::status::request_header_fields_too_large,
                     "the request's headers exceed 16384 bytes", "invalid_request_error");
  }
  if (ec) return Close();  // timeout, reset, or bytes that are not HTTP
  Request req = parser_->release();
  keep_alive_ = req.keep_alive();
  Handle(req);
}

void HttpSession::Handle(Request& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/health") {
    if (s_.draining)
      return Send(http::status::service_unavailable, R"({"status":"draining"})",
                  "application/json");
    return Send(http::status::ok, R"({"status":"ok"})", "application/json");
  }
  if (!s_.Authorized(req))
    return SendError(http::status::unauthorized,
                     "a valid API key is required: Authorization: Bearer KEY",
                     "authentication_error", {}, "invalid_api_key");
  if (s_.draining)
    return SendError(http::status::service_unavailable, "the server is shutting down",
                     "server_error");
  if (websocket::is_upgrade(req) && path == "/v1/stream") {
    auto socket = stream_.release_socket();
    closed_ = true;
    return StartWebSocket(s_, std::move(socket), std::move(req));
  }
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  if (path == "/v1/models" && get) {
    return Send(http::status::ok,
                Dump({{"object", "list"},
                      {"data", nlohmann::json::array({{{"id", s_.o.model_name},
                                                       {"object", "model"},
                                                       {"created", 0},
                                                       {"owned_by", "fmstack"},
                                                       {"max_model_len", s_.engine.context()}}})}}),
                "application/json");
  }
  if (path == "/metrics" && get)
    return Send(http::status::ok, s_.engine.MetricsText() + s_.registry.Exposition(),
                metrics::Registry::kContentType);
  if (path == "/v1/completions" && post) return Completions(req);
  if (path == "/v1/completions" || path == "/v1/models" || path == "/metrics")
    return SendError(http::status::method_not_allowed,
                     fmt::format("{} does not take {}", path, std::string(req.method_string())),
                     "invalid_request_error");
  return SendError(http::status::not_found, fmt::format("no route {}", path),
                   "invalid_request_error");
}

void HttpSession::Completions(const Request& req) {
  CompletionRequest r;
  try {
    r = ParseCompletion(req.body(), s_.encode);
    if (!r.model.empty() && r.model != s_.o.model_name)
      return SendError(http::status::not_found,
                       fmt::format("the model `{}` does not exist: this server serves `{}`",
                                   r.model, s_.o.model_name),
                       "invalid_request_error", "model", "model_not_found");
    comp_ = {};
    comp_.id = fmt::format("cmpl-{}", s_.next_id++);
    comp_.model = s_.o.model_name;
    comp_.created = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    comp_.with_logprobs = r.sampling.logprobs >= 0;
    streaming_ = r.stream, include_usage_ = r.include_usage, finished_ = false;
    engine_id_ = s_.engine.Submit(
        {std::move(r.prompt), r.sampling},
        s_.PostTo(shared_from_this(), [](HttpSession& h, Delta&& d) { h.OnDelta(std::move(d)); }));
  } catch (const InvalidRequest& e) {
    return SendError(http::status::bad_request, e.what(), "invalid_request_error", e.field());
  } catch (const Overloaded& e) {
    return SendError(http::status::too_many_requests, e.what(), "rate_limit_error", {}, {});
  }
  s_.in_flight.insert(engine_id_);
  stream_.expires_never();  // generation time is the engine's; a disconnect is caught by Watch
  Watch();
  if (!streaming_) return;
  auto res = std::make_shared<http::response<http::empty_body>>(http::status::ok, 11);
  res->set(http::field::content_type, "text/event-stream");
  res->set(http::field::cache_control, "no-cache");
  res->keep_alive(keep_alive_);
  res->chunked(true);
  auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
  writing_ = true;
  stream_.expires_after(s_.o.request_timeout);  // as every write: the client must read
  http::async_write_header(stream_, *sr,
                           [self = shared_from_this(), res, sr](beast::error_code ec, size_t) {
                             self->writing_ = false;
                             if (ec) return self->Close();
                             self->stream_.expires_never();
                             self->Flush();
                           });
}

// A read while the engine generates: EOF or a reset means the client left,
// and its request is cancelled (its KV blocks are freed at the next step).
// Bytes of a pipelined next request are kept for Read.
void HttpSession::Watch() {
  watching_ = true;
  stream_.async_read_some(buf_.prepare(4096),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            self->watching_ = false;
                            if (ec) {
                              if (self->engine_id_ >= 0 && !self->finished_)
                                self->s_.engine.Cancel(self->engine_id_);
                              return self->Close();
                            }
                            self->buf_.commit(n);
                            if (self->resume_) {
                              self->resume_ = false;
                              self->Read();
                            }
                          });
}

void HttpSession::OnDelta(Delta&& d) {
  comp_.text += d.text;
  comp_.tokens.insert(comp_.tokens.end(), d.tokens.begin(), d.tokens.end());
  comp_.samples.insert(comp_.samples.end(), d.samples.begin(), d.samples.end());
  if (d.finished) {
    finished_ = true;
    s_.in_flight.erase(engine_id_);
    comp_.finish_reason = d.finish_reason;
    comp_.prompt_tokens = d.prompt_tokens, comp_.completion_tokens = d.completion_tokens;
    comp_.cached_tokens = d.cached_tokens;
  }
  if (closed_) return;
  if (!streaming_) {
    if (!d.finished) return;
    if (d.finish_reason.rfind("error", 0) == 0)
      return SendError(http::status::internal_server_error, d.finish_reason, "server_error");
    return Send(http::status::ok, CompletionBody(comp_, s_.piece), "application/json");
  }
  Queue("data: " + ChunkBody(comp_, d, s_.piece) + "\n\n", false);
  if (d.finished) {
    if (include_usage_) Queue("data: " + UsageChunkBody(comp_) + "\n\n", false);
    Queue("data: [DONE]\n\n", false);
    Queue("", true);
  }
}

void HttpSession::Queue(std::string chunk, bool last) {
  if (last) chunk.clear();
  out_.push_back(std::move(chunk));
  Flush();
}

void HttpSession::Flush() {
  if (writing_ || out_.empty() || closed_) return;
  writing_ = true;
  // A client that stops reading would hold this write forever: it gets the
  // request deadline (which also bounds the Watch read while it runs).
  stream_.expires_after(s_.o.request_timeout);
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
    self->writing_ = false;
    const bool last = self->out_.front().empty();
    self->out_.pop_front();
    if (ec) {
      if (!self->finished_) self->s_.engine.Cancel(self->engine_id_);
      return self->Close();
    }
    if (last) return self->AfterResponse(http::status::ok);
    self->stream_.expires_never();  // between tokens the engine sets the pace; Watch sees a leaver
    self->Flush();
  };
  if (out_.front().empty())
    net::async_write(stream_, http::make_chunk_last(), done);
  else
    net::async_write(stream_, http::make_chunk(net::buffer(out_.front())), done);
}

void HttpSession::AfterResponse(http::status status) {
  s_.registry.Add("fmstack_serve_http_responses_total",
                  {{"code", std::to_string(static_cast<int>(status))}});
  engine_id_ = -1;
  if (!keep_alive_ || s_.draining) return Close();
  if (watching_) {  // the watch read becomes the wait for the next request
    resume_ = true;
    stream_.expires_after(s_.o.idle_timeout);
    return;
  }
  Read();
}

void HttpSession::Send(http::status status, std::string body, std::string_view type,
                       std::string_view retry_after) {
  if (closed_) return;
  auto res = std::make_shared<http::response<http::string_body>>(status, 11);
  res->set(http::field::content_type, std::string(type));
  if (!retry_after.empty()) res->set(http::field::retry_after, std::string(retry_after));
  res->keep_alive(keep_alive_);
  res->body() = std::move(body);
  res->prepare_payload();
  stream_.expires_after(s_.o.request_timeout);  // a client that does not read is dropped
  http::async_write(stream_, *res,
                    [self = shared_from_this(), res, status](beast::error_code ec, size_t) {
                      if (ec) return self->Close();
                      self->AfterResponse(status);
                    });
}

void HttpSession::SendError(http::status status, std::string_view message, std::string_view type,
                            std::string_view param, std::string_view code) {
  Send(status, ErrorBody(message, type, param, code), "application/json",
       status == http::status::too_many_requests ? "1" : "");
}

}  // namespace fmstack::serve
