// The WebSocket session (GET /v1/stream): one persistent connection on which
// a client appends input, asks for generation, cancels, and receives tokens
// as they are made. Messages are JSON text frames:
//   client: {"type": "append", "text": "..."} or {"type": "append", "tokens": [...]}
//           {"type": "generate", "max_tokens": 32, "temperature": 0, ...}
//           {"type": "cancel"}   {"type": "reset"}
//   server: {"type": "token", "text": "...", "tokens": [...]}
//           {"type": "done", "finish_reason": "...", "usage": {...}}
//           {"type": "error", "message": "...", "param": "..."}
// What a generation produces is appended to the session's context, so a
// conversation continues with the next append and generate.
#include <fmt/format.h>

#include "serve/server_impl.h"

namespace fmstack::serve {
namespace {

using nlohmann::json;

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(Server::Impl& s, tcp::socket socket)
      : s_(s), ws_(std::move(socket)), ping_timer_(s.ioc) {
    s_.registry.Set("fmstack_serve_connections", {}, static_cast<double>(++s_.connections));
  }
  ~WsSession() {
    s_.registry.Set("fmstack_serve_connections", {}, static_cast<double>(--s_.connections));
    if (active_ >= 0) s_.in_flight.erase(active_);
  }

  void Run(Request req) {
    beast::get_lowest_layer(ws_).expires_never();
    websocket::stream_base::timeout t{};
    t.handshake_timeout = s_.o.request_timeout;
    t.idle_timeout = websocket::stream_base::none();  // liveness is ours: pings below
    t.keep_alive_pings = false;
    ws_.set_option(t);
    ws_.read_message_max(static_cast<uint64_t>(s_.o.max_body_bytes));
    ws_.control_callback([this](websocket::frame_type kind, beast::string_view) {
      if (kind == websocket::frame_type::pong) unanswered_ = 0;
    });
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->Read();
      self->Tick();
    });
  }

 private:
  // Every ping_interval a ping; a peer that has left two unanswered is dropped.
  void Tick() {
    ping_timer_.expires_after(s_.o.ping_interval);
    ping_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec || self->closed_) return;
      if (self->unanswered_ >= 2) return self->Drop();
      ++self->unanswered_;
      self->ws_.async_ping({}, [self](beast::error_code e) {
        if (e) self->Drop();
      });
      self->Tick();
    });
  }

  void Drop() {
    if (closed_) return;
    closed_ = true;
    if (active_ >= 0) s_.engine.Cancel(active_);
    ping_timer_.cancel();
    beast::get_lowest_layer(ws_).close();
  }

  void Read() {
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Drop();
      const std::string text = beast::buffers_to_string(self->in_.data());
      self->in_.consume(self->in_.size());
      self->OnMessage(text);
      self->Read();
    });
  }

  void OnMessage(const std::string& text) {
    json m;
    try {
      m = json::parse(text);
    } catch (const json::parse_error& e) {
      return Error(fmt::format("the message is not valid JSON: {}", e.what()), "message");
    }
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string())
      return Error("a message is a JSON object with a string \"type\"", "type");
    const std::string type = m["type"].get<std::string>();
    try {
      if (type == "append") return Append(m);
      if (type == "generate") return Generate(m);
      if (type == "cancel") {
        if (active_ >= 0) s_.engine.Cancel(active_);
        return;
      }
      if (type == "reset") {
        if (active_ >= 0) return Error("a generation is running: cancel it first", "type");
        context_.clear();
        return;
      }
    } catch (const InvalidRequest& e) {
      return Error(e.what(), e.field());
    } catch (const Overloaded& e) {
      return Error(e.what(), "");
    }
    Error(fmt::format("unknown message type \"{}\" (append, generate, cancel, reset)", type),
          "type");
  }

  void Append(const json& m) {
    if (m.contains("text") && m["text"].is_string()) {
      const auto t = s_.encode(m["text"].get_ref<const std::string&>());
      context_.insert(context_.end(), t.begin(), t.end());
    } else if (m.contains("tokens") && m["tokens"].is_array()) {
      for (const json& t : m["tokens"]) {
        if (!t.is_number_integer()) throw InvalidRequest("tokens", "tokens must be token ids");
        context_.push_back(t.get<int32_t>());
      }
    } else {
      throw InvalidRequest("text", "append needs \"text\" (a string) or \"tokens\" (token ids)");
    }
    if (std::ssize(context_) >= s_.engine.context())
      throw InvalidRequest("text", fmt::format("the session's context of {} tokens reaches the "
                                               "model's {}",
                                               context_.size(), s_.engine.context()));
  }

  void Generate(const json& m) {
    if (active_ >= 0) throw InvalidRequest("type", "a generation is already running");
    const SamplingParams sp = ParseSampling(m);
    active_ = s_.engine.Submit(
        {context_, sp},
        s_.PostTo(shared_from_this(), [](WsSession& w, Delta&& d) { w.OnDelta(std::move(d)); }));
    s_.in_flight.insert(active_);
  }

  void OnDelta(Delta&& d) {
    context_.insert(context_.end(), d.tokens.begin(), d.tokens.end());
    if (!d.tokens.empty() || !d.text.empty())
      Send(Dump({{"type", "token"}, {"text", d.text}, {"tokens", d.tokens}}));
    if (d.finished) {
      s_.in_flight.erase(active_);
      active_ = -1;
      Send(Dump({{"type", "done"},
                 {"finish_reason", d.finish_reason},
                 {"usage",
                  {{"prompt_tokens", d.prompt_tokens},
                   {"completion_tokens", d.completion_tokens},
                   {"cached_tokens", d.cached_tokens}}}}));
    }
  }

  void Error(const std::string& message, const std::string& param) {
    Send(Dump({{"type", "error"}, {"message", message}, {"param", param}}));
  }

  void Send(std::string msg) {
    if (closed_) return;
    out_.push_back(std::move(msg));
    if (out_.size() == 1) Write();
  }

  void Write() {
    ws_.text(true);
    ws_.async_write(net::buffer(out_.front()),
                    [self = shared_from_this()](beast::error_code ec, size_t) {
                      if (ec) return self->Drop();
                      self->out_.pop_front();
                      if (!self->out_.empty()) self->Write();
                    });
  }

  Server::Impl& s_;
  websocket::stream<beast::tcp_stream> ws_;
  net::steady_timer ping_timer_;
  beast::flat_buffer in_;
  std::deque<std::string> out_;
  std::vector<int32_t> context_;
  int64_t active_ = -1;
  int unanswered_ = 0;
  bool closed_ = false;
};

}  // namespace

void StartWebSocket(Server::Impl& s, tcp::socket socket, Request req) {
  std::make_shared<WsSession>(s, std::move(socket))->Run(std::move(req));
}

}  // namespace fmstack::serve
