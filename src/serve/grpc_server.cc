#include "serve/grpc_server.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "stream.grpc.pb.h"

namespace fmstack::serve {
namespace {

namespace pb = fmstack::serve::v1;

// One call's shared state: the engine's sink fills `out`, the call's writer
// thread drains it.
struct Session {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<pb::ServerMessage> out;
  bool closing = false;
  int64_t active = -1;
  std::vector<int32_t> context;
};

pb::ServerMessage Failure(const std::string& message, const std::string& param) {
  pb::ServerMessage m;
  m.mutable_error()->set_message(message);
  m.mutable_error()->set_param(param);
  return m;
}

SamplingParams Sampling(const pb::Generate& g) {
  SamplingParams p;
  p.max_tokens = g.max_tokens() == 0 ? 16 : g.max_tokens();
  if (g.has_temperature()) p.temperature = g.temperature();
  if (g.has_top_p()) p.top_p = g.top_p();
  p.top_k = g.top_k();
  if (g.has_seed()) p.seed = g.seed();
  p.stop.assign(g.stop().begin(), g.stop().end());
  p.stop_token_ids.assign(g.stop_token_ids().begin(), g.stop_token_ids().end());
  return p;
}

}  // namespace

struct GrpcServer::Impl final : pb::Generation::Service {
  Impl(Engine& e, Encoder enc, std::function<std::string(int32_t)> p, GrpcOptions o)
      : engine(e), encode(std::move(enc)), piece(std::move(p)), opt(std::move(o)) {}

  grpc::Status Stream(grpc::ServerContext* ctx,
                      grpc::ServerReaderWriter<pb::ServerMessage, pb::ClientMessage>* rw) override;
  void Handle(const pb::ClientMessage& m, const std::shared_ptr<Session>& s);

