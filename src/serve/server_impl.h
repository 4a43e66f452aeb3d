// serve: the server's insides, shared by its HTTP and WebSocket sessions.
// Everything here runs on the server's one event-loop thread, except the
// engine's sinks, which post back onto it.
#pragma once

#include <deque>
#include <memory>
#include <set>
#include <string>

#include "metrics/registry.h"
#include "util/beast.h"
#include "serve/server.h"

namespace fmstack::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = net::ip::tcp;
using Request = http::request<http::string_body>;

struct Server::Impl {
  Impl(Engine& e, Encoder enc, std::function<std::string(int32_t)> p, ServerOptions opt);

  void Accept();
  void Drain();
  // Whether `req` carries the API key (always true without one).
  bool Authorized(const Request& req) const;
  // A sink that runs `f` on the loop thread while `owner` lives.
  template <class Owner, class F>
  Sink PostTo(const std::shared_ptr<Owner>& owner, F f) {
    return [this, weak = std::weak_ptr<Owner>(owner), f](Delta&& d) {
      net::post(ioc, [weak, f, d = std::move(d)]() mutable {
        if (auto self = weak.lock()) f(*self, std::move(d));
      });
    };
  }

  Engine& engine;
  Encoder encode;
  std::function<std::string(int32_t)> piece;
  ServerOptions o;
  // Declared before the event loop, so that they outlive the sessions its
  // pending handlers still hold when it is destroyed.
  metrics::Registry registry;
  std::set<int64_t> in_flight;  // engine request ids of live sessions
  bool draining = false;
  int64_t connections = 0;
  int64_t next_id = 1;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::signal_set signals{ioc};
  net::steady_timer drain_timer{ioc};
};

// One HTTP connection: reads requests, answers them, streams completions.
class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(Server::Impl& s, tcp::socket socket);
  ~HttpSession();
  void Start() { Read(); }

 private:
  void Read();
  void ReadRequest();
  void OnRequest(beast::error_code ec);
  void Handle(Request& req);
  void Completions(const Request& req);
  void OnDelta(Delta&& d);
  void Send(http::status status, std::string body, std::string_view type,
            std::string_view retry_after = {});
  void SendError(http::status status, std::string_view message, std::string_view type,
                 std::string_view param = {}, std::string_view code = {});
  void Queue(std::string chunk, bool last);
  void Flush();
  void Watch();
  // Books the response and reads the next request (or closes).
  void AfterResponse(http::status status);
  void Close();

  Server::Impl& s_;
  beast::tcp_stream stream_;
  beast::flat_buffer buf_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  // The completion in flight, if any.
  int64_t engine_id_ = -1;
  bool streaming_ = false, finished_ = false, closed_ = false;
  Completion comp_;
  bool include_usage_ = false;
  std::deque<std::string> out_;  // stream chunks waiting to be written; "" = the last chunk
  bool writing_ = false, watching_ = false, resume_ = false;
};

// One WebSocket session (GET /v1/stream).
void StartWebSocket(Server::Impl& s, tcp::socket socket, Request req);

}  // namespace fmstack::serve