  Engine& engine;
  Encoder encode;
  std::function<std::string(int32_t)> piece;
  GrpcOptions opt;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::atomic<int64_t> streams{0};
};

void GrpcServer::Impl::Handle(const pb::ClientMessage& m, const std::shared_ptr<Session>& s) {
  std::unique_lock lock(s->mu);
  auto reply = [&](pb::ServerMessage msg) {
    s->out.push_back(std::move(msg));
    s->cv.notify_all();
  };
  try {
    if (m.has_append()) {
      std::vector<int32_t> t =
          m.append().text().empty()
              ? std::vector<int32_t>(m.append().tokens().begin(), m.append().tokens().end())
              : encode(m.append().text());
      if (std::ssize(s->context) + std::ssize(t) >= engine.context())
        throw InvalidRequest("text", fmt::format("the session's context would reach {} tokens, the "
                                                 "model's is {}",
                                                 s->context.size() + t.size(), engine.context()));
      s->context.insert(s->context.end(), t.begin(), t.end());
    } else if (m.has_generate()) {
      if (s->active >= 0) throw InvalidRequest("generate", "a generation is already running");
      std::weak_ptr<Session> weak = s;
      s->active = engine.Submit({s->context, Sampling(m.generate())}, [weak](Delta&& d) {
        const std::shared_ptr<Session> ss = weak.lock();
        if (!ss) return;
        std::lock_guard l(ss->mu);
        ss->context.insert(ss->context.end(), d.tokens.begin(), d.tokens.end());
        if (!d.tokens.empty() || !d.text.empty()) {
          pb::ServerMessage t;
          t.mutable_tokens()->set_text(d.text);
          t.mutable_tokens()->mutable_ids()->Add(d.tokens.begin(), d.tokens.end());
          ss->out.push_back(std::move(t));
        }
        if (d.finished) {
          pb::ServerMessage done;
          done.mutable_done()->set_finish_reason(d.finish_reason);
          done.mutable_done()->set_prompt_tokens(d.prompt_tokens);
          done.mutable_done()->set_completion_tokens(d.completion_tokens);
          done.mutable_done()->set_cached_tokens(d.cached_tokens);
          ss->out.push_back(std::move(done));
          ss->active = -1;
        }
        ss->cv.notify_all();
      });
    } else if (m.has_cancel()) {
      if (s->active >= 0) engine.Cancel(s->active);
    } else if (m.has_reset()) {
      if (s->active >= 0) throw InvalidRequest("reset", "a generation is running: cancel it first");
      s->context.clear();
    } else {
      throw InvalidRequest("kind", "a message holds append, generate, cancel or reset");
    }
  } catch (const InvalidRequest& e) {
    reply(Failure(e.what(), e.field()));
  } catch (const Overloaded& e) {
    reply(Failure(e.what(), ""));
  }
}

grpc::Status GrpcServer::Impl::Stream(
    grpc::ServerContext* ctx, grpc::ServerReaderWriter<pb::ServerMessage, pb::ClientMessage>* rw) {
  if (!opt.api_key.empty()) {
    const auto& md = ctx->client_metadata();
    const auto it = md.find("authorization");
    if (it == md.end() ||
        std::string(it->second.data(), it->second.size()) != "Bearer " + opt.api_key)
      return {grpc::StatusCode::UNAUTHENTICATED,
              "a valid API key is required: authorization: Bearer KEY"};
  }
  if (++streams > opt.max_streams) {
    --streams;
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            fmt::format("{} streams are open (the server's cap)", opt.max_streams)};
  }
  auto s = std::make_shared<Session>();
  std::thread writer([&] {
    std::unique_lock lock(s->mu);
    for (;;) {
      s->cv.wait(lock, [&] { return !s->out.empty() || s->closing; });
      if (s->out.empty()) return;
      pb::ServerMessage m = std::move(s->out.front());
      s->out.pop_front();
      lock.unlock();
      const bool ok = rw->Write(m);
      lock.lock();
      if (!ok) {
        if (s->active >= 0) engine.Cancel(s->active);
        return;
      }
    }
  });
  pb::ClientMessage m;
  while (rw->Read(&m)) Handle(m, s);
  {
    std::unique_lock lock(s->mu);
    if (ctx->IsCancelled() && s->active >= 0) engine.Cancel(s->active);
    // A client that half-closed still gets the generation it asked for (or,
    // gone, the cancel above); the wait ends with the request's Done.
    s->cv.wait_for(lock, std::chrono::minutes(10), [&] { return s->active < 0; });
    s->closing = true;
    s->cv.notify_all();
  }
  writer.join();
  --streams;
  return grpc::Status::OK;
}

GrpcServer::GrpcServer(Engine& engine, Encoder encode, std::function<std::string(int32_t)> piece,
                       GrpcOptions options)
    : impl_(
          std::make_unique<Impl>(engine, std::move(encode), std::move(piece), std::move(options))) {
  Impl& s = *impl_;
  grpc::ServerBuilder b;
  const std::string addr = fmt::format("{}:{}", s.opt.host, s.opt.port);
  b.AddListeningPort(addr, grpc::InsecureServerCredentials(), &s.port);
  b.RegisterService(&s);
  const int ping_ms = static_cast<int>(s.opt.ping_interval.count());
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ping_ms);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2 * ping_ms);
  b.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  b.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  b.SetMaxReceiveMessageSize(static_cast<int>(s.opt.max_message_bytes));
  grpc::ResourceQuota quota("fmstack-serve");
  quota.SetMaxThreads(static_cast<int>(2 * s.opt.max_streams + 16));
  b.SetResourceQuota(quota);
  s.server = b.BuildAndStart();
  if (!s.server || s.port == 0)
    throw Error(fmt::format("serve: gRPC cannot listen on {} (serve.grpc_port)", addr));
}

GrpcServer::~GrpcServer() {
  Shutdown(std::chrono::milliseconds(0));
}

int GrpcServer::port() const {
  return impl_->port;
}

void GrpcServer::Shutdown(std::chrono::milliseconds grace) {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace fmstack::serve
